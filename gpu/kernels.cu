// The GPU backend's kernels; see kernels.h for shapes and conventions.
// Launch bounds: every kernel either uses one block per row (grid.x or
// grid.y = n_rows, at most 65535 in y, far above max_batch_tokens) or a
// grid-stride loop, so no size limits the grid.
#include "gpu/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/cuda_handles.h"

namespace specd::gpu {

namespace {

constexpr int kWarp = 32;
constexpr int kRowThreads = 256;       // threads of the one-block-per-row kernels (a multiple of 32, at most 1024)
constexpr int kAttentionThreads = 128; // threads per (head, row) of the attention kernel

template <bool kBf16>
__device__ __forceinline__ float to_f32(uint16_t h) {
    if constexpr (kBf16) {
        return __bfloat162float(__ushort_as_bfloat16(h));
    } else {
        return __half2float(__ushort_as_half(h));
    }
}

template <bool kBf16>
__device__ __forceinline__ uint16_t from_f32(float x) {
    if constexpr (kBf16) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    } else {
        return __half_as_ushort(__float2half_rn(x));
    }
}

// Two 16-bit values packed in a word (low half first) as floats.
template <bool kBf16>
__device__ __forceinline__ float2 pair_to_f32(uint32_t packed) {
    if constexpr (kBf16) {
        return make_float2(__uint_as_float(packed << 16), __uint_as_float(packed & 0xffff0000u));
    } else {
        __half2 h;
        memcpy(&h, &packed, sizeof(h));
        return __half22float2(h);
    }
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum / max over the block; every thread gets the result. `scratch` holds
// blockDim.x / 32 floats; the trailing barrier lets the caller reuse it.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = threadIdx.x < n_warps ? scratch[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    const float result = scratch[0];
    __syncthreads();
    return result;
}

__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = threadIdx.x < n_warps ? scratch[threadIdx.x] : -FLT_MAX;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    const float result = scratch[0];
    __syncthreads();
    return result;
}

// (value, id) ordered by value descending, then id ascending: a "beats" b.
__device__ __forceinline__ bool beats(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia < ib);
}

// The block's best (value, id); every thread gets it. Scratch: 2 * 32 words.
__device__ void block_best(float& v, int32_t& id, float* scratch_v, int32_t* scratch_i) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, id, offset);
        if (beats(ov, oi, v, id)) {
            v = ov;
            id = oi;
        }
    }
    if (lane == 0) {
        scratch_v[warp] = v;
        scratch_i[warp] = id;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? scratch_v[lane] : -INFINITY;
        id = lane < n_warps ? scratch_i[lane] : INT32_MAX;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, id, offset);
            if (beats(ov, oi, v, id)) {
                v = ov;
                id = oi;
            }
        }
        if (lane == 0) {
            scratch_v[0] = v;
            scratch_i[0] = id;
        }
    }
    __syncthreads();
    v = scratch_v[0];
    id = scratch_i[0];
    __syncthreads();
}

// ------------------------------------------------------------ kernels ---

template <bool kBf16>
__global__ void embed_gather_kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ tokens, int32_t dim,
                                    float scale, float* __restrict__ x) {
    const int32_t r = blockIdx.x;
    const uint16_t* src = table + static_cast<size_t>(tokens[r]) * dim;
    float* dst = x + static_cast<size_t>(r) * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = to_f32<kBf16>(src[i]) * scale;
}

template <bool kBf16>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight, const int32_t* __restrict__ rows,
                                int32_t dim, float eps, uint16_t* __restrict__ out) {
    __shared__ float scratch[kRowThreads / kWarp];
    const int32_t r = blockIdx.x;
    const float* src = x + static_cast<size_t>(rows ? rows[r] : r) * dim;
    float ss = 0.0f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) ss += src[i] * src[i];
    ss = block_sum(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
    uint16_t* dst = out + static_cast<size_t>(r) * dim;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = from_f32<kBf16>(src[i] * scale * weight[i]);
}

// x[r] += rmsnorm(proj[r]) * weight: one block per row, as the CPU's
// add_normed_rows (the normed value rounded to f32 before the add).
__global__ void add_rms_norm_kernel(const float* __restrict__ proj, const float* __restrict__ weight, int32_t dim, float eps,
                                    float* __restrict__ x) {
    __shared__ float scratch[kRowThreads / kWarp];
    const int32_t r = blockIdx.x;
    const float* src = proj + static_cast<size_t>(r) * dim;
    float* dst = x + static_cast<size_t>(r) * dim;
    float ss = 0.0f;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) ss += src[i] * src[i];
    ss = block_sum(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] += src[i] * scale * weight[i];
}

// Offset of (block b, layer, slot) in the pool, in elements.
__device__ __forceinline__ size_t pool_offset(int32_t block, int32_t layer, int32_t slot, const KvPoolView& pool) {
    return ((static_cast<size_t>(block) * pool.n_layers + layer) * pool.block_size + slot) * static_cast<size_t>(pool.kv_dim);
}

__device__ __forceinline__ int32_t block_of(const RowsView& rows, int32_t r, int32_t pos, int32_t block_size) {
    return rows.block_table[static_cast<size_t>(rows.row_item[r]) * rows.table_stride + pos / block_size];
}

