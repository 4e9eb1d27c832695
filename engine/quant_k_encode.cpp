// Writers for the types llama.cpp's Q4_K_M / Q5_K_M / Q6_K mixes use: Q4_K,
// Q5_K, Q6_K and their fallbacks q5_0 / q5_1 (q8_0 is in tensor_type.cpp).
// q5_0 and q5_1 follow ggml's reference quantizers. The K-quants use the
// same scale structure as ggml's but pick each group's scale (and min)
// directly from its range instead of ggml's iterative error search: any
// reader decodes them exactly (the formats are ggml's), they are only a
// little less accurate than llama.cpp's own files.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant_k.h"
#include "engine/tensor_type.h"

namespace specd {

namespace {

// Round half away from zero, clamped to [lo, hi] (NaN -> lo).
int round_clamp(float v, int lo, int hi) {
    const float r = std::round(v);
    if (!(r >= static_cast<float>(lo))) return lo;
    if (r > static_cast<float>(hi)) return hi;
    return static_cast<int>(r);
}

// Packs Q4_K/Q5_K's eight 6-bit (scale, min) pairs into 12 bytes, the
// inverse of quant_k.cpp's scale_min_k4.
void pack_scale_min_k4(const int sc[8], const int m[8], uint8_t s[12]) {
    std::memset(s, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = static_cast<uint8_t>(sc[j]);
            s[j + 4] = static_cast<uint8_t>(m[j]);
        } else {
            s[j + 4] = static_cast<uint8_t>((sc[j] & 0x0f) | ((m[j] & 0x0f) << 4));
            s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
            s[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
        }
    }
}

// One Q4_K/Q5_K super-block: codes L[256] in [0, nmax] with x ~= d*sc*L - dmin*m per group of 32.
void quantize_kx(const float* x, int nmax, uint16_t& d_out, uint16_t& dmin_out, uint8_t scales[12], uint8_t L[256]) {
    float scale[8], min[8];  // group g: x ~= scale * L - min, min >= 0
    float max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < 8; ++g) {
        const float* xg = x + 32 * g;
        float lo = xg[0], hi = xg[0];
        for (int j = 1; j < 32; ++j) {
            lo = std::min(lo, xg[j]);
            hi = std::max(hi, xg[j]);
        }
        lo = std::min(lo, 0.0f);  // the format's mins are subtracted: x = s*q - m with m >= 0
        scale[g] = (hi - lo) / static_cast<float>(nmax);
        min[g] = -lo;
        max_scale = std::max(max_scale, scale[g]);
        max_min = std::max(max_min, min[g]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    int sc[8], m[8];
    for (int g = 0; g < 8; ++g) {
        sc[g] = round_clamp(inv_scale * scale[g], 0, 63);
        m[g] = round_clamp(inv_min * min[g], 0, 63);
    }
    pack_scale_min_k4(sc, m, scales);
    d_out = fp32_to_fp16(max_scale / 63.0f);
    dmin_out = fp32_to_fp16(max_min / 63.0f);
    // Codes against the scales as stored (fp16 d, dmin; 6-bit sc, m).
    const float d = fp16_to_fp32(d_out), dmin = fp16_to_fp32(dmin_out);
    for (int g = 0; g < 8; ++g) {
        const float ds = d * static_cast<float>(sc[g]), dm = dmin * static_cast<float>(m[g]);
        for (int j = 0; j < 32; ++j) {
            L[32 * g + j] = static_cast<uint8_t>(ds > 0.0f ? round_clamp((x[32 * g + j] + dm) / ds, 0, nmax) : 0);
        }
    }
}

}  // namespace

// ggml's quantize_row_q5_0_ref: d = max / -16 with the signed value of
// largest magnitude, q = min(31, (int8)(x/d + 16.5)).
void quantize_q5_0(const float* x, void* y, int64_t n_blocks) {
    BlockQ5_0* b = static_cast<BlockQ5_0*>(y);
    for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; ++j) {
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            // Truncation toward zero, as ggml's (int8_t) cast of a positive value.
            const int q0 = std::min(31, static_cast<int>(std::max(0.0f, x[j] * id + 16.5f)));
            const int q1 = std::min(31, static_cast<int>(std::max(0.0f, x[j + 16] * id + 16.5f)));
            b[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
        }
        std::memcpy(b[i].qh, &qh, 4);
    }
}

// ggml's quantize_row_q5_1_ref: d = (max - min) / 31, m = min, q = (int)((x - min)/d + 0.5).
void quantize_q5_1(const float* x, void* y, int64_t n_blocks) {
    BlockQ5_1* b = static_cast<BlockQ5_1*>(y);
    for (int64_t i = 0; i < n_blocks; ++i, x += 32) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) {
            lo = std::min(lo, x[j]);
            hi = std::max(hi, x[j]);
        }
        const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = fp32_to_fp16(d);
        b[i].m = fp32_to_fp16(lo);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(31, static_cast<int>(std::max(0.0f, (x[j] - lo) * id + 0.5f)));
            const int q1 = std::min(31, static_cast<int>(std::max(0.0f, (x[j + 16] - lo) * id + 0.5f)));
            b[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
            qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
        }
        std::memcpy(b[i].qh, &qh, 4);
    }
}

