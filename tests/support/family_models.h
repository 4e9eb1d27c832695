// Writes small random-weight models of each supported family as GGUF files
// in llama.cpp's converter layout (its keys and tensor names), with a real
// vocabulary's tokenizer.* keys copied from another GGUF (stories15M's
// SentencePiece vocabulary: llama.cpp does not tie the vocabulary type to the
// architecture). Weights are scaled so that a logit's standard deviation is
// several units: the output distribution is peaked, greedy picks are not
// near-ties, and llama.cpp's and specd's continuations can be compared.
//
// Every tensor draws from its own generator seeded by (spec seed, tensor
// name), so two specs that differ only in block_count share their first
// layers: the smaller one is a draft that agrees with the larger target
// often (the later layers are scaled down by later_layer_scale).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/tensor_type.h"

namespace specd::test {

struct FamilyModelSpec {
    std::string arch = "llama";     // general.architecture
    std::string name = "tiny";      // general.name
    int64_t dim = 64;
    int64_t ffn = 128;
    int64_t layers = 2;
    int64_t heads = 4;
    int64_t kv_heads = 2;           // GQA
    int64_t head_dim = 0;           // 0: dim / heads, key_length not written
    bool write_key_length = false;  // attention.key_length / value_length even when head_dim is dim / heads
    int64_t ctx = 256;
    float rope_base = 10000.0f;
    bool llama3_rope_freqs = false; // rope_freqs.weight as the converter bakes Llama 3.1's scaling (factor 8, 8192 tokens)
    bool qkv_bias = false;          // blk.N.attn_{q,k,v}.bias
    bool qk_norm = false;           // blk.N.attn_{q,k}_norm.weight
    bool tied = false;              // no output.weight: the classifier is token_embd
    bool post_norms = false;        // blk.N.post_attention_norm / post_ffw_norm (Gemma)
    int64_t sliding_window = 0;     // ARCH.attention.sliding_window (0: key not written)
    int64_t swa_pattern = 0;        // ARCH.attention.sliding_window_pattern (0: key not written)
    float rope_base_swa = 0.0f;     // ARCH.rope.freq_base_swa (0: key not written)
    float rope_linear_factor = 0.0f;  // ARCH.rope.scaling.type linear with this factor (0: keys not written)
    float logit_softcap = 0.0f;     // ARCH.final_logit_softcapping (0: key not written)
    int64_t rope_dim = 0;           // ARCH.rope.dimension_count (0: the head size)
    bool fused_qkv = false;         // blk.N.attn_qkv.weight instead of attn_q/k/v
    bool fused_gate_up = false;     // blk.N.ffn_up.weight (dim, 2*ffn) = gate rows then up rows, no ffn_gate (Phi-3)
    // LongRoPE as Phi-3.5's converter writes it: rope_factors_short/long.weight,
    // rope.scaling.attn_factor and original_context_length (= ctx / 4).
    bool long_rope = false;
    TensorType matrix_type = TensorType::F32;  // F32 or F16 for the 2-D weights; norms, biases and factors stay F32
    // The vocabulary a sibling of another size has (llama.cpp lets target and
    // draft differ by up to 128 rows): the last vocab_trim tokens dropped, or
    // vocab_pad tokens "[PAD<id>]" of type UNUSED appended (as llama.cpp's
    // converter pads Qwen's vocabulary to the embedding's rows). Rows shared
    // with the unchanged spec keep their weights.
    int64_t vocab_trim = 0;
    int64_t vocab_pad = 0;
    float pad_row_scale = 1.0f;     // the padded rows of token_embd / output scaled by this (> 1: the model picks them often)
    uint32_t seed = 1;
    float later_layer_scale = 0.5f; // layers >= 1 scaled by this (so a 1-layer cut is a fair draft)
};

// The presets the tests and the llama.cpp comparison use: Llama 3.2-like
// (GQA, base 500000, rope_freqs, tied, key_length written), Qwen2.5-like
// (Q/K/V biases, NEOX, base 1e6, tied), Qwen3-like (Q/K norms, head size 32
// from key_length while dim / heads is 16, untied), Gemma 3-like (3 layers,
// the first two windowed over 4 positions with their own RoPE base, linear
// RoPE scaling on the full layer, post-norms, GeGLU, one KV head, head size
// 32, tied, logit soft-capping as Gemma 2 files carry it), Phi-3.5-like
// (fused QKV and gate|up, NEOX over 12 of 16 head elements, LongRoPE factors
// and attention factor, untied).
inline FamilyModelSpec family_preset(const std::string& family) {
    FamilyModelSpec s;
    s.name = "tiny-" + family;
    if (family == "llama3") {
        s.arch = "llama";
        s.rope_base = 500000.0f;
        s.llama3_rope_freqs = true;
        s.tied = true;
        s.write_key_length = true;
        s.seed = 31;
    } else if (family == "qwen2") {
        s.arch = "qwen2";
        s.rope_base = 1000000.0f;
        s.qkv_bias = true;
        s.tied = true;
        s.seed = 32;
    } else if (family == "qwen3") {
        s.arch = "qwen3";
        s.rope_base = 1000000.0f;
        s.head_dim = 32;
        s.qk_norm = true;
        s.seed = 33;
    } else if (family == "gemma3") {
        s.arch = "gemma3";
        s.layers = 3;
        s.kv_heads = 1;
        s.head_dim = 32;
        s.qk_norm = true;
        s.post_norms = true;
        s.tied = true;
        s.rope_base = 1000000.0f;
        s.rope_base_swa = 10000.0f;
        s.rope_linear_factor = 8.0f;
        s.sliding_window = 4;
        s.swa_pattern = 3;
        s.logit_softcap = 30.0f;
        s.later_layer_scale = 1.5f;  // post-norms shrink each block's share of the residual: keep the later layers felt
        s.seed = 34;
    } else if (family == "phi3") {
        s.arch = "phi3";
        // Not "phi3": llama.cpp gives Phi-3's special tokens attributes when
        // general.name says phi3, and stories15M's vocabulary has no <|endoftext|>.
        s.name = "tiny-phi";
        s.ctx = 1024;
        s.rope_dim = 12;
        s.fused_qkv = true;
        s.fused_gate_up = true;
        s.long_rope = true;
        s.seed = 35;
    } else {
        throw std::runtime_error("family_preset: unknown family " + family);
    }
    return s;
}

inline const std::vector<std::string>& family_preset_names() {
    static const std::vector<std::string> names = {"llama3", "qwen2", "qwen3", "gemma3", "phi3"};
    return names;
}

// Llama 3.1's frequency factors for rope_dim/2 pairs (what llama.cpp's
// converter writes into rope_freqs.weight): 1 for short wavelengths, the
// scaling factor for long ones, a smooth blend between.
inline std::vector<float> llama3_rope_factors(int64_t rope_dim, float base) {
    const double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, old_context = 8192.0;
    const double low_wavelen = old_context / low_freq_factor, high_wavelen = old_context / high_freq_factor;
    std::vector<float> out;
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
        const double freq = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
        const double wavelen = 2.0 * M_PI / freq;
        if (wavelen < high_wavelen) {
            out.push_back(1.0f);
        } else if (wavelen > low_wavelen) {
            out.push_back(static_cast<float>(factor));
        } else {
            const double smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
        }
    }
    return out;
}