// One block per row: the extras (biases, then the Q/K head norms), RoPE,
// then the K/V stores, each step behind a barrier since a step's threads
// read what other threads of the previous one wrote.
template <bool kBf16>
__global__ void rope_store_kv_kernel(float* __restrict__ qkv, int32_t qkv_ld, RowsView rows, HeadShape heads,
                                     const float* __restrict__ rope_cos, const float* __restrict__ rope_sin, KvPoolView pool,
                                     int32_t layer, QkvExtras extras) {
    const int32_t r = blockIdx.x;
    const int32_t pos = rows.row_pos[r];
    const int32_t hd = heads.head_dim;
    const int32_t q_dim = heads.n_heads * hd, kv_dim = heads.n_kv_heads * hd;
    float* q = qkv + static_cast<size_t>(r) * qkv_ld;
    float* k = q + q_dim;
    const float* v = k + kv_dim;
    if (extras.bias) {  // bq | bk | bv onto q | k | v (Qwen2)
        for (int32_t j = threadIdx.x; j < q_dim + 2 * kv_dim; j += blockDim.x) q[j] += extras.bias[j];
        __syncthreads();
    }
    if (extras.q_norm) {
        // RMSNorm of each q head and each k head (Qwen3, Gemma 3): one warp
        // per head, every lane of the warp on the same head (warp_sum needs all 32).
        const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
        for (int32_t head = warp; head < heads.n_heads + heads.n_kv_heads; head += n_warps) {
            const bool is_q = head < heads.n_heads;
            float* x = is_q ? q + static_cast<size_t>(head) * hd : k + static_cast<size_t>(head - heads.n_heads) * hd;
            const float* w = is_q ? extras.q_norm : extras.k_norm;
            float ss = 0.0f;
            for (int32_t i = lane; i < hd; i += kWarp) ss += x[i] * x[i];
            ss = warp_sum(ss);
            const float scale = 1.0f / sqrtf(ss / static_cast<float>(hd) + extras.eps);
            for (int32_t i = lane; i < hd; i += kWarp) x[i] = x[i] * scale * w[i];
        }
        __syncthreads();
    }
    const float* c = rope_cos + static_cast<size_t>(pos) * heads.rope_half;
    const float* s = rope_sin + static_cast<size_t>(pos) * heads.rope_half;
    // Pairs of q heads then pairs of k heads; each pair is rotated by one
    // thread. Pair i of a head: elements (2i, 2i+1), or NEOX (i, i + rope_half);
    // elements from rope_dim on are left as they are (partial rotary).
    const int32_t q_pairs = heads.n_heads * heads.rope_half, all_pairs = q_pairs + heads.n_kv_heads * heads.rope_half;
    for (int32_t p = threadIdx.x; p < all_pairs; p += blockDim.x) {
        float* base = p < q_pairs ? q : k;
        const int32_t local = p < q_pairs ? p : p - q_pairs;
        const int32_t head = local / heads.rope_half, i = local % heads.rope_half;
        float* x0p = base + static_cast<size_t>(head) * hd + (heads.neox ? i : 2 * i);
        float* x1p = heads.neox ? x0p + heads.rope_half : x0p + 1;
        const float x0 = *x0p, x1 = *x1p;
        *x0p = x0 * c[i] - x1 * s[i];
        *x1p = x0 * s[i] + x1 * c[i];
    }
    __syncthreads();  // k is rotated before it is stored
    const int32_t block = block_of(rows, r, pos, pool.block_size);
    const size_t at = pool_offset(block, layer, pos % pool.block_size, pool);
    for (int32_t j = threadIdx.x; j < kv_dim; j += blockDim.x) {
        pool.k[at + j] = from_f32<kBf16>(k[j]);
        pool.v[at + j] = from_f32<kBf16>(v[j]);
    }
}

