// llama2.c → GGUF conversion on a synthetic checkpoint (every tensor's bytes
// and every key checked), quantization error bounds, bad llama2.c inputs,
// `specd info` text, and the real stories15M when it has been fetched.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/model_convert.h"
#include "engine/tensor_type.h"
#include "support/models.h"

using namespace specd;

namespace {

std::string temp_file(const std::string& name) {
    return (std::filesystem::temp_directory_path() /
            ("specd-test-convert-" + std::to_string(::getpid()) + "-" + name))
        .string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}

void append_floats(std::vector<uint8_t>& out, const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(float));
}

// A random llama2.c checkpoint in the legacy model.bin layout.
struct Llama2cModel {
    int32_t dim = 64, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 40, seq_len = 16;
    bool tied = true;
    int32_t head_size() const { return dim / heads; }
    int32_t kv_dim() const { return head_size() * kv_heads; }

    std::vector<float> token_embedding;  // (vocab, dim)
    std::vector<float> rms_att;          // (layers, dim)
    std::vector<float> wq;               // (layers, dim, dim)
    std::vector<float> wk;               // (layers, kv_dim, dim)
    std::vector<float> wv;               // (layers, kv_dim, dim)
    std::vector<float> wo;               // (layers, dim, dim)
    std::vector<float> rms_ffn;          // (layers, dim)
    std::vector<float> w1;               // (layers, hidden, dim)
    std::vector<float> w2;               // (layers, dim, hidden)
    std::vector<float> w3;               // (layers, hidden, dim)
    std::vector<float> rms_final;        // (dim)
    std::vector<float> freq_cis;         // (2, seq_len, head_size/2): real then imaginary
    std::vector<float> wcls;             // (vocab, dim), untied only

    void fill(uint32_t seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 0.5f);
        auto random = [&](size_t n, float offset) {
            std::vector<float> v(n);
            for (float& x : v) x = offset + normal(rng);
            return v;
        };
        const size_t L = static_cast<size_t>(layers), D = static_cast<size_t>(dim), H = static_cast<size_t>(hidden),
                     KV = static_cast<size_t>(kv_dim()), V = static_cast<size_t>(vocab);
        token_embedding = random(V * D, 0);
        rms_att = random(L * D, 1);
        wq = random(L * D * D, 0);
        wk = random(L * KV * D, 0);
        wv = random(L * KV * D, 0);
        wo = random(L * D * D, 0);
        rms_ffn = random(L * D, 1);
        w1 = random(L * H * D, 0);
        w2 = random(L * D * H, 0);
        w3 = random(L * H * D, 0);
        rms_final = random(D, 1);
        freq_cis = random(2 * static_cast<size_t>(seq_len) * static_cast<size_t>(head_size() / 2), 0);
        wcls = tied ? std::vector<float>{} : random(V * D, 0);
    }

    std::vector<uint8_t> model_bin() const {
        std::vector<uint8_t> out;
        for (int32_t v : {dim, hidden, layers, heads, kv_heads, tied ? vocab : -vocab, seq_len}) append(out, v);
        for (const std::vector<float>* a : {&token_embedding, &rms_att, &wq, &wk, &wv, &wo, &rms_ffn, &w1, &w2, &w3,
                                            &rms_final, &freq_cis, &wcls}) {
            append_floats(out, *a);
        }
        return out;
    }
};

// llama2.c's exported pieces (spaces as ' ', BOS/EOS wrapped in newlines)
// and what the GGUF vocabulary must hold for each.
struct Vocab {
    std::vector<std::string> exported;
    std::vector<float> scores;
    std::vector<std::string> expected;
    std::vector<int32_t> expected_types;
};