// Where tools/fetch-llama-cpp-vocab.sh keeps llama.cpp's vocab-only files
// ($SPECD_LLAMA_VOCAB_DIR, else the user's cache): ggml-vocab-NAME.gguf.
inline std::string llama_cpp_vocab_path(const std::string& name) {
    std::string dir;
    if (const char* env = std::getenv("SPECD_LLAMA_VOCAB_DIR"); env && *env) {
        dir = env;
    } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
        dir = std::string(xdg) + "/specd/llama-cpp-vocab-3.22.1";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
        dir = std::string(home) + "/.cache/specd/llama-cpp-vocab-3.22.1";
    }
    return dir + "/ggml-vocab-" + name + ".gguf";
}

// tokenizer.ggml.{tokens,scores,token_type} cut or padded as spec.vocab_trim
// / vocab_pad say; other values unchanged.
inline gguf::Value resized_vocab_array(const std::string& key, gguf::Value v, const FamilyModelSpec& spec) {
    if (key != "tokenizer.ggml.tokens" && key != "tokenizer.ggml.scores" && key != "tokenizer.ggml.token_type") return v;
    if (spec.vocab_trim > 0) v.array.resize(v.array.size() - static_cast<size_t>(spec.vocab_trim));
    for (int64_t i = 0; i < spec.vocab_pad; ++i) {
        const int64_t id = static_cast<int64_t>(v.array.size());
        if (key == "tokenizer.ggml.tokens") {
            v.array.push_back(gguf::Value::str("[PAD" + std::to_string(id) + "]"));
        } else if (key == "tokenizer.ggml.scores") {
            v.array.push_back(gguf::Value::f32(-1000.0f));
        } else {
            v.array.push_back(gguf::Value::i32(5));  // LLAMA_TOKEN_TYPE_UNUSED
        }
    }
    return v;
}