// One block per (head, row). Shared memory: q (head_dim), then the scores
// of the row's visible positions (at most max_positions), then 32 floats of
// reduction scratch. The row sees positions [first, pos]: first > 0 only in
// a window (window > 0), whose positions before it are never read.
template <bool kBf16>
__global__ void paged_attention_kernel(const float* __restrict__ qkv, int32_t qkv_ld, RowsView rows, HeadShape heads,
                                       KvPoolView pool, int32_t layer, int32_t max_positions, float scale, int32_t window,
                                       uint16_t* __restrict__ out) {
    extern __shared__ float smem[];
    const int32_t hd = heads.head_dim;
    float* q = smem;                      // (head_dim) scaled query
    float* scores = q + hd;               // (max_positions) scores[j] of position first + j
    float* scratch = scores + max_positions;  // (32)
    const int32_t h = blockIdx.x, r = blockIdx.y;
    const int32_t pos = rows.row_pos[r];
    const int32_t first = window > 0 ? max(0, pos - window + 1) : 0;
    const int32_t n_pos = pos + 1 - first;
    const int32_t kv_head = h / (heads.n_heads / heads.n_kv_heads);
    const float* q_src = qkv + static_cast<size_t>(r) * qkv_ld + static_cast<size_t>(h) * hd;
    for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) q[d] = q_src[d] * scale;
    __syncthreads();

    // Scores: one thread per position, so every key's loads are in flight at
    // once (the step is latency-bound at decode sizes); 16-byte loads when
    // the head's rows are 16-byte aligned (head_dim and kv_dim multiples of 8).
    const bool vector_keys = hd % 8 == 0 && pool.kv_dim % 8 == 0;
    for (int32_t j = threadIdx.x; j < n_pos; j += blockDim.x) {
        const int32_t p = first + j;
        const int32_t block = block_of(rows, r, p, pool.block_size);
        const uint16_t* key = pool.k + pool_offset(block, layer, p % pool.block_size, pool) + static_cast<size_t>(kv_head) * hd;
        float dot = 0.0f;
        if (vector_keys) {
            const uint4* key8 = reinterpret_cast<const uint4*>(key);
#pragma unroll 4
            for (int32_t c8 = 0; c8 < hd / 8; ++c8) {
                const uint4 kv = __ldg(key8 + c8);
                const uint32_t kp[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 kf = pair_to_f32<kBf16>(kp[i]);
                    dot = fmaf(q[8 * c8 + 2 * i], kf.x, dot);
                    dot = fmaf(q[8 * c8 + 2 * i + 1], kf.y, dot);
                }
            }
        } else {
            for (int32_t d = 0; d < hd; ++d) dot = fmaf(q[d], to_f32<kBf16>(key[d]), dot);
        }
        scores[j] = dot;
    }
    __syncthreads();

    float local_max = -FLT_MAX;
    for (int32_t p = threadIdx.x; p < n_pos; p += blockDim.x) local_max = fmaxf(local_max, scores[p]);
    const float max_score = block_max(local_max, scratch);
    float local_sum = 0.0f;
    for (int32_t p = threadIdx.x; p < n_pos; p += blockDim.x) {
        const float e = __expf(scores[p] - max_score);
        scores[p] = e;
        local_sum += e;
    }
    const float inv_sum = 1.0f / block_sum(local_sum, scratch);  // block_sum's barriers publish scores[]

    // Weighted sum of values: thread d owns output dimension d.
    uint16_t* dst = out + static_cast<size_t>(r) * heads.n_heads * hd + static_cast<size_t>(h) * hd;
    for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
#pragma unroll 8
        for (int32_t j = 0; j < n_pos; ++j) {
            const int32_t p = first + j;
            const int32_t block = block_of(rows, r, p, pool.block_size);
            const uint16_t* value = pool.v + pool_offset(block, layer, p % pool.block_size, pool) + static_cast<size_t>(kv_head) * hd;
            acc += scores[j] * to_f32<kBf16>(value[d]);
        }
        dst[d] = from_f32<kBf16>(acc * inv_sum);
    }
}

// act(gate) for the gated FFN: SiLU, or GELU's tanh approximation in the
// CPU engine's expression and order (engine/forward.cpp gelu_tanh_mul:
// 0.5 g (1 + tanh((sqrt(2/pi) g) (1 + (0.044715 g) g)))). Rounded step by
// step (no FMA contraction), so that the fused gate | up kernel and
// gated_kernel give the same bits wherever the compiler inlines it.
template <bool kGelu>
__device__ __forceinline__ float gate_activation(float g) {
    if constexpr (kGelu) {
        constexpr float kSqrt2OverPi = 0.7978845608f;
        const float cubic = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, g), g));
        const float inner = __fmul_rn(__fmul_rn(kSqrt2OverPi, g), cubic);
        return __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
    } else {
        return g / (1.0f + expf(-g));
    }
}

template <bool kBf16, bool kGelu>
__global__ void gated_kernel(const float* __restrict__ gate_up, int32_t n_rows, int32_t ffn, uint16_t* __restrict__ out) {
    const size_t n = static_cast<size_t>(n_rows) * ffn;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t r = i / ffn, j = i % ffn;
        const float g = gate_up[r * 2 * ffn + j], u = gate_up[r * 2 * ffn + ffn + j];
        out[i] = from_f32<kBf16>(gate_activation<kGelu>(g) * u);
    }
}

__global__ void softcap_kernel(float* __restrict__ x, size_t n, float cap) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        x[i] = cap * tanhf(x[i] / cap);
    }
}

__global__ void argmax_kernel(const float* __restrict__ logits, int32_t n_vocab, int32_t* __restrict__ out) {
    __shared__ float scratch_v[kWarp];
    __shared__ int32_t scratch_i[kWarp];
    const float* row = logits + static_cast<size_t>(blockIdx.x) * n_vocab;
    float best = -INFINITY;  // below every logit, masked (-inf) ones included, so a row always yields an id
    int32_t best_id = INT32_MAX;
    for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        if (beats(row[i], i, best, best_id)) {
            best = row[i];
            best_id = i;
        }
    }
    block_best(best, best_id, scratch_v, scratch_i);
    if (threadIdx.x == 0) out[blockIdx.x] = best_id;
}

__global__ void softmax_kernel(float* __restrict__ rows, int32_t n_vocab, float inv_temperature) {
    __shared__ float scratch[kRowThreads / kWarp];
    float* row = rows + static_cast<size_t>(blockIdx.x) * n_vocab;
    float local_max = -FLT_MAX;
    for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) local_max = fmaxf(local_max, row[i] * inv_temperature);
    const float max_v = block_max(local_max, scratch);
    float local_sum = 0.0f;
    for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
        const float e = expf(row[i] * inv_temperature - max_v);
        row[i] = e;
        local_sum += e;
    }
    const float inv_sum = 1.0f / block_sum(local_sum, scratch);
    for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) row[i] *= inv_sum;
}