Vocab make_vocab(int32_t n) {
    Vocab v;
    auto add = [&](std::string exported, std::string expected, int32_t type) {
        v.scores.push_back(-static_cast<float>(v.exported.size()) * 0.5f);
        v.exported.push_back(std::move(exported));
        v.expected.push_back(std::move(expected));
        v.expected_types.push_back(type);
    };
    add("<unk>", "<unk>", 2);
    add("\n<s>\n", "<s>", 3);
    add("\n</s>\n", "</s>", 3);
    add("<0x00>", "<0x00>", 6);
    add("<0x0A>", "<0x0A>", 6);
    add("<0xFF>", "<0xFF>", 6);
    add("<0xZZ>", "<0xZZ>", 1);
    add(" the", "\xe2\x96\x81the", 1);
    add("a b ", "a\xe2\x96\x81" "b\xe2\x96\x81", 1);
    add("  ", "\xe2\x96\x81\xe2\x96\x81", 1);
    add("caf\xc3\xa9", "caf\xc3\xa9", 1);
    while (static_cast<int32_t>(v.exported.size()) < n) {
        const std::string t = "t" + std::to_string(v.exported.size());
        add(t, t, 1);
    }
    return v;
}

std::vector<uint8_t> tokenizer_bin(const Vocab& v) {
    std::vector<uint8_t> out;
    int32_t max_len = 0;
    for (const std::string& s : v.exported) max_len = std::max(max_len, static_cast<int32_t>(s.size()));
    append(out, max_len);
    for (size_t k = 0; k < v.exported.size(); ++k) {
        append(out, v.scores[k]);
        append(out, static_cast<int32_t>(v.exported[k].size()));
        out.insert(out.end(), v.exported[k].begin(), v.exported[k].end());
    }
    return out;
}

struct Converted {
    Llama2cModel model;
    Vocab vocab;
    std::string model_path, tokenizer_path, gguf_path;
};

Converted convert_synthetic(bool tied, const std::string& tag) {
    Converted c;
    c.model.tied = tied;
    c.model.fill(tied ? 1 : 2);
    c.vocab = make_vocab(c.model.vocab);
    c.model_path = temp_file(tag + "-model.bin");
    c.tokenizer_path = temp_file(tag + "-tokenizer.bin");
    c.gguf_path = temp_file(tag + ".gguf");
    write_bytes(c.model_path, c.model.model_bin());
    write_bytes(c.tokenizer_path, tokenizer_bin(c.vocab));
    convert_llama2c(c.model_path, c.tokenizer_path, c.gguf_path, "synthetic-" + tag);
    return c;
}

void remove_files(const Converted& c) {
    std::filesystem::remove(c.model_path);
    std::filesystem::remove(c.tokenizer_path);
    std::filesystem::remove(c.gguf_path);
}

// The tensor's bytes equal n floats of `source` starting at element `first`.
void check_tensor(const gguf::File& f, const std::string& name, std::vector<int64_t> ne, const std::vector<float>& source,
                  size_t first) {
    INFO(name);
    const gguf::TensorInfo* t = f.find_tensor(name);
    REQUIRE(t != nullptr);
    CHECK(t->type == TensorType::F32);
    CHECK(t->ne == ne);
    const size_t n = static_cast<size_t>(t->n_elements());
    REQUIRE(t->n_bytes == n * sizeof(float));
    REQUIRE(first + n <= source.size());
    CHECK(std::memcmp(t->data, source.data() + first, t->n_bytes) == 0);
}

std::vector<float> dequantized(const gguf::TensorInfo& t) {
    std::vector<float> out(static_cast<size_t>(t.n_elements()));  // (rows, ne[0])
    const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
    const size_t row_bytes = tensor_row_bytes(t.type, cols);
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t.type, t.data + static_cast<size_t>(r) * row_bytes, out.data() + r * cols, cols);
    }
    return out;
}

