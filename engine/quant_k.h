// The block formats llama.cpp's quantizer writes beyond q8_0/q4_0: the
// K-quants (super-blocks of 256 elements: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS) and the 32-element types it falls back to for rows that are not a
// multiple of 256 (q5_0, q5_1, IQ4_NL). Layouts are ggml's (ggml-common.h),
// byte for byte; dequantisation gives ggml's floats bit for bit (the same
// operations in the same order: x = scale * q - min, each factor rounded to
// float where ggml rounds it). Q4_K, Q5_K, Q6_K, q5_0 and q5_1 are also
// written (quant_k_encode.cpp), for llama.cpp's Q4_K_M/Q5_K_M/Q6_K mixes.
#pragma once

#include <cstdint>

namespace specd {

constexpr int kSuperBlock = 256;  // elements per K-quant super-block (ggml's QK_K)

// x[j] = d * (q[j] - 16), q = low nibble | bit j of qh << 4 (elements 0..15:
// low nibbles of qs, 16..31: high nibbles; qh bits 0..15 and 16..31).
struct BlockQ5_0 {
    uint16_t d;       // fp16 scale
    uint8_t qh[4];    // fifth bit of each of the 32 elements, element j at bit j
    uint8_t qs[16];   // low 4 bits, as q4_0
};
static_assert(sizeof(BlockQ5_0) == 22);

// x[j] = d * q[j] + m, q as q5_0 without the offset.
struct BlockQ5_1 {
    uint16_t d;       // fp16 scale
    uint16_t m;       // fp16 minimum
    uint8_t qh[4];
    uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// x[j] = d * kIq4NlValues[nibble], nibbles as q4_0.
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// 16 groups of 16: x = d*(sc & 15) * q - dmin*(sc >> 4), q 2 bits; element
// e takes scales[e / 16]; element i of 128-element half h sits in byte
// qs[32h + i % 32] at bits 2*(i / 32).
struct BlockQ2_K {
    uint8_t scales[16];  // 4-bit scale (low) and 4-bit min (high) per group of 16
    uint8_t qs[64];      // 2-bit quants, four per byte
    uint16_t d;          // fp16 scale of the scales
    uint16_t dmin;       // fp16 scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 groups of 16: x = d * (s - 32) * (q - 4*(high bit clear)), q 2 low bits as
// Q2_K's plus one bit from hmask; s 6-bit scales packed in 12 bytes.
struct BlockQ3_K {
    uint8_t hmask[32];   // high bits: element i of half h, bit 4h + (i%128)/32 of hmask[i % 32]
    uint8_t qs[64];      // low 2 bits, as Q2_K
    uint8_t scales[12];  // sixteen 6-bit scales, offset by 32
    uint16_t d;          // fp16 scale of the scales
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 groups of 32: x = d*sc * q - dmin*m, q 4 bits; 6-bit (sc, m) pairs packed
// in 12 bytes (ggml's get_scale_min_k4). Each 64-element stretch uses 32
// bytes of qs: low nibbles first, then high nibbles.
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q4_K plus a fifth bit per element from qh (stretch s: bits 2s and 2s+1).
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 groups of 16: x = d * scales[g] * (q - 32), q 6 bits: 4 from ql, 2 from qh.
struct BlockQ6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// 8 groups of 32: x = d * (ls - 32) * kIq4NlValues[nibble], ls 6 bits (4 low
// in scales_l, 2 high in scales_h); nibbles per group as q4_0's.
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// IQ4_NL / IQ4_XS's non-linear 4-bit code book.
extern const int8_t kIq4NlValues[16];

// y (n_blocks * block elements) = the dequantised blocks of x.
void dequantize_q5_0(const void* x, float* y, int64_t n_blocks);
void dequantize_q5_1(const void* x, float* y, int64_t n_blocks);
void dequantize_iq4_nl(const void* x, float* y, int64_t n_blocks);
void dequantize_q2_k(const void* x, float* y, int64_t n_blocks);
void dequantize_q3_k(const void* x, float* y, int64_t n_blocks);
void dequantize_q4_k(const void* x, float* y, int64_t n_blocks);
void dequantize_q5_k(const void* x, float* y, int64_t n_blocks);
void dequantize_q6_k(const void* x, float* y, int64_t n_blocks);
void dequantize_iq4_xs(const void* x, float* y, int64_t n_blocks);

// x (n_blocks * block elements) quantised into blocks at y: q5_0 and q5_1
// as ggml's reference quantizers; Q4_K, Q5_K, Q6_K with ggml's structure and
// each group's scale (and min) taken from its range (no error search).
void quantize_q5_0(const float* x, void* y, int64_t n_blocks);
void quantize_q5_1(const float* x, void* y, int64_t n_blocks);
void quantize_q4_k(const float* x, void* y, int64_t n_blocks);
void quantize_q5_k(const float* x, void* y, int64_t n_blocks);
void quantize_q6_k(const float* x, void* y, int64_t n_blocks);

// Index of the first block whose fp16 scale (or min) is NaN or infinite, or
// -1: llama.cpp's check of a file's blocks (ggml_validate_row_data).
int64_t first_nonfinite_q5_0(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q5_1(const void* x, int64_t n_blocks);
int64_t first_nonfinite_iq4_nl(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q2_k(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q3_k(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q4_k(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q5_k(const void* x, int64_t n_blocks);
int64_t first_nonfinite_q6_k(const void* x, int64_t n_blocks);
int64_t first_nonfinite_iq4_xs(const void* x, int64_t n_blocks);

}  // namespace specd
