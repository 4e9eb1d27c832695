// The CPU matmul of the forward pass and the few vector helpers attention and
// the norms need, each in three builds chosen at run time: a portable scalar
// reference, AVX2+FMA+F16C and AVX-512 (F/BW/VL/DQ + VNNI). Weights are used
// in place, in their file layout (tensor_type.h); activations are prepared
// once per matmul into a PreparedInput that every thread reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/tensor_type.h"

namespace specd {

enum class Isa { Scalar, Avx2, Avx512 };

// Per (block, row) data of q8_0-prepared activations, side by side so a
// kernel fetches both with one 8-byte load.
struct QuantMeta {
    int32_t corr;  // -128 * sum(q) for q8_0 weights, -8 * sum(q) for q4_0, sum(q) for the other q8-layout types
    float d;       // scale: x ~= d * q
};

// Per (block, row) of the q8 layout of the types with corr = sum (q5_0 ..
// the K-quants): d times the sums of the block's two halves of 16 codes, for
// the multi-row K-quant kernels whose weight groups of 16 (or 32) carry their
// own min or code offset.
struct HalfSums {
    float lo;  // d * sum(q[0..16))
    float hi;  // d * sum(q[16..32))
};

// The best instruction set this CPU and OS support (AVX-512 needs
// F+BW+VL+DQ+VNNI and OS-enabled zmm state). The environment variable
// SPECD_ISA=scalar|avx2|avx512 lowers the choice, never raises it; any other
// value throws specd::Error.
Isa best_isa();
// What the CPU supports, ignoring SPECD_ISA.
Isa cpu_isa();
// True when `isa` can run on this CPU.
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"

// Intel AMX (amx-tile + amx-int8) for the integer products of q8_0
// weights with kAmxMinRows (16) or more activation rows on the AVX-512 path
// (verification steps, batched decoding, prompts). Used where the CPU has it
// and Linux grants the tile state, unless SPECD_AMX=0|off|false. Outputs
// have the same bits with and without it.
bool amx_available();        // the CPU and the OS allow it
bool amx_enabled();          // available and switched on
void set_amx_enabled(bool);  // tests and benchmarks compare both paths

// Activations of one matmul, prepared once and shared read-only by the
// threads that split N. For f32/f16/bf16 weights the rows stay f32 (zero
// padded to a multiple of 16); for q8_0/q4_0 weights they are quantised to q8_0 blocks of
// 32 (K % 32 == 0) as ggml does, but keep their scales in f32 (ggml rounds
// them to fp16), bit-identically on every ISA. q5_0, q5_1, iq4_nl, iq4_xs
// and the K-quants (Q2_K..Q6_K) read the same q8 blocks of 32 with corr =
// sum (their integer kernels scale per 32 or per 16 weights).
class PreparedInput {
public:
    PreparedInput();
    ~PreparedInput();
    PreparedInput(PreparedInput&&) noexcept;
    PreparedInput& operator=(PreparedInput&&) noexcept;
    PreparedInput(const PreparedInput&) = delete;
    PreparedInput& operator=(const PreparedInput&) = delete;

    // Allocates room for up to max_rows rows of max_k elements for any
    // weight type; set_shape/prepare_rows never allocate within it. When it
    // grows the buffer, the current shape is dropped (call set_shape again).
    void reserve(int max_rows, int64_t max_k);
    // Fixes the shape of the next prepare/matmul. Single-threaded. Grows the
    // capacity (allocates) only beyond what reserve() asked for. Throws
    // specd::Error for negative sizes, an unsupported type, or K % 32 != 0
    // with a quantised weight type.
    void set_shape(TensorType weight_type, int rows, int64_t k);
    // x: (rows, k) f32, row stride ldx floats. Prepares rows
    // [row_begin, row_end) only, so threads can split the rows (disjoint
    // ranges, same shape); every row must be prepared before matmul.
    void prepare_rows(Isa isa, const float* x, int64_t ldx, int row_begin, int row_end);

    // True when this input, prepared for weight_type(), can feed weights of
    // `type`: the f32 layout serves every type that reads it, a q8 layout
    // the types with the same correction (q8_0 alone, q4_0 alone; q5_0,
    // q5_1, iq4_nl, iq4_xs and the K-quants together).
    bool serves(TensorType type) const;
    // True when `type`'s weights read a q8 layout (all but f32, f16, bf16).
    static bool quantized_layout(TensorType type) { return correction_multiplier(type) != 0; }
    // The q8 layout's corr = multiplier * sum(q): -128 (q8_0), -8 (q4_0),
    // 1 (q5_0, q5_1, iq4_nl, iq4_xs, Q2_K..Q6_K); 0 for f32, f16, bf16.
    static int32_t correction_multiplier(TensorType type);

    int rows() const { return rows_; }
    int64_t k() const { return k_; }
    TensorType weight_type() const { return type_; }

    // ---- layout, read by the kernels (kernels_internal.h documents it) ----
    // Rows are interleaved per k-chunk / per block so a kernel reaches row
    // t0 + r of a chunk at a constant offset r * 64 (float) or r * 32 (int8).
    bool quantized() const { return quantized_layout(type_); }
    int64_t kp() const { return kp_; }  // k rounded up to 16 (float layout)
    int64_t n_blocks() const { return k_ / kQuantBlock; }
    // Float layout: chunk c (16 elements) of row r, zero past k.
    const float* f32_chunk(int64_t c, int r) const { return f32_ + (c * rows_ + r) * 16; }
    // Quantised layout: block b of row r.
    const int8_t* q8_block(int64_t b, int r) const { return q8_ + (b * rows_ + r) * kQuantBlock; }
    const QuantMeta* q8_meta(int64_t b, int r) const { return qm_ + b * rows_ + r; }
    float q8_scale(int64_t b, int r) const { return q8_meta(b, r)->d; }
    int32_t q8_corr(int64_t b, int r) const { return q8_meta(b, r)->corr; }
    // Only for weight types with correction_multiplier 1 (else unset).
    const HalfSums* half_sums(int64_t b, int r) const { return hs_ + b * rows_ + r; }

private:
    void layout();