// Largest error a round trip through `type` may make on this block of 32
// (or single element for the float types).
float error_bound(TensorType type, const float* block, size_t n) {
    float amax = 0;
    for (size_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(block[k]));
    switch (type) {
        case TensorType::F32: return 0;
        case TensorType::F16: return amax * 0x1p-11f + 6e-8f;
        case TensorType::BF16: return amax * 0x1p-8f;
        case TensorType::Q8_0: return amax / 127.0f * 0.5f + amax * 0x1p-10f + 1e-7f;  // half a step + fp16 scale
        case TensorType::Q4_0: return amax / 8.0f * 1.0f + amax * 0x1p-9f + 1e-7f;     // a full step at the clamped end
        default: break;  // specd writes no other type
    }
    return 0;
}

void check_within_bounds(const std::vector<float>& want, const std::vector<float>& got, TensorType type) {
    REQUIRE(want.size() == got.size());
    const size_t block = tensor_type_block_elements(type) == 1 ? 1 : static_cast<size_t>(kQuantBlock);
    size_t bad = 0;
    for (size_t b = 0; b < want.size(); b += block) {
        const float bound = error_bound(type, want.data() + b, block);
        for (size_t k = b; k < b + block; ++k) bad += std::fabs(want[k] - got[k]) > bound;
    }
    CHECK(bad == 0);
}

std::string conversion_error(const std::vector<uint8_t>& model, const std::vector<uint8_t>& tokenizer) {
    const std::string m = temp_file("bad-model.bin"), t = temp_file("bad-tokenizer.bin"), o = temp_file("bad.gguf");
    write_bytes(m, model);
    write_bytes(t, tokenizer);
    std::string message = "(converted without error)";
    try {
        convert_llama2c(m, t, o, "bad");
    } catch (const Error& e) {
        message = e.what();
    }
    std::filesystem::remove(m);
    std::filesystem::remove(t);
    std::filesystem::remove(o);
    return message;
}

void set_header_field(std::vector<uint8_t>& model, int field, int32_t value) {
    std::memcpy(model.data() + field * sizeof(int32_t), &value, sizeof value);
}

}  // namespace

TEST_CASE("a tied llama2.c checkpoint converts with every key and tensor byte-exact", "[convert]") {
    const Converted c = convert_synthetic(true, "tied");
    const Llama2cModel& m = c.model;
    const gguf::File f = gguf::File::open(c.gguf_path);

    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_string("general.name") == "synthetic-tied");
    CHECK(f.find("general.alignment")->type == gguf::ValueType::UINT32);
    CHECK(f.get_u32("general.alignment") == 32);
    CHECK(f.get_u32("general.file_type") == 0);
    CHECK(f.get_u32("llama.context_length") == 16);
    CHECK(f.get_u32("llama.embedding_length") == 64);
    CHECK(f.get_u32("llama.block_count") == 2);
    CHECK(f.get_u32("llama.feed_forward_length") == 96);
    CHECK(f.get_u32("llama.attention.head_count") == 4);
    CHECK(f.get_u32("llama.attention.head_count_kv") == 2);
    CHECK(f.get_f32("llama.rope.freq_base") == 10000.0f);
    CHECK(f.get_u32("llama.rope.dimension_count") == 16);
    CHECK(f.get_f32("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
    CHECK(f.get_u32("llama.vocab_size") == 40);
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_string_array("tokenizer.ggml.tokens") == c.vocab.expected);
    CHECK(f.get_f32_array("tokenizer.ggml.scores") == c.vocab.scores);
    CHECK(f.find("tokenizer.ggml.token_type")->array_type == gguf::ValueType::INT32);
    CHECK(f.get_i32_array("tokenizer.ggml.token_type") == c.vocab.expected_types);
    CHECK(f.find("tokenizer.ggml.bos_token_id")->type == gguf::ValueType::UINT32);
    CHECK(f.get_u32("tokenizer.ggml.bos_token_id") == 1);
    CHECK(f.get_u32("tokenizer.ggml.eos_token_id") == 2);
    CHECK(f.get_u32("tokenizer.ggml.unknown_token_id") == 0);
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token") == true);
    CHECK(f.get_bool("tokenizer.ggml.add_eos_token") == false);

    const int64_t D = m.dim, H = m.hidden, KV = m.kv_dim(), V = m.vocab;
    const size_t d = static_cast<size_t>(D), h = static_cast<size_t>(H), kv = static_cast<size_t>(KV);
    check_tensor(f, "token_embd.weight", {D, V}, m.token_embedding, 0);
    for (size_t l = 0; l < static_cast<size_t>(m.layers); ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        check_tensor(f, p + "attn_norm.weight", {D}, m.rms_att, l * d);
        check_tensor(f, p + "attn_q.weight", {D, D}, m.wq, l * d * d);
        check_tensor(f, p + "attn_k.weight", {D, KV}, m.wk, l * kv * d);
        check_tensor(f, p + "attn_v.weight", {D, KV}, m.wv, l * kv * d);
        check_tensor(f, p + "attn_output.weight", {D, D}, m.wo, l * d * d);
        check_tensor(f, p + "ffn_norm.weight", {D}, m.rms_ffn, l * d);
        check_tensor(f, p + "ffn_gate.weight", {D, H}, m.w1, l * h * d);
        check_tensor(f, p + "ffn_down.weight", {H, D}, m.w2, l * d * h);
        check_tensor(f, p + "ffn_up.weight", {D, H}, m.w3, l * h * d);
    }
    check_tensor(f, "output_norm.weight", {D}, m.rms_final, 0);
    CHECK(f.find_tensor("output.weight") == nullptr);  // a tied classifier stays tied
    CHECK(f.tensors().size() == 1 + 9 * 2 + 1);
    remove_files(c);
}