// k rounds of a block-wide argmax, each over the entries that rank below
// the previous round's winner in (value desc, id asc) order: O(k * n_vocab / threads).
__global__ void top_k_kernel(const float* __restrict__ rows, int32_t n_vocab, int32_t k, int32_t* __restrict__ ids,
                             float* __restrict__ values) {
    __shared__ float scratch_v[kWarp];
    __shared__ int32_t scratch_i[kWarp];
    const float* row = rows + static_cast<size_t>(blockIdx.x) * n_vocab;
    float prev_v = INFINITY;
    int32_t prev_i = -1;
    for (int32_t round = 0; round < k; ++round) {
        float best = -INFINITY;
        int32_t best_id = INT32_MAX;
        for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) {
            const float v = row[i];
            if (beats(prev_v, prev_i, v, i) && beats(v, i, best, best_id)) {
                best = v;
                best_id = i;
            }
        }
        block_best(best, best_id, scratch_v, scratch_i);
        if (threadIdx.x == 0) {
            ids[static_cast<size_t>(blockIdx.x) * k + round] = best_id;
            values[static_cast<size_t>(blockIdx.x) * k + round] = best;
        }
        prev_v = best;
        prev_i = best_id;
    }
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    // splitmix64's finaliser: a well-spread hash of the index.
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

template <bool kBf16>
__global__ void fill_random_kernel(uint16_t* __restrict__ dst, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float unit = static_cast<float>(mix64(seed ^ (i * 0x2545f4914f6cdd1dull)) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        dst[i] = from_f32<kBf16>((2.0f * unit - 1.0f) * scale);
    }
}

// ---- small-batch products: c (m, n_out) f32 (+)= a (m, k) · w (n_out, k)^T,
// m <= kGemvMaxRows, on the tensor cores (mma.sync m16n8k16, 16-bit in, f32
// accumulate). At decode and verification sizes a step is bound by reading
// the weights once, and cuBLAS's tiles (made for large m) left bandwidth
// unused. A block owns one 16-row tile of w and splits k over its warps in
// 32-element chunks (warp v takes chunks v, v + warps, ...); each chunk is
// two k16 steps. Lane (g = lane/4, t = lane%4) loads 8 contiguous elements
// (one 16-byte load) of weight rows g and g+8 and of activation rows (tokens)
// g and g+8 at chunk offset 8t, and hands them to the fragments under one k
// permutation shared by A and B (a dot product does not care which k pairs
// meet in which step). A token's sums use only its own column (padding
// columns are zero) and the warps' partial sums meet in a fixed order, so a
// row gets the same bits alone or in a verification batch of up to 16.
// The warps per block depend on k alone (never on m): long rows (w_down)
// take 16, so that a block's chunks are in flight at once.
constexpr int kMmaRows = 16;         // weight rows per block (one m16 tile)
constexpr int kMmaUnroll = 4;        // 32-element chunks in flight per warp
constexpr int32_t kMmaLongK = 4096;  // rows longer than this get 16 warps per block, others 8

// What a block does with its sums.
constexpr int kStorePlain = 0;   // c (+)= the products
constexpr int kStoreSwiglu = 1;  // gate | up pairs -> silu(gate) * up, 16-bit
constexpr int kStoreRope = 2;    // q | k | v: RoPE on q and k, k and v into the paged pool (rope_store_kv_kernel's work)
constexpr int kStoreGeglu = 3;   // kStoreSwiglu with GELU (tanh) for SiLU

__host__ __device__ constexpr bool gated_store(int store) { return store == kStoreSwiglu || store == kStoreGeglu; }

// What kStoreRope needs: the rows' positions and blocks, the heads, the
// RoPE tables and the pool layer to store into.
struct RopeStore {
    RowsView rows;
    HeadShape heads;
    const float* rope_cos = nullptr;  // (n_ctx, rope_half) f32
    const float* rope_sin = nullptr;  // (n_ctx, rope_half) f32
    KvPoolView pool;
    int32_t layer = 0;
};

template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // never launched there: CudaForward::mma_supported keeps such devices on cuBLAS
#else
    if constexpr (kBf16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
}

