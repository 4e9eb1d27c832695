// Entry points of the per-ISA kernel files, called only by kernels.cpp's
// dispatch (which has already checked shapes and types).
//
// PreparedInput layout (kernels.h) as the kernels read it:
//   float weights:  f32_chunk(c, r)  (16) f32, x[r][16c .. 16c+16), zero past k; chunks of all rows
//                                    are interleaved: (kp/16, rows, 16)
//   quantised types:  q8_block(b, r)   (32) int8, block b of x row r: (n_blocks, rows, 32)
//                   q8_meta(b, r)    {corr, d}: (n_blocks, rows) of 8 bytes
//                                    d: x[r][32b + j] ~= d * q8_block(b, r)[j]
//                                    corr: -128 * sum_j q (q8_0 weights) or -8 * sum_j q (q4_0
//                                    weights): the offset that unsigned-times-signed int8 dot
//                                    products (weights + 128, or q4_0 nibbles without their -8)
//                                    must add back; sum_j q itself for the others (their mins
//                                    and offsets are applied per scale group).
#pragma once

#include <cstdint>

#include "engine/kernels.h"

namespace specd::kern {

// The SIMD exp (exp8 / exp16; Cephes' expf scheme): x clamped to
// [kExpMin, kExpMax], x = m ln2 + r with ln2 = kLn2Hi + kLn2Lo, e^r =
// 1 + r + r^2 * P(r), P's coefficients highest first, then e^r * 2^m.
constexpr float kExpMax = 88.7228f, kExpMin = -87.3365f, kLog2e = 1.44269504f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// How far ahead the matmul kernels prefetch weights into L2, as a linear
// byte range: with 1..16 activation rows a matmul streams its weights from
// DRAM, and L1's few miss buffers alone cap a core near 9 GB/s. Measured on
// stories15M (2 threads, weights evicted by the other model's pass): an
// f32 token 3.3 -> 2.6 ms, a 9-token verification 4.2 -> 2.4 ms, a q8_0
// token 1.4 -> 0.5 ms; 8-32 KiB were all within noise.
constexpr int64_t kFarPrefetchBytes = 16384;  // float weights (dot tiles)
constexpr int64_t kQPrefetchBytes = 8192;     // q8_0/q4_0 weights (AMX tiles), the other quantised types
// q8_0/q4_0 direct tiles (up to 16 activation rows), prefetching spread over
// the blocks (q_direct): the 1.1B q8_0 target, 2 threads, decoded 18.6 t/s
// at 16 KiB, 20.2 at 32 KiB, 20.2-20.8 at 48-64 KiB, 19.2-20.5 at 128 KiB.
constexpr int64_t kQTilePrefetchBytes = 49152;

// Where block b (of nb per row) of a packed tile of R rows sits (kernels.h
// pack_weights): its chunks, and its R fp16 kept apart (`apart` = 2 bytes
// per row's block, or 0 when the type keeps none apart), as byte offsets
// from the tile's start. The one statement of the layout's arithmetic.
struct PackedBlockOffsets {
    size_t chunks;
    size_t fp16;
};
constexpr PackedBlockOffsets packed_block_offsets(int64_t b, int64_t nb, size_t R, size_t block_bytes, size_t apart) {
    const size_t body = R * (block_bytes - apart);  // chunk bytes of one block
    const size_t pair = static_cast<size_t>(b >> 1) * 2 * R * block_bytes;
    const size_t in_pair = (b | 1) < nb ? 2 : 1;
    const size_t odd = static_cast<size_t>(b & 1);
    return {pair + odd * body, pair + in_pair * body + odd * apart * R};
}

// The fewest activation rows whose q8_0/q4_0 products go to AMX when it is on
// (kernels.h). A tile computes 16 activation rows whatever it holds, and its
// per-block store and rescale cost more than the vpdpbusd chains of a few
// rows: on a Xeon (Sapphire Rapids class), 2 threads, the 1.1B q8_0 target,
// a 4-row step took 74 ms with AMX against 63 without, 16 rows 81 against 95.
constexpr int kAmxMinRows = 16;

// Activation quantisation of one row, identical bits on every ISA, per block b:
// amax = max|x|, d = amax/127, q = round-half-away(x * (1/d)), corr = corr_mul * sum(q).
// x (k) f32; block b goes to q + b*stride (32 int8) and meta[b*mstride].
struct QuantDst {
    int8_t* q;
    QuantMeta* meta;
    int64_t stride;   // bytes between blocks of q (32 * rows)
    int64_t mstride;  // entries between blocks of meta (rows)
    int32_t corr_mul;
};
void quantize_act_scalar(const float* x, int64_t k, const QuantDst& dst);
void quantize_act_avx2(const float* x, int64_t k, const QuantDst& dst);
void quantize_act_avx512(const float* x, int64_t k, const QuantDst& dst);

// The K-quants (Q2_K..Q6_K) against the q8 layout (corr = sum of the codes); the
// SIMD builds are matmul_avx2/avx512's own cases.
void matmul_kq_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                      int64_t n_end);