TEST_CASE("an untied llama2.c checkpoint gets output.weight from wcls", "[convert]") {
    const Converted c = convert_synthetic(false, "untied");
    const gguf::File f = gguf::File::open(c.gguf_path);
    check_tensor(f, "output.weight", {c.model.dim, c.model.vocab}, c.model.wcls, 0);
    check_tensor(f, "token_embd.weight", {c.model.dim, c.model.vocab}, c.model.token_embedding, 0);
    CHECK(f.get_u32("llama.vocab_size") == 40);
    CHECK(f.tensors().size() == 1 + 9 * 2 + 2);
    remove_files(c);
}

TEST_CASE("quantize re-encodes 2-D weights within error bounds and keeps norms f32 and metadata", "[convert]") {
    const Converted c = convert_synthetic(false, "quant");
    const gguf::File src = gguf::File::open(c.gguf_path);
    struct Target {
        TensorType type;
        uint32_t file_type;
    };
    for (const Target target : {Target{TensorType::Q8_0, 7}, Target{TensorType::Q4_0, 2}, Target{TensorType::F16, 1},
                                Target{TensorType::BF16, 32}, Target{TensorType::F32, 0}}) {
        INFO(tensor_type_name(target.type));
        const std::string out = temp_file(std::string("quant-") + tensor_type_name(target.type) + ".gguf");
        const QuantizeStats stats = quantize_model(c.gguf_path, out, target.type);
        const gguf::File q = gguf::File::open(out);
        CHECK(stats.n_tensors == src.tensors().size());
        CHECK(stats.n_converted == 1 + 7 * 2 + 1);  // token_embd, 7 per layer, output
        CHECK(stats.bytes_in == src.size());
        CHECK(stats.bytes_out == std::filesystem::file_size(out));
        CHECK(q.get_u32("general.file_type") == target.file_type);
        for (const auto& [key, value] : src.metadata()) {
            if (key == "general.file_type") continue;
            INFO(key);
            REQUIRE(q.find(key) != nullptr);
            CHECK(*q.find(key) == value);
        }
        REQUIRE(q.tensors().size() == src.tensors().size());
        for (const gguf::TensorInfo& s : src.tensors()) {
            INFO(s.name);
            const gguf::TensorInfo* t = q.find_tensor(s.name);
            REQUIRE(t != nullptr);
            CHECK(t->ne == s.ne);
            if (s.ne.size() == 1) {
                CHECK(t->type == TensorType::F32);
                CHECK(std::memcmp(t->data, s.data, s.n_bytes) == 0);
                continue;
            }
            CHECK(t->type == target.type);
            check_within_bounds(dequantized(s), dequantized(*t), target.type);
        }
        if (target.type == TensorType::F32) CHECK(read_bytes(out) == read_bytes(c.gguf_path));
        std::filesystem::remove(out);
    }
    remove_files(c);
}