// a (m_rows, k8) and w in 16-byte chunks; kTiles n8 tiles of tokens (m_rows <= 8 * kTiles).
// Plain: c (m_rows, n_out) f32 (+)= the products, block b owns rows 16b..16b+15.
// kStoreSwiglu / kStoreGeglu: w is gate | up (2*n_out rows); block b owns
// features f = 8b..8b+7 (tile rows 0-7 gate f.., rows 8-15 up f..) and
// writes half_out (m_rows, n_out) 16-bit = act(gate) * up.
// kStoreRope: w is wq | wk | wv (n_out = q_dim + 2*kv_dim rows), beta 0; c
// gets q and k rotated (pairs 2i, 2i+1 of a head, i < rope_half, both in the
// block) and v, and k and v go to the pool at each row's position, as
// rope_store_kv_kernel does from the plain product.
template <bool kBf16, int kTiles, int kStore, int kMmaWarps>
__global__ void __launch_bounds__(kMmaWarps * kWarp)
    gemv_mma_kernel(const uint4* __restrict__ a, const uint4* __restrict__ w, float* __restrict__ c, uint16_t* __restrict__ half_out,
                    RopeStore rope, int32_t m_rows, int32_t n_out, int32_t k8, float beta) {
    constexpr bool kSwiglu = gated_store(kStore);  // gate | up pairs, either activation
    constexpr int kTokens = 8 * kTiles;
    __shared__ float partial[kMmaWarps][kMmaRows][kTokens];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int g = lane / 4, t = lane % 4;
    const int32_t first = static_cast<int32_t>(blockIdx.x) * (kSwiglu ? kMmaRows / 2 : kMmaRows);
    // Past the end: read the last row again (in bounds) and store nothing for it.
    const auto weight_row = [&](int r) {
        return kSwiglu ? (r / 8) * n_out + min(first + r % 8, n_out - 1) : min(first + r, n_out - 1);
    };
    const uint4* w_lo = w + static_cast<size_t>(weight_row(g)) * k8 + t;
    const uint4* w_hi = w + static_cast<size_t>(weight_row(g + 8)) * k8 + t;
    const uint4* a_tok[kTiles];
    bool has_tok[kTiles];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
        const int token = 8 * i + g;
        has_tok[i] = token < m_rows;
        a_tok[i] = a + static_cast<size_t>(has_tok[i] ? token : 0) * k8 + t;
    }
    float acc[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const int32_t n_chunks = k8 / 4;  // 32-element chunks
    for (int32_t base = warp; base < n_chunks; base += kMmaWarps * kMmaUnroll) {
        uint4 lo[kMmaUnroll], hi[kMmaUnroll], act[kMmaUnroll][kTiles];
#pragma unroll
        for (int u = 0; u < kMmaUnroll; ++u) {
            const int32_t chunk = base + u * kMmaWarps;
            const bool in = chunk < n_chunks;
            lo[u] = in ? __ldg(w_lo + 4 * chunk) : make_uint4(0, 0, 0, 0);
            hi[u] = in ? __ldg(w_hi + 4 * chunk) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < kTiles; ++i) act[u][i] = in && has_tok[i] ? __ldg(a_tok[i] + 4 * chunk) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kMmaUnroll; ++u) {
            // k16 step 0: pairs 0, 1 of each load; step 1: pairs 2, 3.
            const uint32_t a0[4] = {lo[u].x, hi[u].x, lo[u].y, hi[u].y};
            const uint32_t a1[4] = {lo[u].z, hi[u].z, lo[u].w, hi[u].w};
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                mma_16816<kBf16>(acc[i], a0, act[u][i].x, act[u][i].y);
                mma_16816<kBf16>(acc[i], a1, act[u][i].z, act[u][i].w);
            }
        }
    }
    // acc[i] = C rows (g, g, g+8, g+8), tokens (8i + 2t, 8i + 2t + 1, 8i + 2t, 8i + 2t + 1).
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
        partial[warp][g][8 * i + 2 * t] = acc[i][0];
        partial[warp][g][8 * i + 2 * t + 1] = acc[i][1];
        partial[warp][g + 8][8 * i + 2 * t] = acc[i][2];
        partial[warp][g + 8][8 * i + 2 * t + 1] = acc[i][3];
    }
    __syncthreads();
    const auto total = [&](int r, int token) {
        float sum = 0.0f;
#pragma unroll
        for (int v = 0; v < kMmaWarps; ++v) sum += partial[v][r][token];
        return sum;
    };
    if constexpr (kSwiglu) {
        for (int e = threadIdx.x; e < 8 * m_rows; e += blockDim.x) {
            const int r = e % 8, token = e / 8;
            if (first + r >= n_out) continue;
            const float gate = total(r, token), up = total(r + 8, token);
            half_out[static_cast<size_t>(token) * n_out + first + r] =
                from_f32<kBf16>(gate_activation<kStore == kStoreGeglu>(gate) * up);
        }
    } else if constexpr (kStore == kStoreRope) {
        const int32_t hd = rope.heads.head_dim, half = rope.heads.rope_half;
        const int32_t q_dim = rope.heads.n_heads * hd, kv_dim = rope.heads.n_kv_heads * hd;
        for (int e = threadIdx.x; e < kMmaRows / 2 * m_rows; e += blockDim.x) {
            const int pair = e % (kMmaRows / 2), token = e / (kMmaRows / 2);
            const int32_t o = first + 2 * pair;  // even: q, k and v sections and heads have even sizes
            if (o >= n_out) continue;
            float x0 = total(2 * pair, token), x1 = total(2 * pair + 1, token);
            const int32_t pos = rope.rows.row_pos[token];
            const bool is_v = o >= q_dim + kv_dim;
            if (!is_v) {
                const int32_t i = ((o < q_dim ? o : o - q_dim) % hd) / 2;
                if (i < half) {
                    const float cs = rope.rope_cos[static_cast<size_t>(pos) * half + i];
                    const float sn = rope.rope_sin[static_cast<size_t>(pos) * half + i];
                    const float r0 = x0 * cs - x1 * sn;
                    const float r1 = x0 * sn + x1 * cs;
                    x0 = r0;
                    x1 = r1;
                }
            }
            float* out = c + static_cast<size_t>(token) * n_out + o;
            out[0] = x0;
            out[1] = x1;
            if (o >= q_dim) {
                const int32_t block = block_of(rope.rows, token, pos, rope.pool.block_size);
                const size_t at = pool_offset(block, rope.layer, pos % rope.pool.block_size, rope.pool);
                uint16_t* dst = is_v ? rope.pool.v + at + (o - q_dim - kv_dim) : rope.pool.k + at + (o - q_dim);
                dst[0] = from_f32<kBf16>(x0);
                dst[1] = from_f32<kBf16>(x1);
            }
        }
    } else {
        for (int e = threadIdx.x; e < kMmaRows * m_rows; e += blockDim.x) {
            const int r = e % kMmaRows, token = e / kMmaRows;
            if (first + r >= n_out) continue;
            const float sum = total(r, token);
            float* out = c + static_cast<size_t>(token) * n_out + first + r;
            *out = beta == 0.0f ? sum : sum + beta * *out;  // beta 0 never reads c (it may hold anything)
        }
    }
}

