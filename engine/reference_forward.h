// The plain scalar forward pass, one sequence, one token at a time, with a
// contiguous KV cache — in the spirit of llama2.c's run.c. It dequantises
// each weight row on the fly and shares no code with the fast path beyond
// tensor_type's dequantize_row, so tests can hold the fast path against it.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model.h"
#include "engine/tensor_type.h"

namespace specd {

class ReferenceForward {
public:
    // kv_type: F32 keeps keys and values exactly; F16 rounds them as the
    // fast path's f16 cache stores them (nearest even), so both see the same
    // values.
    ReferenceForward(const LlamaModel& model, int32_t n_ctx, TensorType kv_type = TensorType::F32);

    // Feeds one token at position length() and returns its logits (n_vocab).
    const std::vector<float>& step(int32_t token);
    int32_t length() const { return pos_; }
    void truncate(int32_t n) { pos_ = n < pos_ ? n : pos_; }

private:
    void matvec(const WeightMatrix& w, const float* x, float* out);

    const LlamaModel& model_;
    int32_t n_ctx_;
    TensorType kv_type_;
    int32_t pos_ = 0;
    std::vector<float> x_, xb_, q_, att_out_, tmp_, hb_, hb2_, scores_, row_;
    std::vector<float> key_cache_;    // (layer, n_ctx, kv_dim), as stored (f16 values when kv_type_ is F16)
    std::vector<float> value_cache_;  // (layer, n_ctx, kv_dim)
    std::vector<float> logits_;       // (n_vocab)
};

}  // namespace specd
