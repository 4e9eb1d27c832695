// Dequantisation of the K-quant and fallback block formats. Bit-exactness
// with ggml rests on computing every element as ggml does: the same float
// products in the same order, no fused multiply-add (this file is built
// without ISA flags, so the compiler has no FMA to contract into).

#include "engine/quant_k.h"

#include <cmath>
#include <cstring>

#include "engine/tensor_type.h"

namespace specd {

const int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

namespace {

template <class Block>
const Block* blocks(const void* x) {
    return static_cast<const Block*>(x);
}

uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Fifth bits of q5_0/q5_1: element j (0..15) and j + 16.
int high_bit_lo(uint32_t qh, int j) { return static_cast<int>((qh >> j) << 4) & 0x10; }
int high_bit_hi(uint32_t qh, int j) { return static_cast<int>(qh >> (j + 12)) & 0x10; }

// The 6-bit (scale, min) pair of group g (0..7) of Q4_K/Q5_K.
void scale_min_k4(int g, const uint8_t* s, int& sc, int& m) {
    if (g < 4) {
        sc = s[g] & 63;
        m = s[g + 4] & 63;
    } else {
        sc = (s[g + 4] & 0x0f) | ((s[g - 4] >> 6) << 4);
        m = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
    }
}

// Q3_K's 6-bit scale of group g (0..15), still offset by 32: the low nibble
// from byte g (g < 8) or the high nibble of byte g - 8, the top two bits from
// byte 8 + g % 4 at bit 2 * (g / 4).
int scale_q3_k(int g, const uint8_t* s) {
    const int low = g < 8 ? (s[g] & 0x0f) : (s[g - 8] >> 4);
    const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return low | (high << 4);
}

bool finite_fp16(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

template <class Block, class Scales>
int64_t first_nonfinite(const void* x, int64_t n_blocks, Scales scales) {
    const Block* b = blocks<Block>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        if (!scales(b[i])) return i;
    }
    return -1;
}

}  // namespace

void dequantize_q5_0(const void* x, float* y, int64_t n_blocks) {
    const BlockQ5_0* b = blocks<BlockQ5_0>(x);
    for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
        const float d = fp16_to_fp32(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; ++j) {
            const int q0 = ((b[i].qs[j] & 0x0f) | high_bit_lo(qh, j)) - 16;
            const int q1 = ((b[i].qs[j] >> 4) | high_bit_hi(qh, j)) - 16;
            y[j] = static_cast<float>(q0) * d;
            y[j + 16] = static_cast<float>(q1) * d;
        }
    }
}

void dequantize_q5_1(const void* x, float* y, int64_t n_blocks) {
    const BlockQ5_1* b = blocks<BlockQ5_1>(x);
    for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
        const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; ++j) {
            const int q0 = (b[i].qs[j] & 0x0f) | high_bit_lo(qh, j);
            const int q1 = (b[i].qs[j] >> 4) | high_bit_hi(qh, j);
            y[j] = static_cast<float>(q0) * d + m;
            y[j + 16] = static_cast<float>(q1) * d + m;
        }
    }
}

void dequantize_iq4_nl(const void* x, float* y, int64_t n_blocks) {
    const BlockIQ4_NL* b = blocks<BlockIQ4_NL>(x);
    for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(kIq4NlValues[b[i].qs[j] & 0x0f]);
            y[j + 16] = d * static_cast<float>(kIq4NlValues[b[i].qs[j] >> 4]);
        }
    }
}