TEST_CASE("quantize reads quantized input and copies tensors already of the target type", "[convert]") {
    const Converted c = convert_synthetic(true, "requant");
    const std::string q8 = temp_file("requant-q8.gguf"), q4 = temp_file("requant-q4.gguf"),
                      q8_again = temp_file("requant-q8-again.gguf");
    quantize_model(c.gguf_path, q8, TensorType::Q8_0);
    quantize_model(q8, q4, TensorType::Q4_0);
    quantize_model(q8, q8_again, TensorType::Q8_0);
    const gguf::File f8 = gguf::File::open(q8), f4 = gguf::File::open(q4);
    for (const gguf::TensorInfo& t : f8.tensors()) {
        if (t.ne.size() != 2) continue;
        INFO(t.name);
        const gguf::TensorInfo* t4 = f4.find_tensor(t.name);
        REQUIRE(t4 != nullptr);
        CHECK(t4->type == TensorType::Q4_0);
        check_within_bounds(dequantized(t), dequantized(*t4), TensorType::Q4_0);
    }
    CHECK(f4.get_u32("general.quantization_version") == 2);
    CHECK(read_bytes(q8_again) == read_bytes(q8));
    for (const std::string& p : {q8, q4, q8_again}) std::filesystem::remove(p);
    CHECK_THROWS_WITH(quantize_model("/nonexistent.gguf", q4, TensorType::Q4_0), Catch::Contains("cannot open"));
    remove_files(c);
}

TEST_CASE("malformed llama2.c inputs are rejected with messages naming the problem", "[convert]") {
    Llama2cModel m;
    m.fill(3);
    const std::vector<uint8_t> model = m.model_bin();
    const std::vector<uint8_t> tokenizer = tokenizer_bin(make_vocab(m.vocab));
    REQUIRE(conversion_error(model, tokenizer) == "(converted without error)");

    std::vector<uint8_t> bad = model;
    bad.pop_back();
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("but the file has"));
    bad = model;
    bad.push_back(0);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("but the file has"));
    CHECK_THAT(conversion_error(std::vector<uint8_t>(model.begin(), model.begin() + 20), tokenizer),
               Catch::Contains("too small for a llama2.c header"));
    bad = model;
    set_header_field(bad, 2, 0);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("non-positive"));
    bad = model;
    set_header_field(bad, 3, 5);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("dim not a multiple of n_heads"));
    bad = model;
    set_header_field(bad, 4, 3);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("n_heads not a multiple of n_kv_heads"));
    bad = model;
    set_header_field(bad, 0, 0x7ffffffe);  // dim
    set_header_field(bad, 2, 0x7fffffff);  // layers: layers * dim * dim overflows 64 bits
    set_header_field(bad, 3, 1);
    set_header_field(bad, 4, 1);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("impossibly large"));
    bad = model;
    set_header_field(bad, 0, 0x616b3432);
    set_header_field(bad, 1, 2);
    CHECK_THAT(conversion_error(bad, tokenizer), Catch::Contains("export version 2 (magic ak42) is not supported"));

    std::vector<uint8_t> bad_tok = tokenizer;
    bad_tok.pop_back();
    CHECK_THAT(conversion_error(model, bad_tok), Catch::Contains("token 39 has length"));
    bad_tok = tokenizer;
    bad_tok.push_back(0);
    CHECK_THAT(conversion_error(model, bad_tok), Catch::Contains("1 bytes follow the last of the 40 tokens"));
    CHECK_THAT(conversion_error(model, std::vector<uint8_t>(tokenizer.begin(), tokenizer.begin() + 6)),
               Catch::Contains("truncated at the score of token 0"));
    CHECK_THAT(conversion_error(model, {}), Catch::Contains("truncated at the max_token_length"));
    bad_tok = tokenizer;
    const int32_t negative = -1;
    std::memcpy(bad_tok.data() + 4 + 4, &negative, 4);  // length of token 0
    CHECK_THAT(conversion_error(model, bad_tok), Catch::Contains("token 0 has length -1"));

    CHECK_THROWS_WITH(convert_llama2c("/nonexistent/model.bin", "/nonexistent/tok.bin", temp_file("x.gguf"), "x"),
                      Catch::Contains("/nonexistent/model.bin: cannot open"));
}