    TensorType type_ = TensorType::F32;
    int rows_ = 0;
    int64_t k_ = 0;
    int64_t kp_ = 0;
    size_t capacity_bytes_ = 0;
    struct FreeAligned {
        void operator()(void* p) const;
    };
    std::unique_ptr<unsigned char, FreeAligned> buffer_;  // capacity_bytes_, 64-byte aligned
    float* f32_ = nullptr;     // (kp/16, rows, 16) x, chunk-major
    int8_t* q8_ = nullptr;     // (n_blocks, rows, 32) quantised x, block-major
    QuantMeta* qm_ = nullptr;  // (n_blocks, rows) scale and correction per block
    HalfSums* hs_ = nullptr;   // (n_blocks, rows) scaled half sums per block (corr = sum types)
};

// y[t*ldy + n] = dot(W row n, x row t) for n in [n_begin, n_end), t in
// [0, x.rows()). W: (N, K) rows in `type`'s layout, row stride
// tensor_row_bytes(type, K); x must serve `type` (x.serves(type)). Thread-safe
// for disjoint n ranges; allocates nothing.
void matmul(Isa isa, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n_begin,
            int64_t n_end);

// Packed weights: the SIMD kernels' register tiles of R weight rows (R = 16
// on AVX-512, 8 on AVX2), transposed once at load instead of at every block
// of every call. One-row decoding then reads one linear stream per thread
// and spends no shuffles on the transpose (kernels_avx512.cpp). Same bytes
// as the file's layout; outputs have matmul()'s bits exactly.
//   Tile t (weight rows R t .. R t + R - 1) starts at byte R * t * row_bytes,
//   so rows n.. of a tile start at n * row_bytes as in the file. Within a
//   tile, blocks go in pairs (b = 2p, 2p + 1) from p * 2R * block_bytes:
//     [chunks of b] [chunks of b + 1] [R fp16 of b] [R fp16 of b + 1]
//   (a last unpaired block: [chunks] [fp16]). The fp16 apart is the block's
//   scale d for q8_0 / q4_0, Q6_K's and Q3_K's trailing d; Q4_K, Q5_K and
//   Q2_K (whole 4-byte words) keep none apart. The block's other bytes, in
//   order, make chunks q of 4R bytes whose 4-byte lane i holds row i's bytes
//   4q..4q+3 (q8_0 on AVX-512: each code XOR 0x80, unsigned for vpdpbusd).
// Types: q8_0 and q4_0 on both ISAs, Q2_K..Q6_K on AVX-512; none on scalar.
int packed_tile_rows(Isa isa);  // R: 16 (AVX-512), 8 (AVX2), 0 (scalar)
// A type above for `isa`, rows a multiple of R, K a multiple of the block.
bool packable(Isa isa, TensorType type, int64_t rows, int64_t cols);
// src: (rows, cols) in `type`'s layout; dst: the same byte count, 64-byte
// aligned. Single-threaded; throws specd::Error when not packable.
void pack_weights(Isa isa, TensorType type, const void* src, int64_t rows, int64_t cols, void* dst);
// matmul() on weights packed for `isa` (n_begin and n_end multiples of R).
// Thread-safe for disjoint n ranges; allocates nothing.
void matmul_packed(Isa isa, TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                   int64_t n_begin, int64_t n_end);

// Small vector helpers (any n).
float dot_f32(Isa isa, const float* a, const float* b, int64_t n);
void axpy_f32(Isa isa, float alpha, const float* x, float* y, int64_t n);  // y += alpha*x
// Attention over one KV block, one call per block instead of per position:
// out[j] = scale * dot(q, k + j*ldk, n) for j < rows (q (n), k (rows, ldk)
// elements of kv_type, F32 or F16; anything else throws specd::Error). An
// f16 row gives exactly the f32 result on its values widened to f32.
void dot_rows(Isa isa, TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
              float* out);
void dot_rows_f32(Isa isa, const float* q, const float* k, int64_t ldk, int32_t rows, int64_t n, float scale, float* out);
// x[j] = exp(x[j] - shift) for j < n; returns their sum. The SIMD ISAs use a
// polynomial (relative error < 4e-7 on the softmax range x - shift <= 0)
// instead of std::exp, lane for lane the same whatever n.
float exp_shift_sum_f32(Isa isa, float* x, int64_t n, float shift);
// y (n) += sum over j < rows, in order, of (w[j] * w_scale) * v[j*ldv .. +n]
// (v (rows, ldv) elements of kv_type, F32 or F16, as dot_rows).
void weighted_rows(Isa isa, TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                   int64_t n, float* y);
void weighted_rows_f32(Isa isa, const float* w, float w_scale, const float* v, int64_t ldv, int32_t rows, int64_t n, float* y);
// dst (n elements of kv_type) = src (n) f32: a copy, or f16 rounded to
// nearest even (the same bits on every ISA).
void store_kv_row(Isa isa, TensorType kv_type, const float* src, void* dst, int64_t n);
// SwiGLU's gate: g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i],
// with the SIMD ISAs' polynomial exp.
void silu_mul_f32(Isa isa, float* g, const float* u, int64_t n);
// dst (n) f32 = row src of `type` (an embedding lookup).
void dequantize_row_isa(Isa isa, TensorType type, const void* src, float* dst, int64_t n);

}  // namespace specd
