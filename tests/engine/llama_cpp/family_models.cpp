// specd's side of the llama.cpp comparison of the model families
// (families.test.mjs):
//
//   family_models write DIR VOCAB.gguf
//       writes each preset of tests/support/family_models.h (llama3, qwen2,
//       qwen3) in f32 and f16 as DIR/NAME-TYPE.gguf, the vocabulary's
//       tokenizer.* keys copied in, and prints the file names, one a line;
//   family_models run MODEL.gguf N_GEN f32|f16 ID...
//       feeds the ids as one batch through the fast CPU forward, keys and
//       values cached in the given type (llama.cpp's cache is told the same), and prints
//       JSON {"logits": [[n_vocab floats] per id], "greedy": [N_GEN ids]}:
//       the logits after each prompt position, then a greedy continuation
//       (EOS does not stop it);
//   family_models write-shape OUT.gguf VOCAB.gguf PRESET DIM LAYERS FFN HEADS KV_HEADS f32|f16
//       writes one model of a preset's family traits (or llama2: Llama 2's graph) at a real model's shape
//       (e.g. llama3 2048 16 8192 32 8 for Llama-3.2-1B): the benchmark files
//       of tools/bench-families.sh.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "support/family_models.h"

using namespace specd;

namespace {

int write_models(const std::string& dir, const std::string& vocab_path) {
    const gguf::File vocab = gguf::File::open(vocab_path);
    for (const std::string& family : test::family_preset_names()) {
        for (TensorType type : {TensorType::F32, TensorType::F16}) {
            test::FamilyModelSpec spec = test::family_preset(family);
            spec.matrix_type = type;
            const std::string name = family + "-" + tensor_type_name(type) + ".gguf";
            test::write_family_model(dir + "/" + name, spec, vocab);
            std::printf("%s\n", name.c_str());
        }
    }
    return 0;
}

int write_shape(char** argv) {
    // "llama2": the plain Llama 2 graph (the spec's defaults), the reference path.
    test::FamilyModelSpec spec = std::string(argv[4]) == "llama2" ? test::FamilyModelSpec{} : test::family_preset(argv[4]);
    auto positive = [](const char* text, const char* what) {
        const long v = std::atol(text);
        if (v <= 0) throw Error(std::string(what) + " must be a positive integer, not '" + text + "'");
        return static_cast<int64_t>(v);
    };
    spec.name = std::string(argv[4]) + "-shape";
    spec.dim = positive(argv[5], "DIM");
    spec.layers = positive(argv[6], "LAYERS");
    spec.ffn = positive(argv[7], "FFN");
    spec.heads = positive(argv[8], "HEADS");
    spec.kv_heads = positive(argv[9], "KV_HEADS");
    spec.head_dim = 0;  // dim / heads, as the real shapes have
    spec.ctx = 4096;
    const std::string type = argv[10];
    if (type != "f32" && type != "f16") throw Error("the type must be f32 or f16, not " + type);
    spec.matrix_type = type == "f16" ? TensorType::F16 : TensorType::F32;
    test::write_family_model(argv[2], spec, gguf::File::open(argv[3]));
    return 0;
}

int run(const std::string& path, int n_gen, const std::string& kv_type, const std::vector<int32_t>& ids) {
    auto model = LlamaModel::load(path);
    ThreadPool pool(1);
    ForwardPass fwd(*model, pool);
    KvCacheShape shape = fwd.kv_shape(model->hparams().n_ctx_train, 1);
    if (kv_type != "f32" && kv_type != "f16") throw Error("KV type must be f32 or f16, not " + kv_type);
    shape.type = kv_type == "f32" ? TensorType::F32 : TensorType::F16;
    PagedKvCache kv(shape);
    const int32_t seq = kv.create_sequence();
    const size_t V = static_cast<size_t>(model->hparams().n_vocab);
    BatchItem prompt{seq, ids, true};
    const auto logits = fwd.forward(kv, std::span<const BatchItem>(&prompt, 1));
    std::string out = "{\"logits\": [";
    char buf[32];
    auto argmax = [&](const float* row) {
        size_t best = 0;
        for (size_t v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
        return static_cast<int32_t>(best);
    };
    for (size_t t = 0; t < ids.size(); ++t) {
        out += t ? ", [" : "[";
        for (size_t v = 0; v < V; ++v) {
            std::snprintf(buf, sizeof buf, v ? ",%.7g" : "%.7g", logits[t * V + v]);
            out += buf;
        }
        out += "]";
    }
    out += "], \"greedy\": [";
    int32_t next = argmax(&logits[(ids.size() - 1) * V]);
    for (int i = 0; i < n_gen; ++i) {
        if (i) out += ',';
        out += std::to_string(next);
        if (i + 1 == n_gen) break;
        BatchItem step{seq, std::span<const int32_t>(&next, 1), false};
        next = argmax(fwd.forward(kv, std::span<const BatchItem>(&step, 1)).data());
    }
    out += "]}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "write" && argc == 4) return write_models(argv[2], argv[3]);
        if (command == "write-shape" && argc == 11) return write_shape(argv);
        if (command == "run" && argc >= 6) {
            std::vector<int32_t> ids;
            for (int i = 5; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
            return run(argv[2], std::atoi(argv[3]), argv[4], ids);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "family_models: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: family_models write DIR VOCAB.gguf | run MODEL.gguf N_GEN f32|f16 ID... |\n"
                 "       write-shape OUT.gguf VOCAB.gguf PRESET DIM LAYERS FFN HEADS KV_HEADS f32|f16\n");
    return 2;
}
