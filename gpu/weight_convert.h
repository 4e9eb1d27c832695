// Host-side conversion of GGUF weights (f32, f16, bf16, q8_0, q4_0) into
// the 16-bit floats the GPU's GEMMs read. q8_0/q4_0 files are dequantised
// here, once at load: the GPU then runs one GEMM path (cuBLAS, 16-bit in,
// f32 accumulate) for every file type. Plain C++: tested without a device.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model.h"
#include "gpu/half_type.h"

namespace specd::gpu {


uint16_t float_to_half(float x, HalfType type);  // round to nearest even
float half_to_float(uint16_t h, HalfType type);

// Converts rows [row_begin, row_end) of `w` into `dst`, (row_end - row_begin, w.cols)
// row-major 16-bit values. Throws specd::Error for a bad row range.
void convert_rows_to_half(const WeightMatrix& w, int64_t row_begin, int64_t row_end, HalfType type, uint16_t* dst);

// The whole matrix, (rows, cols) row-major.
std::vector<uint16_t> convert_to_half(const WeightMatrix& w, HalfType type);

// n floats into 16-bit values.
void floats_to_half(const float* src, int64_t n, HalfType type, uint16_t* dst);

// The RoPE tables the CPU engine uses: cos/sin of pos * hparams.rope_frequency(i, windowed)
// (base^(-2i/rope_dim), linear scaling and llama3 / LongRoPE factors; for
// `windowed`, a sliding-window layer's: base rope_freq_base_swa, unscaled)
// computed in double, times hparams.rope_attn_factor, (n_ctx, rope_dim/2) each.
void rope_tables(const LlamaHparams& hparams, int32_t n_ctx, std::vector<float>& cos_out, std::vector<float>& sin_out,
                 bool windowed = false);

}  // namespace specd::gpu
