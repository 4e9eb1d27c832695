#include "gpu/weight_convert.h"

#include <cmath>
#include <string>

#include "engine/error.h"
#include "engine/tensor_type.h"

namespace specd::gpu {

const char* half_type_name(HalfType type) { return type == HalfType::F16 ? "f16" : "bf16"; }

uint16_t float_to_half(float x, HalfType type) { return type == HalfType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x); }

float half_to_float(uint16_t h, HalfType type) { return type == HalfType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h); }

void floats_to_half(const float* src, int64_t n, HalfType type, uint16_t* dst) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i], type);
}

void convert_rows_to_half(const WeightMatrix& w, int64_t row_begin, int64_t row_end, HalfType type, uint16_t* dst) {
    if (row_begin < 0 || row_end > w.rows || row_begin > row_end) {
        throw Error("weight conversion: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                    ") outside a matrix of " + std::to_string(w.rows));
    }
    std::vector<float> row(static_cast<size_t>(w.cols));  // (cols) one dequantised row
    for (int64_t r = row_begin; r < row_end; ++r) {
        dequantize_row(w.type, w.row(r), row.data(), w.cols);
        floats_to_half(row.data(), w.cols, type, dst + (r - row_begin) * w.cols);
    }
}

std::vector<uint16_t> convert_to_half(const WeightMatrix& w, HalfType type) {
    std::vector<uint16_t> out(static_cast<size_t>(w.rows * w.cols));  // (rows, cols)
    convert_rows_to_half(w, 0, w.rows, type, out.data());
    return out;
}

void rope_tables(const LlamaHparams& hp, int32_t n_ctx, std::vector<float>& cos_out, std::vector<float>& sin_out, bool windowed) {
    // The same expression as ForwardPass's constructor, so both backends
    // rotate by bit-identical angles.
    const int32_t half = hp.rope_dim / 2;
    cos_out.assign(static_cast<size_t>(n_ctx) * half, 0.0f);
    sin_out.assign(static_cast<size_t>(n_ctx) * half, 0.0f);
    for (int32_t p = 0; p < n_ctx; ++p) {
        for (int32_t i = 0; i < half; ++i) {
            const double theta = p * hp.rope_frequency(i, windowed);
            cos_out[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(theta) * hp.rope_attn_factor);
            sin_out[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(theta) * hp.rope_attn_factor);
        }
    }
}

}  // namespace specd::gpu