void quantize_q4_k(const float* x, void* y, int64_t n_blocks) {
    BlockQ4_K* b = static_cast<BlockQ4_K*>(y);
    for (int64_t i = 0; i < n_blocks; ++i, x += kSuperBlock) {
        uint8_t L[256];
        quantize_kx(x, 15, b[i].d, b[i].dmin, b[i].scales, L);
        for (int s = 0; s < 4; ++s) {  // stretch s: low nibbles = group 2s, high = 2s + 1
            for (int l = 0; l < 32; ++l) b[i].qs[32 * s + l] = static_cast<uint8_t>(L[64 * s + l] | (L[64 * s + 32 + l] << 4));
        }
    }
}

void quantize_q5_k(const float* x, void* y, int64_t n_blocks) {
    BlockQ5_K* b = static_cast<BlockQ5_K*>(y);
    for (int64_t i = 0; i < n_blocks; ++i, x += kSuperBlock) {
        uint8_t L[256];
        quantize_kx(x, 31, b[i].d, b[i].dmin, b[i].scales, L);
        std::memset(b[i].qh, 0, sizeof b[i].qh);
        for (int s = 0; s < 4; ++s) {
            for (int l = 0; l < 32; ++l) {
                const int lo = L[64 * s + l], hi = L[64 * s + 32 + l];
                b[i].qs[32 * s + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
                b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * s)) | ((hi >> 4) << (2 * s + 1)));
            }
        }
    }
}

void quantize_q6_k(const float* x, void* y, int64_t n_blocks) {
    BlockQ6_K* b = static_cast<BlockQ6_K*>(y);
    for (int64_t i = 0; i < n_blocks; ++i, x += kSuperBlock) {
        // Group g of 16: scale = vmax / -32 with vmax its signed value of
        // largest magnitude (codes -32..31, as q4_0's d = max / -8).
        float scale[16], max_scale = 0.0f, amax_scale = 0.0f;
        for (int g = 0; g < 16; ++g) {
            float amax = 0.0f, vmax = 0.0f;
            for (int j = 0; j < 16; ++j) {
                if (amax < std::fabs(x[16 * g + j])) {
                    amax = std::fabs(x[16 * g + j]);
                    vmax = x[16 * g + j];
                }
            }
            scale[g] = vmax / -32.0f;
            if (std::fabs(scale[g]) > amax_scale) {
                amax_scale = std::fabs(scale[g]);
                max_scale = scale[g];
            }
        }
        const float iscale = max_scale != 0.0f ? -128.0f / max_scale : 0.0f;
        b[i].d = fp32_to_fp16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
        const float d = fp16_to_fp32(b[i].d);
        uint8_t L[256];
        for (int g = 0; g < 16; ++g) {
            const int sc = round_clamp(iscale * scale[g], -128, 127);
            b[i].scales[g] = static_cast<int8_t>(sc);
            const float ds = d * static_cast<float>(sc);
            for (int j = 0; j < 16; ++j) {
                L[16 * g + j] = static_cast<uint8_t>(ds != 0.0f ? round_clamp(x[16 * g + j] / ds, -32, 31) + 32 : 32);
            }
        }
        for (int h = 0; h < 2; ++h) {  // halves of 128: see dequantize_q6_k
            const uint8_t* Lh = L + 128 * h;
            uint8_t* ql = b[i].ql + 64 * h;
            uint8_t* qh = b[i].qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
                ql[l] = static_cast<uint8_t>((Lh[l] & 0x0f) | ((Lh[l + 64] & 0x0f) << 4));
                ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0x0f) | ((Lh[l + 96] & 0x0f) << 4));
                qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

}  // namespace specd
