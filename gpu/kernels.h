// The GPU backend's own kernels (gpu/kernels.cu), as host launch functions
// on a stream. 16-bit buffers are uint16_t here and interpreted as `HalfType`
// (f16 or bf16), so this header needs no CUDA C++ types. Every launcher
// checks its launch (SPECD_CUDA_CHECK_LAUNCH) and throws gpu::CudaError.
// Shapes follow the CPU engine (engine/forward.cpp), whose conventions they
// reproduce: RMSNorm as x * 1/sqrt(mean(x^2) + eps) * w, RoPE on pairs
// (2i, 2i+1) or, NEOX, (i, i + rope_dim/2) of each head's first rope_dim
// elements with theta = pos * base^(-2i/rope_dim) (from tables), the KV pool
// laid out (n_blocks, n_layers, block_size, kv_dim). The residual adds have
// no kernel of their own where no post-norm follows: the GEMMs of wo and
// w_down accumulate into the residual stream (beta = 1), saving a pass over
// it; with a post-norm (Gemma) launch_add_rms_norm adds the normed product.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gpu/half_type.h"

namespace specd::gpu {

// x (n_rows, dim) f32 = table[tokens[r]] * scale for each row; table (n_vocab, dim) 16-bit.
// `scale` is 1 but for Gemma (sqrt(dim), LlamaHparams::embedding_scale).
void launch_embed_gather(const uint16_t* table, HalfType table_type, const int32_t* tokens, int32_t n_rows, int32_t dim,
                         float scale, float* x, cudaStream_t stream);
// The same with scale 1.
void launch_embed_gather(const uint16_t* table, HalfType table_type, const int32_t* tokens, int32_t n_rows, int32_t dim,
                         float* x, cudaStream_t stream);

// out (n_rows, dim) 16-bit = rmsnorm(x[src_row(r)]) * weight, with
// src_row(r) = rows ? rows[r] : r (rows picks the rows that need logits);
// x (*, dim) f32, weight (dim) f32.
void launch_rms_norm_to_half(const float* x, const float* weight, const int32_t* rows, int32_t n_rows, int32_t dim, float eps,
                             HalfType out_type, uint16_t* out, cudaStream_t stream);

// x (n_rows, dim) f32 += rmsnorm(proj (n_rows, dim) f32) * weight (dim) f32:
// a post-norm (Gemma's post_attention_norm / post_ffw_norm) and the residual add.
void launch_add_rms_norm(const float* proj, const float* weight, int32_t n_rows, int32_t dim, float eps, float* x,
                         cudaStream_t stream);

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
    int32_t head_dim = 0;   // need not be dim / n_heads (Qwen3, Gemma 3)
    int32_t rope_half = 0;  // rope_dim / 2: pairs rotated per head (rope_dim <= head_dim: partial rotary, Phi-3)
    bool neox = false;      // pairs (i, i + rope_half) (Qwen, Phi-3, Gemma) instead of (2i, 2i+1) (Llama)
};

// What a family does between the q | k | v product and RoPE, in the CPU
// engine's order: the biases (Qwen2) added to q, k and v, then each q and k
// head RMS-normed (Qwen3, Gemma 3). Null pointers: not done.
struct QkvExtras {
    const float* bias = nullptr;    // (q_dim + 2*kv_dim) f32: bq | bk | bv
    const float* q_norm = nullptr;  // (head_dim) f32, one weight for every q head; with k_norm
    const float* k_norm = nullptr;  // (head_dim) f32, every k head
    float eps = 1e-5f;              // the norms' epsilon (LlamaHparams::rms_eps)
};

// In place on qkv (n_rows, qkv_ld) f32 laid out q (n_heads*head_dim) | k | v:
// `extras` (biases, Q/K norms), then rotates q and k by the row's position
// (rope_cos/rope_sin (n_ctx, rope_half) f32; heads.neox picks the pairing),
// then stores k and v into the pool at layer `layer`.
void launch_rope_store_kv(float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads, const float* rope_cos,
                          const float* rope_sin, const KvPoolView& pool, int32_t layer, const QkvExtras& extras,
                          cudaStream_t stream);
// The same without extras (Llama).
void launch_rope_store_kv(float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads, const float* rope_cos,
                          const float* rope_sin, const KvPoolView& pool, int32_t layer, cudaStream_t stream);

// Causal attention of each row over positions [first, pos] of its sequence
// (its own key is already stored), first = max(0, pos - window + 1) for a
// window > 0 (Gemma's sliding-window layers), else 0; grouped-query heads;
// scores are q.k * scale (LlamaHparams::score_scale()); q from qkv (row
// stride qkv_ld), out (n_rows, n_heads*head_dim) 16-bit. `max_positions`
// bounds pos + 1 over the rows (it sizes shared memory:
// (head_dim + max_positions + 32) floats).
void launch_paged_attention(const float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads,
                            const KvPoolView& pool, int32_t layer, int32_t max_positions, float scale, int32_t window,
                            HalfType out_type, uint16_t* out, cudaStream_t stream);
// The same with scale 1/sqrt(head_dim) and no window (Llama).
void launch_paged_attention(const float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads,
                            const KvPoolView& pool, int32_t layer, int32_t max_positions, HalfType out_type, uint16_t* out,
                            cudaStream_t stream);

// The gated FFN's activation act(gate) * up (engine FfnActivation).
enum class GateActivation {
    Silu,      // SwiGLU: gate / (1 + exp(-gate)) (Llama, Qwen, Phi-3)
    GeluTanh,  // GeGLU: 0.5 g (1 + tanh(sqrt(2/pi) g (1 + 0.044715 g^2))) (Gemma)
};

// out (n_rows, ffn) 16-bit = act(gate) * up, from gate_up (n_rows, 2*ffn) f32 = gate | up.
void launch_gated_to_half(const float* gate_up, int32_t n_rows, int32_t ffn, GateActivation act, HalfType out_type,
                          uint16_t* out, cudaStream_t stream);
// The same with SiLU.
void launch_swiglu_to_half(const float* gate_up, int32_t n_rows, int32_t ffn, HalfType out_type, uint16_t* out,
                           cudaStream_t stream);

// In place on n f32 values: x = cap * tanh(x / cap), cap > 0 (Gemma's final logit soft-capping).
void launch_softcap(float* x, size_t n, float cap, cudaStream_t stream);

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
// launch_gemv_swiglu with the activation `act` (launch_gated_to_half's bits).
void launch_gemv_gated(const uint16_t* a, const uint16_t* w_gate_up, HalfType type, GateActivation act, int32_t m_rows,
                       int32_t ffn, int32_t k, uint16_t* out, cudaStream_t stream);

// qkv (rows.n_rows, qkv_ld) f32 = a (n_rows, k) · wqkv (qkv_ld, k)^T, then
// launch_rope_store_kv's work in the same kernel: q and k rotated in qkv, k
// and v stored into the pool (of the weights' 16-bit type, pool.type) at
// `layer`. Adjacent pairs only, no extras (a block holds 16 outputs: a NEOX
// pair or a head's norm spans blocks): Llama's graph. Throws gpu::Error
// unless gemv_fits(a, wqkv, rows.n_rows, k), !heads.neox and
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