template <bool kBf16, int kStore, int kWarps>
void launch_gemv_mma_warps(const uint4* a8, const uint4* w8, float* c, uint16_t* half_out, const RopeStore& rope, int32_t m_rows,
                           int32_t n_out, int32_t k, float beta, cudaStream_t stream) {
    const int32_t per_block = gated_store(kStore) ? kMmaRows / 2 : kMmaRows;
    const unsigned blocks = static_cast<unsigned>((n_out + per_block - 1) / per_block);
    if (m_rows <= 8) {
        gemv_mma_kernel<kBf16, 1, kStore, kWarps><<<blocks, kWarps * kWarp, 0, stream>>>(a8, w8, c, half_out, rope, m_rows, n_out, k / 8, beta);
    } else {
        gemv_mma_kernel<kBf16, 2, kStore, kWarps><<<blocks, kWarps * kWarp, 0, stream>>>(a8, w8, c, half_out, rope, m_rows, n_out, k / 8, beta);
    }
}

template <bool kBf16, int kStore>
void launch_gemv_mma(const uint16_t* a, const uint16_t* w, float* c, uint16_t* half_out, const RopeStore& rope, int32_t m_rows,
                     int32_t n_out, int32_t k, float beta, cudaStream_t stream) {
    const auto* a8 = reinterpret_cast<const uint4*>(a);
    const auto* w8 = reinterpret_cast<const uint4*>(w);
    if (k > kMmaLongK) {
        launch_gemv_mma_warps<kBf16, kStore, 16>(a8, w8, c, half_out, rope, m_rows, n_out, k, beta, stream);
    } else {
        launch_gemv_mma_warps<kBf16, kStore, 8>(a8, w8, c, half_out, rope, m_rows, n_out, k, beta, stream);
    }
}

__global__ void fill_float_kernel(float* __restrict__ dst, size_t n, float value) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        dst[i] = value;
    }
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU,
// never more than the elements need.
unsigned stride_blocks(size_t n) {
    const size_t wanted = (n + kRowThreads - 1) / kRowThreads;
    return static_cast<unsigned>(wanted < 4096 ? (wanted > 0 ? wanted : 1) : 4096);
}

}  // namespace

