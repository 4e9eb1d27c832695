// Writes a tiny random Llama model as a real GGUF file (8-token vocabulary,
// dim 32, 2 layers), so statistical tests can sample thousands of times and
// enumerate exact target distributions. Different seeds give different
// models with the same vocabulary (a target and its draft).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <unistd.h>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf.h"

namespace specd::test {

inline std::string write_tiny_model(const std::string& path, uint32_t seed, float weight_scale = 0.4f) {
    constexpr int64_t dim = 32, ffn = 64, layers = 2, heads = 4, kv_heads = 2, vocab = 8, ctx = 64;
    constexpr int64_t kv_dim = dim / heads * kv_heads;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> storage;  // keeps every tensor alive until write()
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::str("llama"));
    w.set("general.name", gguf::Value::str("tiny-" + std::to_string(seed)));
    w.set("general.alignment", gguf::Value::u32(32));
    w.set("llama.context_length", gguf::Value::u32(ctx));
    w.set("llama.embedding_length", gguf::Value::u32(dim));
    w.set("llama.block_count", gguf::Value::u32(layers));
    w.set("llama.feed_forward_length", gguf::Value::u32(ffn));
    w.set("llama.attention.head_count", gguf::Value::u32(heads));
    w.set("llama.attention.head_count_kv", gguf::Value::u32(kv_heads));
    w.set("llama.rope.freq_base", gguf::Value::f32(10000.0f));
    w.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
    w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "\xe2\x96\x81" "b", "c", "d", "e"}));
    w.set("tokenizer.ggml.scores", gguf::Value::f32_array({0, 0, 0, -1, -2, -3, -4, -5}));
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({2, 3, 3, 1, 1, 1, 1, 1}));
    w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(1));
    w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(2));
    w.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(0));
    w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
    auto tensor = [&](const std::string& name, std::vector<int64_t> ne, float scale, bool ones) {
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        storage.emplace_back(static_cast<size_t>(n));
        for (float& x : storage.back()) x = ones ? 1.0f : scale * normal(rng);
        w.add_tensor(name, ne, TensorType::F32, storage.back().data(), storage.back().size() * sizeof(float));
    };
    tensor("token_embd.weight", {dim, vocab}, 1.0f, false);
    for (int64_t l = 0; l < layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        tensor(p + "attn_norm.weight", {dim}, 0, true);
        tensor(p + "attn_q.weight", {dim, dim}, weight_scale, false);
        tensor(p + "attn_k.weight", {dim, kv_dim}, weight_scale, false);
        tensor(p + "attn_v.weight", {dim, kv_dim}, weight_scale, false);
        tensor(p + "attn_output.weight", {dim, dim}, weight_scale, false);
        tensor(p + "ffn_norm.weight", {dim}, 0, true);
        tensor(p + "ffn_gate.weight", {dim, ffn}, weight_scale, false);
        tensor(p + "ffn_up.weight", {dim, ffn}, weight_scale, false);
        tensor(p + "ffn_down.weight", {ffn, dim}, weight_scale, false);
    }
    tensor("output_norm.weight", {dim}, 0, true);
    tensor("output.weight", {dim, vocab}, 0.5f, false);
    w.write(path);
    return path;
}

inline std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("specd-test-" + std::to_string(::getpid()) + "-" + name)).string();
}

// Pearson chi-square of observed counts against expected probabilities,
// pooling cells whose expected count is below 5 (and outcomes never
// expected) into one. Returns {statistic, degrees of freedom}.
inline std::pair<double, int> chi_square(const std::map<int64_t, int64_t>& observed, const std::map<int64_t, double>& expected,
                                         int64_t n) {
    double stat = 0, pooled_obs = 0, pooled_exp = 0;
    int cells = 0;
    for (const auto& [key, p] : expected) {
        const double e = p * static_cast<double>(n);
        const auto it = observed.find(key);
        const double o = it == observed.end() ? 0.0 : static_cast<double>(it->second);
        if (e < 5.0) {
            pooled_obs += o;
            pooled_exp += e;
            continue;
        }
        stat += (o - e) * (o - e) / e;
        ++cells;
    }
    for (const auto& [key, count] : observed) {
        if (!expected.count(key)) pooled_obs += static_cast<double>(count);  // impossible outcomes
    }
    if (pooled_exp > 0 || pooled_obs > 0) {
        stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / std::max(pooled_exp, 1e-9);
        ++cells;
    }
    return {stat, cells - 1};
}

// Upper critical value of chi-square with df degrees of freedom at
// p = 0.001 (Wilson-Hilferty).
inline double chi_square_critical_001(int df) {
    const double z = 3.090, a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

}  // namespace specd::test
