// A Llama model's weights in VRAM, uploaded once per device and shared by
// every CUDA forward pass (stream) on it: projections as 16-bit matrices
// with the q|k|v and gate|up rows fused (one GEMM each), norms in f32, the
// RoPE tables computed exactly as the CPU engine does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model.h"
#include "gpu/cuda_handles.h"
#include "gpu/weight_convert.h"

namespace specd::gpu {

struct DeviceLayer {
    DeviceBuffer attn_norm;  // (dim) f32
    DeviceBuffer ffn_norm;   // (dim) f32
    DeviceBuffer wqkv;       // (dim + 2*kv_dim, dim) 16-bit: wq rows, then wk, then wv
    DeviceBuffer wo;         // (dim, dim) 16-bit
    DeviceBuffer w_gate_up;  // (2*ffn_dim, dim) 16-bit: w_gate rows, then w_up
    DeviceBuffer w_down;     // (dim, ffn_dim) 16-bit
};

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
    const float* rope_cos() const { return rope_cos_.as<float>(); }                // (n_ctx_train, rope_dim/2) f32
    const float* rope_sin() const { return rope_sin_.as<float>(); }                // (n_ctx_train, rope_dim/2) f32

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
};

}  // namespace specd::gpu