void launch_embed_gather(const uint16_t* table, HalfType table_type, const int32_t* tokens, int32_t n_rows, int32_t dim,
                         float scale, float* x, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (table_type == HalfType::BF16) {
        embed_gather_kernel<true><<<n_rows, kRowThreads, 0, stream>>>(table, tokens, dim, scale, x);
    } else {
        embed_gather_kernel<false><<<n_rows, kRowThreads, 0, stream>>>(table, tokens, dim, scale, x);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_embed_gather(const uint16_t* table, HalfType table_type, const int32_t* tokens, int32_t n_rows, int32_t dim,
                         float* x, cudaStream_t stream) {
    launch_embed_gather(table, table_type, tokens, n_rows, dim, 1.0f, x, stream);
}

void launch_add_rms_norm(const float* proj, const float* weight, int32_t n_rows, int32_t dim, float eps, float* x,
                         cudaStream_t stream) {
    if (n_rows <= 0) return;
    add_rms_norm_kernel<<<n_rows, kRowThreads, 0, stream>>>(proj, weight, dim, eps, x);
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm_to_half(const float* x, const float* weight, const int32_t* rows, int32_t n_rows, int32_t dim, float eps,
                             HalfType out_type, uint16_t* out, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (out_type == HalfType::BF16) {
        rms_norm_kernel<true><<<n_rows, kRowThreads, 0, stream>>>(x, weight, rows, dim, eps, out);
    } else {
        rms_norm_kernel<false><<<n_rows, kRowThreads, 0, stream>>>(x, weight, rows, dim, eps, out);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_rope_store_kv(float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads, const float* rope_cos,
                          const float* rope_sin, const KvPoolView& pool, int32_t layer, const QkvExtras& extras,
                          cudaStream_t stream) {
    if (rows.n_rows <= 0) return;
    if (2 * heads.rope_half > heads.head_dim || (extras.q_norm == nullptr) != (extras.k_norm == nullptr)) {
        throw Error("rope_store_kv: " + std::to_string(2 * heads.rope_half) + " rotated of a head of " + std::to_string(heads.head_dim) +
                    ", or a Q norm without a K norm");
    }
    if (pool.type == HalfType::BF16) {
        rope_store_kv_kernel<true><<<rows.n_rows, kRowThreads, 0, stream>>>(qkv, qkv_ld, rows, heads, rope_cos, rope_sin, pool, layer, extras);
    } else {
        rope_store_kv_kernel<false><<<rows.n_rows, kRowThreads, 0, stream>>>(qkv, qkv_ld, rows, heads, rope_cos, rope_sin, pool, layer, extras);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_rope_store_kv(float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads, const float* rope_cos,
                          const float* rope_sin, const KvPoolView& pool, int32_t layer, cudaStream_t stream) {
    launch_rope_store_kv(qkv, qkv_ld, rows, heads, rope_cos, rope_sin, pool, layer, QkvExtras{}, stream);
}

void launch_paged_attention(const float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads,
                            const KvPoolView& pool, int32_t layer, int32_t max_positions, float scale, int32_t window,
                            HalfType out_type, uint16_t* out, cudaStream_t stream) {
    if (rows.n_rows <= 0) return;
    if (out_type != pool.type) throw Error("paged attention: the output type must be the KV pool's");
    if (heads.n_kv_heads <= 0 || heads.n_heads % heads.n_kv_heads != 0) {
        throw Error("paged attention: " + std::to_string(heads.n_heads) + " heads are not a multiple of " +
                    std::to_string(heads.n_kv_heads) + " kv heads");
    }
    const size_t smem = (static_cast<size_t>(heads.head_dim) + static_cast<size_t>(max_positions) + kWarp) * sizeof(float);
    const dim3 grid(static_cast<unsigned>(heads.n_heads), static_cast<unsigned>(rows.n_rows));
    // Beyond the default 48 KiB of dynamic shared memory a kernel must opt in.
    constexpr size_t kDefaultSmem = 48 * 1024;
    if (pool.type == HalfType::BF16) {
        if (smem > kDefaultSmem) {
            SPECD_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(smem)));
        }
        paged_attention_kernel<true>
            <<<grid, kAttentionThreads, smem, stream>>>(qkv, qkv_ld, rows, heads, pool, layer, max_positions, scale, window, out);
    } else {
        if (smem > kDefaultSmem) {
            SPECD_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(smem)));
        }
        paged_attention_kernel<false>
            <<<grid, kAttentionThreads, smem, stream>>>(qkv, qkv_ld, rows, heads, pool, layer, max_positions, scale, window, out);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_paged_attention(const float* qkv, int32_t qkv_ld, const RowsView& rows, const HeadShape& heads,
                            const KvPoolView& pool, int32_t layer, int32_t max_positions, HalfType out_type, uint16_t* out,
                            cudaStream_t stream) {
    launch_paged_attention(qkv, qkv_ld, rows, heads, pool, layer, max_positions, 1.0f / std::sqrt(static_cast<float>(heads.head_dim)),
                           0, out_type, out, stream);
}

void launch_gated_to_half(const float* gate_up, int32_t n_rows, int32_t ffn, GateActivation act, HalfType out_type,
                          uint16_t* out, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(n_rows) * static_cast<size_t>(ffn);
    if (n == 0) return;
    const bool gelu = act == GateActivation::GeluTanh;
    if (out_type == HalfType::BF16) {
        if (gelu) {
            gated_kernel<true, true><<<stride_blocks(n), kRowThreads, 0, stream>>>(gate_up, n_rows, ffn, out);
        } else {
            gated_kernel<true, false><<<stride_blocks(n), kRowThreads, 0, stream>>>(gate_up, n_rows, ffn, out);
        }
    } else {
        if (gelu) {
            gated_kernel<false, true><<<stride_blocks(n), kRowThreads, 0, stream>>>(gate_up, n_rows, ffn, out);
        } else {
            gated_kernel<false, false><<<stride_blocks(n), kRowThreads, 0, stream>>>(gate_up, n_rows, ffn, out);
        }
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_swiglu_to_half(const float* gate_up, int32_t n_rows, int32_t ffn, HalfType out_type, uint16_t* out,
                           cudaStream_t stream) {
    launch_gated_to_half(gate_up, n_rows, ffn, GateActivation::Silu, out_type, out, stream);
}

void launch_softcap(float* x, size_t n, float cap, cudaStream_t stream) {
    if (n == 0) return;
    if (!(cap > 0.0f)) throw Error("softcap: the cap must be positive");
    softcap_kernel<<<stride_blocks(n), kRowThreads, 0, stream>>>(x, n, cap);
    SPECD_CUDA_CHECK_LAUNCH();
}

bool gemv_fits(const uint16_t* a, const uint16_t* w, int32_t m_rows, int32_t k) {
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return m_rows >= 1 && m_rows <= kGemvMaxRows && k > 0 && k % 32 == 0 && aligned(a) && aligned(w);
}

namespace {

void require_gemv_fits(const char* what, const uint16_t* a, const uint16_t* w, int32_t m_rows, int32_t k) {
    if (!gemv_fits(a, w, m_rows, k)) {
        throw Error(std::string(what) + ": " + std::to_string(m_rows) + " rows of " + std::to_string(k) +
                    " elements do not fit the small-batch kernel (1.." + std::to_string(kGemvMaxRows) +
                    " rows, k a multiple of 32, 16-byte aligned)");
    }
}

}  // namespace

void launch_gemv(const uint16_t* a, const uint16_t* w, HalfType type, float* c, int32_t m_rows, int32_t n_out, int32_t k,
                 float beta, cudaStream_t stream) {
    if (n_out <= 0) return;
    require_gemv_fits("gemv", a, w, m_rows, k);
    if (type == HalfType::BF16) {
        launch_gemv_mma<true, kStorePlain>(a, w, c, nullptr, RopeStore{}, m_rows, n_out, k, beta, stream);
    } else {
        launch_gemv_mma<false, kStorePlain>(a, w, c, nullptr, RopeStore{}, m_rows, n_out, k, beta, stream);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_gemv_gated(const uint16_t* a, const uint16_t* w_gate_up, HalfType type, GateActivation act, int32_t m_rows,
                       int32_t ffn, int32_t k, uint16_t* out, cudaStream_t stream) {
    if (ffn <= 0) return;
    require_gemv_fits("gemv_gated", a, w_gate_up, m_rows, k);
    const bool gelu = act == GateActivation::GeluTanh;
    if (type == HalfType::BF16) {
        if (gelu) {
            launch_gemv_mma<true, kStoreGeglu>(a, w_gate_up, nullptr, out, RopeStore{}, m_rows, ffn, k, 0.0f, stream);
        } else {
            launch_gemv_mma<true, kStoreSwiglu>(a, w_gate_up, nullptr, out, RopeStore{}, m_rows, ffn, k, 0.0f, stream);
        }
    } else {
        if (gelu) {
            launch_gemv_mma<false, kStoreGeglu>(a, w_gate_up, nullptr, out, RopeStore{}, m_rows, ffn, k, 0.0f, stream);
        } else {
            launch_gemv_mma<false, kStoreSwiglu>(a, w_gate_up, nullptr, out, RopeStore{}, m_rows, ffn, k, 0.0f, stream);
        }
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_gemv_swiglu(const uint16_t* a, const uint16_t* w_gate_up, HalfType type, int32_t m_rows, int32_t ffn, int32_t k,
                        uint16_t* out, cudaStream_t stream) {
    launch_gemv_gated(a, w_gate_up, type, GateActivation::Silu, m_rows, ffn, k, out, stream);
}

void launch_gemv_qkv_rope(const uint16_t* a, const uint16_t* wqkv, float* qkv, int32_t qkv_ld, int32_t k, const RowsView& rows,
                          const HeadShape& heads, const float* rope_cos, const float* rope_sin, const KvPoolView& pool,
                          int32_t layer, cudaStream_t stream) {
    if (rows.n_rows <= 0) return;
    require_gemv_fits("gemv_qkv_rope", a, wqkv, rows.n_rows, k);
    if (heads.neox) throw Error("gemv_qkv_rope: NEOX pairs span blocks; use gemv then rope_store_kv");
    if (heads.head_dim % 2 != 0 || qkv_ld != (heads.n_heads + 2 * heads.n_kv_heads) * heads.head_dim ||
        pool.kv_dim != heads.n_kv_heads * heads.head_dim) {
        throw Error("gemv_qkv_rope: qkv rows of " + std::to_string(qkv_ld) + " do not match " + std::to_string(heads.n_heads) +
                    " + 2 x " + std::to_string(heads.n_kv_heads) + " heads of " + std::to_string(heads.head_dim));
    }
    const RopeStore rope{rows, heads, rope_cos, rope_sin, pool, layer};
    if (pool.type == HalfType::BF16) {
        launch_gemv_mma<true, kStoreRope>(a, wqkv, qkv, nullptr, rope, rows.n_rows, qkv_ld, k, 0.0f, stream);
    } else {
        launch_gemv_mma<false, kStoreRope>(a, wqkv, qkv, nullptr, rope, rows.n_rows, qkv_ld, k, 0.0f, stream);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_argmax_rows(const float* logits, int32_t n_rows, int32_t n_vocab, int32_t* out, cudaStream_t stream) {
    if (n_rows <= 0) return;
    argmax_kernel<<<n_rows, kRowThreads, 0, stream>>>(logits, n_vocab, out);
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_softmax_rows(float* rows, int32_t n_rows, int32_t n_vocab, float temperature, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (!(temperature > 0.0f)) throw Error("softmax: temperature must be positive");
    softmax_kernel<<<n_rows, kRowThreads, 0, stream>>>(rows, n_vocab, 1.0f / temperature);
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_top_k_rows(const float* rows, int32_t n_rows, int32_t n_vocab, int32_t k, int32_t* ids, float* values,
                       cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (k < 1 || k > n_vocab) throw Error("top-k: k = " + std::to_string(k) + " outside 1.." + std::to_string(n_vocab));
    top_k_kernel<<<n_rows, kRowThreads, 0, stream>>>(rows, n_vocab, k, ids, values);
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_fill_random_half(uint16_t* dst, size_t n, uint64_t seed, float scale, HalfType type, cudaStream_t stream) {
    if (n == 0) return;
    if (type == HalfType::BF16) {
        fill_random_kernel<true><<<stride_blocks(n), kRowThreads, 0, stream>>>(dst, n, seed, scale);
    } else {
        fill_random_kernel<false><<<stride_blocks(n), kRowThreads, 0, stream>>>(dst, n, seed, scale);
    }
    SPECD_CUDA_CHECK_LAUNCH();
}

void launch_fill_float(float* dst, size_t n, float value, cudaStream_t stream) {
    if (n == 0) return;
    fill_float_kernel<<<stride_blocks(n), kRowThreads, 0, stream>>>(dst, n, value);
    SPECD_CUDA_CHECK_LAUNCH();
}

}  // namespace specd::gpu