void dequantize_q2_k(const void* x, float* y, int64_t n_blocks) {
    const BlockQ2_K* b = blocks<BlockQ2_K>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        int g = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b[i].qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part, ++g) {  // bytes 0..15, then 16..31
                    const uint8_t sc = b[i].scales[g];
                    const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequantize_q3_k(const void* x, float* y, int64_t n_blocks) {
    const BlockQ3_K* b = blocks<BlockQ3_K>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        int g = 0;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q = b[i].qs + 32 * half;
            for (int j = 0; j < 4; ++j) {
                const int shift = 2 * j;
                const uint8_t bit = static_cast<uint8_t>(1u << (4 * half + j));
                for (int part = 0; part < 2; ++part, ++g) {
                    const float dl = d * static_cast<float>(scale_q3_k(g, b[i].scales) - 32);
                    for (int l = 16 * part; l < 16 * part + 16; ++l) {
                        const int v = ((q[l] >> shift) & 3) - ((b[i].hmask[l] & bit) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void dequantize_q4_k(const void* x, float* y, int64_t n_blocks) {
    const BlockQ4_K* b = blocks<BlockQ4_K>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int s = 0; s < 4; ++s) {  // 64-element stretches, 32 bytes of qs each
            const uint8_t* q = b[i].qs + 32 * s;
            int sc, m;
            scale_min_k4(2 * s, b[i].scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            scale_min_k4(2 * s + 1, b[i].scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void dequantize_q5_k(const void* x, float* y, int64_t n_blocks) {
    const BlockQ5_K* b = blocks<BlockQ5_K>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
        for (int s = 0; s < 4; ++s) {
            const uint8_t* q = b[i].qs + 32 * s;
            const uint8_t u1 = static_cast<uint8_t>(1u << (2 * s)), u2 = static_cast<uint8_t>(2u << (2 * s));
            int sc, m;
            scale_min_k4(2 * s, b[i].scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            scale_min_k4(2 * s + 1, b[i].scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((q[l] & 0x0f) + ((b[i].qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((q[l] >> 4) + ((b[i].qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

void dequantize_q6_k(const void* x, float* y, int64_t n_blocks) {
    const BlockQ6_K* b = blocks<BlockQ6_K>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int half = 0; half < 2; ++half, y += 128) {
            const uint8_t* ql = b[i].ql + 64 * half;
            const uint8_t* qh = b[i].qh + 32 * half;
            const int8_t* sc = b[i].scales + 8 * half;
            for (int l = 0; l < 32; ++l) {
                const int g = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                // (d * scale) * q, the order ggml's expression evaluates in.
                y[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
            }
        }
    }
}

void dequantize_iq4_xs(const void* x, float* y, int64_t n_blocks) {
    const BlockIQ4_XS* b = blocks<BlockIQ4_XS>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int g = 0; g < 8; ++g, y += 32) {
            const int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0x0f) | (((b[i].scales_h >> (2 * g)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            const uint8_t* q = b[i].qs + 16 * g;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(kIq4NlValues[q[j] & 0x0f]);
                y[j + 16] = dl * static_cast<float>(kIq4NlValues[q[j] >> 4]);
            }
        }
    }
}

int64_t first_nonfinite_q5_0(const void* x, int64_t n) {
    return first_nonfinite<BlockQ5_0>(x, n, [](const BlockQ5_0& b) { return finite_fp16(b.d); });
}
int64_t first_nonfinite_q5_1(const void* x, int64_t n) {
    return first_nonfinite<BlockQ5_1>(x, n, [](const BlockQ5_1& b) { return finite_fp16(b.d) && finite_fp16(b.m); });
}
int64_t first_nonfinite_iq4_nl(const void* x, int64_t n) {
    return first_nonfinite<BlockIQ4_NL>(x, n, [](const BlockIQ4_NL& b) { return finite_fp16(b.d); });
}
int64_t first_nonfinite_q2_k(const void* x, int64_t n) {
    return first_nonfinite<BlockQ2_K>(x, n, [](const BlockQ2_K& b) { return finite_fp16(b.d) && finite_fp16(b.dmin); });
}
int64_t first_nonfinite_q3_k(const void* x, int64_t n) {
    return first_nonfinite<BlockQ3_K>(x, n, [](const BlockQ3_K& b) { return finite_fp16(b.d); });
}
int64_t first_nonfinite_q4_k(const void* x, int64_t n) {
    return first_nonfinite<BlockQ4_K>(x, n, [](const BlockQ4_K& b) { return finite_fp16(b.d) && finite_fp16(b.dmin); });
}
int64_t first_nonfinite_q5_k(const void* x, int64_t n) {
    return first_nonfinite<BlockQ5_K>(x, n, [](const BlockQ5_K& b) { return finite_fp16(b.d) && finite_fp16(b.dmin); });
}
int64_t first_nonfinite_q6_k(const void* x, int64_t n) {
    return first_nonfinite<BlockQ6_K>(x, n, [](const BlockQ6_K& b) { return finite_fp16(b.d); });
}
int64_t first_nonfinite_iq4_xs(const void* x, int64_t n) {
    return first_nonfinite<BlockIQ4_XS>(x, n, [](const BlockIQ4_XS& b) { return finite_fp16(b.d); });
}

}  // namespace specd