TEST_CASE("describe_model lists the header, summarised metadata and the tensor table", "[convert]") {
    const Converted c = convert_synthetic(true, "info");
    const gguf::File f = gguf::File::open(c.gguf_path);
    const std::string text = describe_model(f);
    CHECK_THAT(text, Catch::Contains("GGUF v3"));
    CHECK_THAT(text, Catch::Contains("general.architecture") && Catch::Contains("'llama'"));
    CHECK_THAT(text, Catch::Contains("[40 strings: '<unk>', '<s>', '</s>', ...]"));
    CHECK_THAT(text, Catch::Contains("llama.rope.freq_base") && Catch::Contains("10000"));
    CHECK_THAT(text, Catch::Contains("1e-05"));
    const gguf::TensorInfo* q = f.find_tensor("blk.1.attn_q.weight");
    REQUIRE(q != nullptr);
    CHECK_THAT(text, Catch::Contains("blk.1.attn_q.weight") && Catch::Contains("64 x 64") &&
                         Catch::Contains(std::to_string(q->n_bytes)) && Catch::Contains(std::to_string(q->offset)));
    CHECK(std::count(text.begin(), text.end(), '\n') ==
          static_cast<std::ptrdiff_t>(1 + 1 + f.metadata().size() + 1 + 1 + f.tensors().size()));
    remove_files(c);
}

TEST_CASE("the real stories15M GGUF has the expected metadata (when fetched)", "[convert][model]") {
    const std::string name = "stories15M-f32.gguf";
    if (!test::model_exists(name)) {
        WARN("skipped: " << test::model_path(name) << " not found (run tools/fetch-model.sh)");
        return;
    }
    const gguf::File f = gguf::File::open(test::model_path(name));
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_u32("llama.embedding_length") == 288);
    CHECK(f.get_u32("llama.feed_forward_length") == 768);
    CHECK(f.get_u32("llama.block_count") == 6);
    CHECK(f.get_u32("llama.attention.head_count") == 6);
    CHECK(f.get_u32("llama.attention.head_count_kv") == 6);
    CHECK(f.get_u32("llama.context_length") == 256);
    CHECK(f.get_u32("llama.rope.dimension_count") == 48);
    const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.size() == 32000);
    CHECK(tokens[0] == "<unk>");
    CHECK(tokens[1] == "<s>");
    CHECK(tokens[2] == "</s>");
    CHECK(tokens[3] == "<0x00>");
    CHECK(std::find(tokens.begin(), tokens.end(), "\xe2\x96\x81the") != tokens.end());
    const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
    REQUIRE(embd != nullptr);
    CHECK(embd->ne == std::vector<int64_t>{288, 32000});
    CHECK(f.find_tensor("output.weight") == nullptr);
    CHECK(f.tensors().size() == 1 + 9 * 6 + 1);
}
