// The GPU backend's own kernels (gpu/kernels.cu), as host launch functions
// on a stream. 16-bit buffers are uint16_t here and interpreted as `HalfType`
// (f16 or bf16), so this header needs no CUDA C++ types. Every launcher
// checks its launch (SPECD_CUDA_CHECK_LAUNCH) and throws gpu::CudaError.
// Shapes follow the CPU engine (engine/forward.cpp), whose conventions they
// reproduce: RMSNorm as x * 1/sqrt(mean(x^2) + eps) * w, RoPE on adjacent
// pairs (2i, 2i+1) of each head with theta = pos * base^(-2i/rope_dim), the
// KV pool laid out (n_blocks, n_layers, block_size, kv_dim). The residual
// adds have no kernel of their own: the GEMMs of wo and w_down accumulate
// into the residual stream (beta = 1), saving a pass over it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gpu/half_type.h"

namespace specd::gpu {

// x (n_rows, dim) f32 = table[tokens[r]] for each row; table (n_vocab, dim) 16-bit.
void launch_embed_gather(const uint16_t* table, HalfType table_type, const int32_t* tokens, int32_t n_rows, int32_t dim,
                         float* x, cudaStream_t stream);

// out (n_rows, dim) 16-bit = rmsnorm(x[src_row(r)]) * weight, with
// src_row(r) = rows ? rows[r] : r (rows picks the rows that need logits);
// x (*, dim) f32, weight (dim) f32.
void launch_rms_norm_to_half(const float* x, const float* weight, const int32_t* rows, int32_t n_rows, int32_t dim, float eps,
                             HalfType out_type, uint16_t* out, cudaStream_t stream);

struct KvPoolView {
    uint16_t* k = nullptr;   // (n_blocks, n_layers, block_size, kv_dim) 16-bit
    uint16_t* v = nullptr;   // (n_blocks, n_layers, block_size, kv_dim) 16-bit
    HalfType type = HalfType::F16;
    int32_t n_layers = 0;
    int32_t block_size = 0;
    int32_t kv_dim = 0;
};

struct RowsView {
    int32_t n_rows = 0;
    const int32_t* row_pos = nullptr;      // (n_rows) absolute position
    const int32_t* row_item = nullptr;     // (n_rows) batch item
    const int32_t* block_table = nullptr;  // (n_items, table_stride) pool block ids
    int32_t table_stride = 0;
};

struct HeadShape {
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t rope_half = 0;  // rope_dim / 2: pairs rotated per head
};

// In place on qkv (n_rows, qkv_ld) f32 laid out q (n_heads*head_dim) | k | v:
// rotates q and k by the row's position (rope_cos/rope_sin (n_ctx, rope_half)
// f32), then stores k and v into the pool at layer `layer`.
void launch_rope_store_kv(float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads, const float* rope_cos,
                          const float* rope_sin, const KvPoolView& pool, int32_t layer, cudaStream_t stream);

// Causal attention of each row over positions [0, pos] of its sequence
// (its own key is already stored), grouped-query heads; q from qkv (row
// stride qkv_ld), out (n_rows, n_heads*head_dim) 16-bit. `max_positions`
// bounds pos + 1 over the rows (it sizes shared memory).
void launch_paged_attention(const float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads,
                            const KvPoolView& pool, int32_t layer, int32_t max_positions, HalfType out_type, uint16_t* out,
                            cudaStream_t stream);

// out (n_rows, ffn) 16-bit = silu(gate) * up, from gate_up (n_rows, 2*ffn) f32 = gate | up.
void launch_swiglu_to_half(const float* gate_up, int32_t n_rows, int32_t ffn, HalfType out_type, uint16_t* out,
                           cudaStream_t stream);

// ---- small-batch matrix products (decode and verification steps)

// The most activation rows launch_gemv takes; larger batches go to cuBLAS.
constexpr int32_t kGemvMaxRows = 16;

// Whether launch_gemv takes this product: 1 <= m_rows <= kGemvMaxRows, k a
// multiple of 32, a and w 16-byte aligned. The kernels use the tensor cores'
// mma.sync: the caller also needs a device of compute capability >= 8.0.
bool gemv_fits(const uint16_t* a, const uint16_t* w, int32_t m_rows, int32_t k);

// c (m_rows, n_out) f32 = a (m_rows, k) 16-bit · w (n_out, k)^T 16-bit + beta * c,
// f32 accumulation on the tensor cores; beta 0 never reads c. Each output's
// sum is formed in the same order for every m_rows, so a row's result does
// not depend on the rows batched with it. Throws gpu::Error unless gemv_fits.
void launch_gemv(const uint16_t* a, const uint16_t* w, HalfType type, float* c, int32_t m_rows, int32_t n_out, int32_t k,
                 float beta, cudaStream_t stream);

// out (m_rows, ffn) 16-bit = silu(gate) * up with gate | up (m_rows, 2*ffn) =
// a (m_rows, k) · w_gate_up (2*ffn, k)^T: launch_gemv and launch_swiglu_to_half
// in one kernel, the same bits, without the f32 gate | up in memory. out must
// not overlap a. Throws gpu::Error unless gemv_fits.
void launch_gemv_swiglu(const uint16_t* a, const uint16_t* w_gate_up, HalfType type, int32_t m_rows, int32_t ffn, int32_t k,
                        uint16_t* out, cudaStream_t stream);

// qkv (rows.n_rows, qkv_ld) f32 = a (n_rows, k) · wqkv (qkv_ld, k)^T, then
// launch_rope_store_kv's work in the same kernel: q and k rotated in qkv, k
// and v stored into the pool (of the weights' 16-bit type, pool.type) at
// `layer`. Throws gpu::Error unless gemv_fits(a, wqkv, rows.n_rows, k) and
// qkv_ld = (n_heads + 2 * n_kv_heads) * head_dim.
void launch_gemv_qkv_rope(const uint16_t* a, const uint16_t* wqkv, float* qkv, int32_t qkv_ld, int32_t k, const RowsView& rows,
                          const HeadShape& heads, const float* rope_cos, const float* rope_sin, const KvPoolView& pool,
                          int32_t layer, cudaStream_t stream);

// ---- sampling helpers: only tokens and the needed probabilities go back to the host.

// out (n_rows) = argmax of each logits row (n_rows, n_vocab); the lowest id on ties (as the CPU sampler).
void launch_argmax_rows(const float* logits, int32_t n_rows, int32_t n_vocab, int32_t* out, cudaStream_t stream);

// In place: each row (n_rows, n_vocab) becomes softmax(row / temperature); temperature > 0.
void launch_softmax_rows(float* rows, int32_t n_rows, int32_t n_vocab, float temperature, cudaStream_t stream);

// The k largest values of each row (n_rows, n_vocab), in descending order
// (ties: lower id first): ids (n_rows, k), values (n_rows, k); 1 <= k <= n_vocab.
// A top-p cut then needs only these k values on the host.
void launch_top_k_rows(const float* rows, int32_t n_rows, int32_t n_vocab, int32_t k, int32_t* ids, float* values,
                       cudaStream_t stream);

// ---- synthetic weights (benchmarks of shapes no file is shipped for)

// dst (n) 16-bit uniform in [-scale, scale), a hash of (seed, index): the same on every run.
void launch_fill_random_half(uint16_t* dst, size_t n, uint64_t seed, float scale, HalfType type, cudaStream_t stream);
// dst (n) f32 = value.
void launch_fill_float(float* dst, size_t n, float value, cudaStream_t stream);

}  // namespace specd::gpu