// Writes `spec` to `path` with the tokenizer.* keys of `vocab` and returns
// path. The vocabulary's size (after vocab_trim / vocab_pad) sets n_vocab.
inline std::string write_family_model(const std::string& path, const FamilyModelSpec& spec, const gguf::File& vocab) {
    const int64_t hd = spec.head_dim ? spec.head_dim : spec.dim / spec.heads;
    const int64_t q_dim = spec.heads * hd, kv_dim = spec.kv_heads * hd;
    const int64_t n_vocab =
        static_cast<int64_t>(vocab.get_string_array("tokenizer.ggml.tokens").size()) - spec.vocab_trim + spec.vocab_pad;
    const std::string a = spec.arch + ".";
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::str(spec.arch));
    w.set("general.name", gguf::Value::str(spec.name));
    w.set("general.alignment", gguf::Value::u32(32));
    w.set(a + "context_length", gguf::Value::u32(static_cast<uint32_t>(spec.ctx)));
    w.set(a + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(spec.dim)));
    w.set(a + "block_count", gguf::Value::u32(static_cast<uint32_t>(spec.layers)));
    w.set(a + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(spec.ffn)));
    w.set(a + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(spec.heads)));
    w.set(a + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(spec.kv_heads)));
    if (spec.head_dim || spec.write_key_length) {
        w.set(a + "attention.key_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
        w.set(a + "attention.value_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
    }
    const int64_t rope_dim = spec.rope_dim ? spec.rope_dim : hd;
    w.set(a + "rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(rope_dim)));
    if (spec.long_rope) {
        w.set(a + "rope.scaling.attn_factor", gguf::Value::f32(1.19f));
        w.set(a + "rope.scaling.original_context_length", gguf::Value::u32(static_cast<uint32_t>(spec.ctx / 4)));
    }
    w.set(a + "rope.freq_base", gguf::Value::f32(spec.rope_base));
    w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f));
    if (spec.sliding_window) w.set(a + "attention.sliding_window", gguf::Value::u32(static_cast<uint32_t>(spec.sliding_window)));
    if (spec.swa_pattern) w.set(a + "attention.sliding_window_pattern", gguf::Value::u32(static_cast<uint32_t>(spec.swa_pattern)));
    if (spec.rope_base_swa > 0.0f) w.set(a + "rope.freq_base_swa", gguf::Value::f32(spec.rope_base_swa));
    if (spec.rope_linear_factor > 0.0f) {
        w.set(a + "rope.scaling.type", gguf::Value::str("linear"));
        w.set(a + "rope.scaling.factor", gguf::Value::f32(spec.rope_linear_factor));
    }
    if (spec.logit_softcap > 0.0f) w.set(a + "final_logit_softcapping", gguf::Value::f32(spec.logit_softcap));
    for (const auto& [key, value] : vocab.metadata()) {
        if (key.rfind("tokenizer.", 0) == 0) w.set(key, resized_vocab_array(key, value, spec));
    }

    std::vector<std::vector<uint8_t>> storage;  // keeps every tensor's bytes alive until write()
    auto draw = [&](const std::string& name, int64_t n, float mean, float scale) {
        std::seed_seq seq{spec.seed, static_cast<uint32_t>(std::hash<std::string>{}(name))};
        std::mt19937 rng(seq);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = mean + scale * normal(rng);
        return v;
    };
    auto add = [&](const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v, TensorType type) {
        std::vector<uint8_t> bytes;
        if (type == TensorType::F16) {
            bytes.resize(v.size() * 2);
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t h = fp32_to_fp16(v[i]);
                bytes[2 * i] = static_cast<uint8_t>(h & 0xff);
                bytes[2 * i + 1] = static_cast<uint8_t>(h >> 8);
            }
        } else {
            bytes.resize(v.size() * sizeof(float));
            std::memcpy(bytes.data(), v.data(), bytes.size());
        }
        storage.push_back(std::move(bytes));
        w.add_tensor(name, std::move(ne), type, storage.back().data(), storage.back().size());
    };
    auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, float scale) {
        std::vector<float> v = draw(name, cols * rows, 0.0f, scale);
        if (rows == n_vocab && spec.vocab_pad > 0 && (name == "token_embd.weight" || name == "output.weight")) {
            for (size_t i = static_cast<size_t>((n_vocab - spec.vocab_pad) * cols); i < v.size(); ++i) v[i] *= spec.pad_row_scale;
        }
        add(name, {cols, rows}, v, spec.matrix_type);
    };
    auto vector = [&](const std::string& name, int64_t n, float mean, float scale) {
        add(name, {n}, draw(name, n, mean, scale), TensorType::F32);
    };

    // Embedding rows of rms 0.5: as the tied classifier they give logits of
    // standard deviation 0.5 * sqrt(dim) = 4 for dim 64.
    const float cls_scale = 4.0f / std::sqrt(static_cast<float>(spec.dim));
    matrix("token_embd.weight", spec.dim, n_vocab, cls_scale);
    if (spec.long_rope) {
        std::vector<float> short_factors, long_factors;
        for (int64_t i = 0; i < rope_dim / 2; ++i) {
            short_factors.push_back(1.0f + 0.3f * static_cast<float>(i));
            long_factors.push_back(2.0f + 5.0f * static_cast<float>(i));
        }
        add("rope_factors_short.weight", {rope_dim / 2}, short_factors, TensorType::F32);
        add("rope_factors_long.weight", {rope_dim / 2}, long_factors, TensorType::F32);
    }
    if (spec.llama3_rope_freqs) {
        const std::vector<float> factors = llama3_rope_factors(hd, spec.rope_base);
        add("rope_freqs.weight", {hd / 2}, factors, TensorType::F32);
    }
    for (int64_t l = 0; l < spec.layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        const float layer_scale = l == 0 ? 1.0f : spec.later_layer_scale;
        const float in_scale = layer_scale * 1.5f / std::sqrt(static_cast<float>(spec.dim));
        vector(p + "attn_norm.weight", spec.dim, 1.0f, 0.1f);
        if (spec.fused_qkv) {
            matrix(p + "attn_qkv.weight", spec.dim, q_dim + 2 * kv_dim, in_scale);
        } else {
            matrix(p + "attn_q.weight", spec.dim, q_dim, in_scale);
            matrix(p + "attn_k.weight", spec.dim, kv_dim, in_scale);
            matrix(p + "attn_v.weight", spec.dim, kv_dim, in_scale);
        }
        if (spec.qkv_bias) {
            vector(p + "attn_q.bias", q_dim, 0.0f, 0.5f);
            vector(p + "attn_k.bias", kv_dim, 0.0f, 0.5f);
            vector(p + "attn_v.bias", kv_dim, 0.0f, 0.5f);
        }
        if (spec.qk_norm) {
            vector(p + "attn_q_norm.weight", hd, 1.0f, 0.2f);
            vector(p + "attn_k_norm.weight", hd, 1.0f, 0.2f);
        }
        matrix(p + "attn_output.weight", q_dim, spec.dim, layer_scale * 1.0f / std::sqrt(static_cast<float>(q_dim)));
        if (spec.post_norms) vector(p + "post_attention_norm.weight", spec.dim, layer_scale, 0.1f * layer_scale);
        vector(p + "ffn_norm.weight", spec.dim, 1.0f, 0.1f);
        if (spec.fused_gate_up) {
            matrix(p + "ffn_up.weight", spec.dim, 2 * spec.ffn, in_scale);
        } else {
            matrix(p + "ffn_gate.weight", spec.dim, spec.ffn, in_scale);
            matrix(p + "ffn_up.weight", spec.dim, spec.ffn, in_scale);
        }
        matrix(p + "ffn_down.weight", spec.ffn, spec.dim, layer_scale * 1.0f / std::sqrt(static_cast<float>(spec.ffn)));
        if (spec.post_norms) vector(p + "post_ffw_norm.weight", spec.dim, layer_scale, 0.1f * layer_scale);
    }
    vector("output_norm.weight", spec.dim, 1.0f, 0.1f);
    if (!spec.tied) matrix("output.weight", spec.dim, n_vocab, cls_scale);
    w.write(path);
    return path;
}

}  // namespace specd::test
