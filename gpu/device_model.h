// A model's weights in VRAM, uploaded once per device and shared by
// every CUDA forward pass (stream) on it: projections as 16-bit matrices
// with the q|k|v and gate|up rows fused (one GEMM each), norms and biases in
// f32, the RoPE tables computed exactly as the CPU engine does (a second
// pair for sliding-window layers). Every family of engine/model_family.h
// uploads; the per-layer extras a family adds are empty buffers where the
// file has none.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "gpu/cuda_handles.h"
#include "gpu/weight_convert.h"

namespace specd::gpu {

struct DeviceLayer {
    DeviceBuffer attn_norm;  // (dim) f32
    DeviceBuffer ffn_norm;   // (dim) f32
    DeviceBuffer wqkv;       // (q_dim + 2*kv_dim, dim) 16-bit: wq rows, then wk, then wv
    DeviceBuffer bqkv;       // (q_dim + 2*kv_dim) f32: bq | bk | bv (Qwen2); empty when the file has no biases
    DeviceBuffer q_norm;     // (head_dim) f32 attn_q_norm (Qwen3, Gemma 3); empty when absent
    DeviceBuffer k_norm;     // (head_dim) f32 attn_k_norm; empty when absent
    DeviceBuffer wo;         // (dim, q_dim) 16-bit
    DeviceBuffer post_attn_norm;  // (dim) f32 post_attention_norm (Gemma 3); empty when absent
    DeviceBuffer w_gate_up;  // (2*ffn_dim, dim) 16-bit: w_gate rows, then w_up
    DeviceBuffer w_down;     // (dim, ffn_dim) 16-bit
    DeviceBuffer post_ffn_norm;   // (dim) f32 post_ffw_norm (Gemma 3); empty when absent
    bool windowed = false;   // attends to the last hparams.sliding_window positions, with the windowed RoPE tables
};

// What `model`'s graph needs that the CUDA backend does not run, comma-
// separated ("" for nothing): the features LlamaModel::graph_beyond_llama2
// lists that the kernels do not implement. DeviceModel::upload refuses a
// model with any.
std::string cuda_unsupported_features(const LlamaModel& model);

class DeviceModel {
public:
    // Converts `model`'s weights (any file type; q8_0/q4_0 dequantised on the
    // host) to `type` and uploads them to `device`. Throws gpu::CudaError
    // (e.g. out of memory) or specd::Error.
    static std::shared_ptr<DeviceModel> upload(const LlamaModel& model, int device, HalfType type = HalfType::F16);
    // Random weights of a given shape made on the device (benchmarks of
    // shapes no file is shipped for: throughput only, the output is noise).
    static std::shared_ptr<DeviceModel> random(const LlamaHparams& hparams, int device, HalfType type = HalfType::F16,
                                               uint64_t seed = 1);

    const LlamaHparams& hparams() const { return hparams_; }
    HalfType type() const { return type_; }
    int device() const { return device_; }
    // Bytes of weights one decode step reads (every layer's matrices, the
    // norms and the classifier; one embedding row is negligible).
    size_t step_weight_bytes() const;
    size_t total_bytes() const;

    const std::vector<DeviceLayer>& layers() const { return layers_; }
    const uint16_t* token_embedding() const { return token_embd_.as<uint16_t>(); }  // (n_vocab, dim) 16-bit
    const uint16_t* classifier() const;                                            // (n_vocab, dim) 16-bit (the embedding when tied)
    const float* output_norm() const { return output_norm_.as<float>(); }          // (dim) f32
    // (n_ctx_train, rope_dim/2) f32 each; `windowed`: the sliding-window layers' tables (base
    // rope_freq_base_swa), the same as the others' in a model without such layers.
    const float* rope_cos(bool windowed = false) const { return (windowed && !rope_cos_swa_.empty() ? rope_cos_swa_ : rope_cos_).as<float>(); }
    const float* rope_sin(bool windowed = false) const { return (windowed && !rope_sin_swa_.empty() ? rope_sin_swa_ : rope_sin_).as<float>(); }
    bool post_norms() const;  // some layer has a post-norm (the forward pass needs a product buffer)

private:
    DeviceModel(const LlamaHparams& hparams, int device, HalfType type) : hparams_(hparams), type_(type), device_(device) {}
    void upload_rope_tables();

    LlamaHparams hparams_;
    HalfType type_;
    int device_;
    std::vector<DeviceLayer> layers_;
    DeviceBuffer token_embd_;   // (n_vocab, dim) 16-bit
    DeviceBuffer classifier_;   // (n_vocab, dim) 16-bit; empty when tied to the embedding
    DeviceBuffer output_norm_;  // (dim) f32
    DeviceBuffer rope_cos_;     // (n_ctx_train, rope_dim/2) f32
    DeviceBuffer rope_sin_;     // (n_ctx_train, rope_dim/2) f32
    DeviceBuffer rope_cos_swa_; // (n_ctx_train, rope_dim/2) f32 windowed layers' (hparams sliding_window > 0), else empty
    DeviceBuffer rope_sin_swa_; // (n_ctx_train, rope_dim/2) f32
};

}  // namespace specd::gpu
