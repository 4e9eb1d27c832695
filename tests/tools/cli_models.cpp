// Writes the model files tests/tools/cli_bad_input.sh runs `specd info` and
// `specd generate` on (tests/support/family_models.h: random weights in
// llama.cpp's layout, stories15M's vocabulary):
//
//   cli_models DIR STORIES15M.gguf
//
// DIR/qwen2.gguf, DIR/gemma3.gguf: good family models;
// DIR/bad-arch.gguf: general.architecture "gpt2";
// DIR/missing-tensor.gguf: a qwen3 without blk.0.attn_q_norm.weight;
// DIR/misshaped-tensor.gguf: a qwen2 whose blk.1.attn_k.bias has 16 elements;
// DIR/draft-text.gguf: a llama whose token 1000 reads "▁changedtoken";
// DIR/bpe-no-merges.gguf: tokenizer.ggml.model "gpt2" without merges;
// DIR/unknown-pre.gguf: a BPE vocabulary (ids' texts as merges allow) whose
//   tokenizer.ggml.pre is "never-seen".
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "support/family_models.h"

using namespace specd;

namespace {

// `in` rewritten: metadata through `edit_key` (return false to drop a key),
// then `extra` set; tensors through `keep` / `shape`.
void rewrite(const std::string& in, const std::string& out, const std::function<bool(const std::string&, gguf::Value&)>& edit_key,
             const std::vector<std::pair<std::string, gguf::Value>>& extra = {},
             const std::function<bool(const gguf::TensorInfo&, std::vector<int64_t>&, size_t&)>& edit_tensor = {}) {
    const gguf::File f = gguf::File::open(in);
    gguf::Writer w;
    for (const auto& [key, value] : f.metadata()) {
        gguf::Value v = value;
        if (edit_key(key, v)) w.set(key, v);
    }
    for (const auto& [key, value] : extra) w.set(key, value);
    for (const gguf::TensorInfo& t : f.tensors()) {
        std::vector<int64_t> ne = t.ne;
        size_t bytes = t.n_bytes;
        if (edit_tensor && !edit_tensor(t, ne, bytes)) continue;
        w.add_tensor(t.name, ne, t.type, t.data, bytes);
    }
    w.write(out);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: cli_models DIR STORIES15M.gguf\n");
        return 2;
    }
    try {
        const std::string dir = argv[1];
        const gguf::File vocab = gguf::File::open(argv[2]);
        auto keep = [](const std::string&, gguf::Value&) { return true; };
        test::write_family_model(dir + "/qwen2.gguf", test::family_preset("qwen2"), vocab);
        test::write_family_model(dir + "/gemma3.gguf", test::family_preset("gemma3"), vocab);
        test::FamilyModelSpec bad_arch = test::family_preset("qwen2");
        bad_arch.arch = "gpt2";
        test::write_family_model(dir + "/bad-arch.gguf", bad_arch, vocab);
        test::FamilyModelSpec no_norm = test::family_preset("qwen3");
        no_norm.qk_norm = false;
        test::write_family_model(dir + "/missing-tensor.gguf", no_norm, vocab);
        rewrite(dir + "/qwen2.gguf", dir + "/misshaped-tensor.gguf", keep, {},
                [](const gguf::TensorInfo& t, std::vector<int64_t>& ne, size_t& bytes) {
                    if (t.name == "blk.1.attn_k.bias") {
                        ne = {16};
                        bytes = 16 * sizeof(float);
                    }
                    return true;
                });
        const std::string llama = dir + "/llama3.gguf";
        test::write_family_model(llama, test::family_preset("llama3"), vocab);
        rewrite(llama, dir + "/draft-text.gguf", [](const std::string& key, gguf::Value& v) {
            if (key == "tokenizer.ggml.tokens") v.array[1000] = gguf::Value::str("\xe2\x96\x81" "changedtoken");
            return true;
        });
        rewrite(llama, dir + "/bpe-no-merges.gguf", keep, {{"tokenizer.ggml.model", gguf::Value::str("gpt2")}});
        // A byte-level vocabulary of its own: the 256 byte symbols and one merge.
        std::vector<std::string> tokens;
        for (int b = 0; b < 256; ++b) {
            // GPT-2's byte-to-unicode: printable bytes stand for themselves, others map to U+0100.. in order.
            static int next = 256;
            const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            const int cp = printable ? b : next++;
            std::string s;
            if (cp < 0x80) {
                s += static_cast<char>(cp);
            } else {
                s += static_cast<char>(0xC0 | (cp >> 6));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            }
            tokens.push_back(s);
        }
        tokens.push_back("ab");
        const int64_t n_vocab = static_cast<int64_t>(tokens.size());
        rewrite(llama, dir + "/unknown-pre.gguf",
                [](const std::string& key, gguf::Value&) { return key.rfind("tokenizer.", 0) != 0; },
                {{"tokenizer.ggml.model", gguf::Value::str("gpt2")},
                 {"tokenizer.ggml.pre", gguf::Value::str("never-seen")},
                 {"tokenizer.ggml.tokens", gguf::Value::string_array(tokens)},
                 {"tokenizer.ggml.merges", gguf::Value::string_array({"a b"})}},
                [n_vocab](const gguf::TensorInfo& t, std::vector<int64_t>& ne, size_t& bytes) {
                    if (t.name == "token_embd.weight" || t.name == "output.weight") {
                        bytes = bytes / static_cast<size_t>(ne[1]) * static_cast<size_t>(n_vocab);  // the first rows
                        ne[1] = n_vocab;
                    }
                    return true;
                });
        std::remove(llama.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cli_models: %s\n", e.what());
        return 1;
    }
    return 0;
}