// The SIMD K-quant matmuls have two shapes: weight row by weight row (lanes
// along K; best for one activation row, a pure weight stream) and tiles of
// 16 (AVX-512) or 8 (AVX2) weight rows decoded once per super-block and
// transposed so lanes run along N (verification and prompt batches: each
// further activation row costs a few integer dot products per 32 weights).
// Both give the same bits (the rows shape stores exact integer group sums,
// then takes the tiles' float steps), so a row's logits do not depend on
// its batch and greedy speculation equals plain decoding exactly.
// matmul_* picks Tiles from kKTileMinRows activation rows (Q2_K: always);
// the tests and the bench call a path directly.
constexpr int kKTileMinRows = 2;
enum class KqPath { Rows, Tiles };
// Types other than Q2_K..Q6_K go to matmul_avx2/avx512.
void matmul_kq_path_avx2(KqPath path, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy,
                         int64_t n_begin, int64_t n_end);
void matmul_kq_path_avx512(KqPath path, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy,
                           int64_t n_begin, int64_t n_end);

// q5_0, q5_1, iq4_nl and iq4_xs weights against the q8 layout (corr = sum).
void matmul_q32_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                       int64_t n_end);

// Decoding blocks to f32 and dotting them with the f32 layout: no type uses
// it any more (all have integer kernels); kept as the simplest kernel for a
// new type and as the bench's baseline:
// each weight block (at most kDequantMaxBlock elements) is decoded once per
// group of up to kDequantRowGroup activation rows and dotted with their f32
// layout. The scalar build is the reference the others are tested against.
constexpr int kDequantMaxBlock = 256;
constexpr int kDequantRowGroup = 16;
void matmul_dequant_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                           int64_t n_end);
void matmul_dequant_avx2(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                         int64_t n_end);
void matmul_dequant_avx512(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                           int64_t n_end);

void matmul_scalar(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                   int64_t n_end);
void matmul_avx2(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                 int64_t n_end);
void matmul_avx512(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
                   int64_t n_end);

// Packed q8_0/q4_0 weights (kernels.h pack_weights), n0 and n1 multiples of
// the ISA's tile rows.
void matmul_packed_avx512(TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                          int64_t n0, int64_t n1);
void matmul_packed_avx2(TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                        int64_t n0, int64_t n1);

float dot_f32_avx2(const float* a, const float* b, int64_t n);
float dot_f32_avx512(const float* a, const float* b, int64_t n);
void axpy_f32_avx2(float alpha, const float* x, float* y, int64_t n);
void axpy_f32_avx512(float alpha, const float* x, float* y, int64_t n);
void dot_rows_avx2(TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
                   float* out);
void dot_rows_avx512(TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
                     float* out);
float exp_shift_sum_f32_avx2(float* x, int64_t n, float shift);
float exp_shift_sum_f32_avx512(float* x, int64_t n, float shift);
void weighted_rows_avx2(TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                        int64_t n, float* y);
void weighted_rows_avx512(TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                          int64_t n, float* y);
void store_row_f16_avx2(const float* src, uint16_t* dst, int64_t n);
void store_row_f16_avx512(const float* src, uint16_t* dst, int64_t n);
void silu_mul_f32_avx2(float* g, const float* u, int64_t n);
void silu_mul_f32_avx512(float* g, const float* u, int64_t n);
void dequantize_row_avx2(TensorType type, const void* src, float* dst, int64_t n);
void dequantize_row_avx512(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace specd::kern
