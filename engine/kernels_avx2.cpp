// AVX2 + FMA + F16C kernels: the same matmul shapes as the AVX-512 file
// (see there), sized for 16 ymm registers and without masks or VNNI.
//
//  * float weights: dot tiles of 4 weight rows x up to 2 activation rows;
//    K tails go through a zero-padded copy of the weights.
//  * q8_0/q4_0: 8 weight rows of a block are transposed (lane i = row i) into
//    an L1 buffer for a chunk of blocks, then every activation row runs over
//    the buffer. Without VNNI the int8 products are vpmaddubsw (unsigned x
//    signed, 16-bit sums) + vpmaddwd: q4_0 nibbles 0..15 x activations can sum
//    all 8 groups in 16 bits (8 * 2 * 15 * 127 < 2^15) and subtract 8*sum(x)
//    via the prepared correction; q8_0 uses ggml's sign trick
//    (|w| x sign(x, w)) so no 16-bit sum saturates.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels_internal.h"
#include "engine/quant_k.h"

namespace specd::kern {

namespace {

template <TensorType T>
inline __m256 load_w8(const unsigned char* row, int64_t k) {
    if constexpr (T == TensorType::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else if constexpr (T == TensorType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
    } else {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
}

template <TensorType T>
inline float load_w1(const unsigned char* row, int64_t k) {
    if constexpr (T == TensorType::F32) {
        float v;
        std::memcpy(&v, row + 4 * k, 4);
        return v;
    } else {
        uint16_t h;
        std::memcpy(&h, row + 2 * k, 2);
        return T == TensorType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
}

inline float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// [sum(a0), sum(a1), sum(a2), sum(a3)].
inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t01 = _mm256_hadd_ps(a0, a1), t23 = _mm256_hadd_ps(a2, a3);
    const __m256 u = _mm256_hadd_ps(t01, t23);  // per 128-bit lane: parts of a0..a3
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

inline void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

inline int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// ------------------------------------------------- float weights, dot tiles ---

// y[t0 + j][n + i] for i < MR, j < NR; w: weight row n.
template <TensorType T, int MR, int NR>
void dot_tile(const unsigned char* w, size_t rb, int64_t K, const PreparedInput& x, int t0, float* y, int64_t ldy) {
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t rows = x.rows();
    const float* xc = x.f32_chunk(0, t0);  // chunk c of row t0 + j at xc + (c*rows + j)*16
    auto step = [&](auto load, const float* xk) {
        for (int h = 0; h < 2; ++h) {
            __m256 wv[MR];
            for (int i = 0; i < MR; ++i) wv[i] = load(i, h);
            for (int j = 0; j < NR; ++j) {
                const __m256 xv = _mm256_load_ps(xk + j * 16 + 8 * h);
                for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
            }
        }
    };
    // The next tile's rows, one tile ahead, into L1 (a DRAM stream at rows =
    // 1), and the bytes kFarPrefetchBytes ahead into L2 (kernels_internal.h).
    const unsigned char* next = w + MR * rb;
    constexpr int64_t es = T == TensorType::F32 ? 4 : 2;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16, xc += rows * 16) {
        for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * rb + k * es), _MM_HINT_T0);
        for (int i = 0; i < MR; ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(w + kFarPrefetchBytes + (k * MR + i * 16) * es), _MM_HINT_T1);
        }
        step([&](int i, int h) { return load_w8<T>(w + i * rb, k + 8 * h); }, xc);
    }
    if (k < K) {
        // Weight tail through a zero-padded copy (x is zero past K already).
        alignas(32) float tail[MR][16] = {};
        for (int i = 0; i < MR; ++i)
            for (int64_t kk = k; kk < K; ++kk) tail[i][kk - k] = load_w1<T>(w + i * rb, kk);
        step([&](int i, int h) { return _mm256_load_ps(&tail[i][8 * h]); }, xc);
    }
    for (int j = 0; j < NR; ++j) {
        float* out = y + (t0 + j) * ldy;
        if constexpr (MR == 4) {
            _mm_storeu_ps(out, reduce4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
        } else {
            for (int i = 0; i < MR; ++i) out[i] = hsum8(acc[i][j]);
        }
    }
}

template <TensorType T>
void matmul_float_dot(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
    const int64_t K = x.k();
    const int rows = x.rows();
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        int t0 = 0;
        for (; t0 + 2 <= rows; t0 += 2) dot_tile<T, 4, 2>(W + n * rb, rb, K, x, t0, y + n, ldy);
        if (t0 < rows) dot_tile<T, 4, 1>(W + n * rb, rb, K, x, t0, y + n, ldy);
    }
    for (; n < n1; ++n) {
        int t0 = 0;
        for (; t0 + 2 <= rows; t0 += 2) dot_tile<T, 1, 2>(W + n * rb, rb, K, x, t0, y + n, ldy);
        if (t0 < rows) dot_tile<T, 1, 1>(W + n * rb, rb, K, x, t0, y + n, ldy);
    }
}

// ------------------------------------------------------ quantised weights ---

// One block of 8 weight rows, transposed: g[j] lane i = bytes 4j..4j+3 of
// row i's 32 values (q4_0: nibbles 0..15; q8_0: |w|), sgn (q8_0 only) =
// the signed bytes whose signs sign(x, w) applies, s lane i = row i's scale.
struct QTile8 {
    __m256i g[8];
    __m256i sgn[8];
    __m256 s;
};

template <TensorType T>
void load_qtile8(const unsigned char* W, size_t rb, int64_t n, int nv, int64_t b, QTile8& t) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const unsigned char* row[8];  // block b of row n + i (rows past nv repeat the last one)
    for (int i = 0; i < 8; ++i) row[i] = W + (n + std::min(i, nv - 1)) * rb + static_cast<size_t>(b) * bb;
    alignas(16) uint16_t d[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&d[i], row[i], 2);
    t.s = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
    if constexpr (T == TensorType::Q8_0) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + 2)));
        transpose8(r);  // r[j] lane i = dword j of row i
        for (int j = 0; j < 8; ++j) {
            t.sgn[j] = _mm256_castps_si256(r[j]);
            t.g[j] = _mm256_sign_epi8(t.sgn[j], t.sgn[j]);  // |w| (-128 -> 128 as unsigned)
        }
    } else {
        // Z[m] = rows m | 4+m (16 bytes each); a 4x4 dword transpose per 128-bit lane
        // leaves lane 4L + m = row 4L + m.
        __m256i z[4];
        for (int m = 0; m < 4; ++m) {
            const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[m] + 2));
            const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[4 + m] + 2));
            z[m] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
        }
        const __m256i a0 = _mm256_unpacklo_epi32(z[0], z[1]), a1 = _mm256_unpackhi_epi32(z[0], z[1]);
        const __m256i a2 = _mm256_unpacklo_epi32(z[2], z[3]), a3 = _mm256_unpackhi_epi32(z[2], z[3]);
        const __m256i q[4] = {_mm256_unpacklo_epi64(a0, a2), _mm256_unpackhi_epi64(a0, a2),
                              _mm256_unpacklo_epi64(a1, a3), _mm256_unpackhi_epi64(a1, a3)};
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int g = 0; g < 4; ++g) {
            t.g[g] = _mm256_and_si256(q[g], low4);
            t.g[g + 4] = _mm256_and_si256(_mm256_srli_epi16(q[g], 4), low4);
        }
    }
}

// Block b of a packed tile of 8 rows (kernels.h pack_weights; nb blocks per
// row): the tile load_qtile8 makes, without the gathers and the transpose.
template <TensorType T>
inline void load_packed_qtile8(const unsigned char* tile, int64_t nb, int64_t b, QTile8& t) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const PackedBlockOffsets at = packed_block_offsets(b, nb, 8, bb, 2);
    const unsigned char* c = tile + at.chunks;
    t.s = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + at.fp16)));
    if constexpr (T == TensorType::Q8_0) {
        for (int j = 0; j < 8; ++j) {
            t.sgn[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * j));
            t.g[j] = _mm256_sign_epi8(t.sgn[j], t.sgn[j]);  // |w| (-128 -> 128 as unsigned)
        }
    } else {
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        for (int g = 0; g < 4; ++g) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * g));
            t.g[g] = _mm256_and_si256(q, low4);
            t.g[g + 4] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
    }
}

template <TensorType T>
inline __m256 q_block_row(const QTile8& t, const PreparedInput& x, int64_t b, int r) {
    const int8_t* q = x.q8_block(b, r);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum;
    if constexpr (T == TensorType::Q4_0) {
        __m256i s16 = _mm256_maddubs_epi16(t.g[0], _mm256_set1_epi32(load_i32(q)));
        for (int g = 1; g < 8; ++g) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(t.g[g], _mm256_set1_epi32(load_i32(q + 4 * g))));
        isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(x.q8_corr(b, r)));
    } else {
        __m256i a = _mm256_setzero_si256(), c = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            const __m256i x0 = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(q + 4 * g)), t.sgn[g]);
            const __m256i x1 = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(q + 4 * g + 4)), t.sgn[g + 1]);
            a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(t.g[g], x0), ones));
            c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(t.g[g + 1], x1), ones));
        }
        isum = _mm256_add_epi32(a, c);
    }
    return _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(t.s, _mm256_set1_ps(x.q8_scale(b, r))));
}

constexpr int kQChunk = 32;  // blocks per transposed chunk (32 * 544 bytes = 17 KiB)

// Packed: the weights are in kernels.h's packed layout (n0, n1 multiples of 8).
template <TensorType T, bool Packed = false>
void matmul_quant(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                  int64_t n1) {
    QTile8 tiles[kQChunk];  // transposed blocks b0 .. b0 + nbc of weight rows n .. n + 8
    const int64_t nb = x.n_blocks();
    const int rows = x.rows();
    const unsigned char* w_end = W + n1 * rb;
    for (int64_t n = n0; n < n1; n += 8) {
        const int nv = static_cast<int>(std::min<int64_t>(8, n1 - n));
        {
            // These 8 rows, shifted kQPrefetchBytes ahead, into L2 as one
            // linear range (kernels_internal.h).
            const unsigned char* pf = W + n * rb + kQPrefetchBytes;
            const unsigned char* pf_end = std::min(pf + 8 * rb, w_end);
            for (; pf < pf_end; pf += 64) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
        }
        for (int64_t b0 = 0; b0 < nb; b0 += kQChunk) {
            const int64_t nbc = std::min<int64_t>(kQChunk, nb - b0);
            for (int64_t b = 0; b < nbc; ++b) {
                if constexpr (Packed) load_packed_qtile8<T>(W + n * rb, nb, b0 + b, tiles[b]);
                else load_qtile8<T>(W, rb, n, nv, b0 + b, tiles[b]);
            }
            for (int r = 0; r < rows; ++r) {
                __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
                int64_t b = 0;
                for (; b + 2 <= nbc; b += 2) {
                    f0 = _mm256_add_ps(f0, q_block_row<T>(tiles[b], x, b0 + b, r));
                    f1 = _mm256_add_ps(f1, q_block_row<T>(tiles[b + 1], x, b0 + b + 1, r));
                }
                if (b < nbc) f0 = _mm256_add_ps(f0, q_block_row<T>(tiles[b], x, b0 + b, r));
                alignas(32) float out[8];
                _mm256_store_ps(out, _mm256_add_ps(f0, f1));
                float* o = y + r * ldy + n;
                if (nv == 8 && b0 == 0) {
                    _mm256_storeu_ps(o, _mm256_load_ps(out));
                } else {
                    for (int i = 0; i < nv; ++i) o[i] = b0 > 0 ? o[i] + out[i] : out[i];
                }
            }
        }
    }
}

// ------------------------------------------ Q4_K / Q5_K / Q6_K, q8 activations ---
// One weight row at a time, lanes along K: each 32-weight stretch of codes
// is multiplied with a row's int8 values by vpmaddubsw (unsigned codes times
// signed values; no pair exceeds 2*63*127, so nothing saturates) and
// vpmaddwd into 8 lane sums that share one or two scales.

// Q4_K's 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a super-block.
inline __m128i q4_k_scale_bytes(const uint8_t* s) {
    uint32_t w0, w1, w2;
    std::memcpy(&w0, s, 4);
    std::memcpy(&w1, s + 4, 4);
    std::memcpy(&w2, s + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo), static_cast<int>(m_hi));
}

// 8 int32 sums of 4 products each: codes (unsigned) times 32 int8 activations.
inline __m256i dot_u8_s8(__m256i codes, const int8_t* a) {
    const __m256i p = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// Q4_K or Q5_K (Block): for one weight row and every activation row t,
// sums[t * ld + 8 sb + j] = sum over block j of super-block sb of
// code * xq (unsigned codes 0..31, int8 activations): exact integers, so
// the tiles' float steps (kq_block_fma8) can follow in their order.
template <class Block>
inline __attribute__((always_inline)) void q4_k_row_sums(const Block* blocks, int64_t nsb, const PreparedInput& x,
                                                         int32_t* sums, int64_t ld) {
    const int rows = x.rows();
    const int64_t st = static_cast<int64_t>(rows) * 32;  // int8 between blocks b and b+1 of one row
    const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const Block& b = blocks[sb];
        for (size_t o = 0; o < sizeof(Block); o += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(&b) + kQPrefetchBytes + o, _MM_HINT_T1);
        }
        __m256i c[8];  // codes of group g (32 weights)
        for (int s = 0; s < 4; ++s) {
            const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * s));
            c[2 * s] = _mm256_and_si256(z, low4);
            c[2 * s + 1] = _mm256_and_si256(_mm256_srli_epi16(z, 4), low4);
        }
        if constexpr (std::is_same_v<Block, BlockQ5_K>) {
            // Fifth bits: group g's in bit g of qh[l].
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
            for (int g = 0; g < 8; ++g) {
                const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(g)), one);
                c[g] = _mm256_or_si256(c[g], _mm256_slli_epi16(bit, 4));
            }
        }
        for (int t = 0; t < rows; ++t) {
            const int8_t* a = x.q8_block(8 * sb, t);  // block 8sb + g at a + g*st
            __m256i v[8];  // v[g]: block g's 8 dword sums
            for (int g = 0; g < 8; ++g) v[g] = dot_u8_s8(c[g], a + g * st);
            // u0 halves: [v0..v3 summed over their low 4 dwords | over their high 4]; u1: v4..v7.
            const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
            const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + t * ld + 8 * sb),
                                _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31)));
        }
    }
}

// Q3_K's sixteen 6-bit scales minus 32, as int8.
inline __m128i q3_k_scales(const uint8_t* s) {
    uint32_t w0, w1, w2;
    std::memcpy(&w0, s, 4);
    std::memcpy(&w1, s + 4, 4);
    std::memcpy(&w2, s + 8, 4);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const __m128i u = _mm_setr_epi32(static_cast<int>((w0 & m4) | ((w2 & m2) << 4)),
                                     static_cast<int>((w1 & m4) | (((w2 >> 2) & m2) << 4)),
                                     static_cast<int>(((w0 >> 4) & m4) | (((w2 >> 4) & m2) << 4)),
                                     static_cast<int>(((w1 >> 4) & m4) | (((w2 >> 6) & m2) << 4)));
    return _mm_sub_epi8(u, _mm_set1_epi8(32));
}

// Q6_K, Q3_K or Q2_K (Block): for one weight row and every activation row
// t, sums[t * ld + 16 sb + g] = sum over group g (of 16 weights) of
// super-block sb of code * xq, the codes unsigned (Q6_K: q, 0..63; Q3_K:
// q + 4 * high bit, 0..7; Q2_K: q, 0..3): exact integers; the offsets
// (32, 4) and Q2_K's mins are applied by the float steps (kq_block_fma8).
template <class Block>
inline __attribute__((always_inline)) void q6_k_row_sums(const Block* blocks, int64_t nsb, const PreparedInput& x,
                                                         int32_t* sums, int64_t ld) {
    constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>, kQ2 = std::is_same_v<Block, BlockQ2_K>;
    const int rows = x.rows();
    const int64_t st = static_cast<int64_t>(rows) * 32;
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
    // u halves hold groups [0, 2, 4, 6 | 1, 3, 5, 7] (+ 8 for the second): to group order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const Block& b = blocks[sb];
        for (size_t o = 0; o < sizeof(Block); o += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(&b) + kQPrefetchBytes + o, _MM_HINT_T1);
        }
        __m256i c[8];  // codes of weights 32j .. 32j+31
        if constexpr (kQ2) {
            for (int h = 0; h < 2; ++h) {
                const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
                for (int j = 0; j < 4; ++j) c[4 * h + j] = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * j)), low2);
            }
        } else if constexpr (kQ3) {
            // Weights 32j + l of half h: bits 2j of qs[32h + l], bit 4h + j of hmask[l].
            const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
            const __m256i one = _mm256_set1_epi8(1);
            for (int h = 0; h < 2; ++h) {
                const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
                for (int j = 0; j < 4; ++j) {
                    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * j)), low2);
                    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + j)), one);
                    c[4 * h + j] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
                }
            }
        } else {
            for (int h = 0; h < 2; ++h) {
                const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
                auto high = [&](int shift) {
                    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), low2), 4);
                };
                c[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, low4), high(0));
                c[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), high(2));
                c[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), high(4));
                c[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), high(6));
            }
        }
        for (int t = 0; t < rows; ++t) {
            const int8_t* a = x.q8_block(8 * sb, t);  // block 8sb + j at a + j*st
            __m256i v[8];  // v[j]: dwords 0..3 = group 2j, 4..7 = group 2j + 1
            for (int j = 0; j < 8; ++j) v[j] = dot_u8_s8(c[j], a + j * st);
            for (int q = 0; q < 2; ++q) {  // groups 8q .. 8q+7
                const __m256i* w = v + 4 * q;
                const __m256i u = _mm256_hadd_epi32(_mm256_hadd_epi32(w[0], w[1]), _mm256_hadd_epi32(w[2], w[3]));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + t * ld + 16 * sb + 8 * q), _mm256_permutevar8x32_epi32(u, order));
            }
        }
    }
}

// ------------------------- K-quants, several activation rows: 8-row tiles ---
// As in the AVX-512 file: one super-block of 8 weight rows is decoded once
// into a transposed tile (lane i = weight row i) that every activation row
// then reads; per 32 weights and activation row, vpmaddubsw + vpmaddwd with
// broadcast activation dwords and 3-4 FMAs (groups of 16 or 32 with a min or
// a code offset applied through the prepared half sums).

struct KTile8 {
    __m256i c[8][8];  // block j of the super-block, dword g: lane i = codes 4g..4g+3 of weight row i (unsigned)
    __m256 s[16];     // group h of 16 (Q4_K/Q5_K: s[j] per block of 32): lane i = weight row i's scale
    __m256 m[16];     // as s: the min (or offset * scale) that multiplies the group's activation sum
};

// Lane i, dword g (g < 4) = bytes off + 4g .. +3 of row rp[i].
inline void transpose8x16(const unsigned char* const rp[8], size_t off, __m256i d[4]) {
    __m256i z[4];  // 128-bit half L of z[m] = row 4L + m
    for (int m = 0; m < 4; ++m) {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rp[m] + off));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rp[4 + m] + off));
        z[m] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    }
    const __m256i a0 = _mm256_unpacklo_epi32(z[0], z[1]), a1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const __m256i a2 = _mm256_unpacklo_epi32(z[2], z[3]), a3 = _mm256_unpackhi_epi32(z[2], z[3]);
    d[0] = _mm256_unpacklo_epi64(a0, a2);
    d[1] = _mm256_unpackhi_epi64(a0, a2);
    d[2] = _mm256_unpacklo_epi64(a1, a3);
    d[3] = _mm256_unpackhi_epi64(a1, a3);
}

// The same for 32 bytes per row: d[0..8).
inline void transpose8x32(const unsigned char* const rp[8], size_t off, __m256i d[8]) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + off)));
    transpose8(r);
    for (int g = 0; g < 8; ++g) d[g] = _mm256_castps_si256(r[g]);
}

inline __m256 fp16x8(const unsigned char* const rp[8], size_t off) {
    alignas(16) uint16_t h[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&h[i], rp[i] + off, 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// Byte e (0..15) of each lane's 16 bytes in d[4], unsigned or signed, as float.
inline __m256 byte_u8(const __m256i d[4], int e) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d[e / 4], 8 * (e % 4)), _mm256_set1_epi32(0xff)));
}
inline __m256 byte_s8(const __m256i d[4], int e) {
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d[e / 4], 24 - 8 * (e % 4)), 24));
}

// Bits [sh, ...) of every byte of v under `mask`, moved up by `to` (16-bit
// shifts are safe: the mask keeps bits of the same byte only).
inline __m256i bits_at8(__m256i v, int sh, int mask, int to) {
    const __m256i b = _mm256_and_si256(_mm256_srli_epi16(v, sh), _mm256_set1_epi8(static_cast<char>(mask)));
    return to == 0 ? b : _mm256_slli_epi16(b, to);
}

template <class Block>
constexpr bool kGroups16 = !std::is_same_v<Block, BlockQ4_K> && !std::is_same_v<Block, BlockQ5_K>;

// Decodes super-block `sb` of the 8 weight rows at rp (rows past the last
// valid one repeat it) into t: the scales and mins, and (kCodes) the codes.
template <class Block, bool kCodes = true>
inline __attribute__((always_inline)) void decode_ktile8(const unsigned char* const rp[8], int64_t sb, KTile8& t) {
    const size_t off = static_cast<size_t>(sb) * sizeof(Block);
    if constexpr (std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>) {
        constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
        const __m256 d = fp16x8(rp, off + offsetof(Block, d)), dmin = fp16x8(rp, off + offsetof(Block, dmin));
        alignas(16) uint8_t buf[8][16];  // per row: the 8 scales, then the 8 mins
        const unsigned char* bp[8];
        for (int i = 0; i < 8; ++i) {
            _mm_store_si128(reinterpret_cast<__m128i*>(buf[i]), q4_k_scale_bytes(rp[i] + off + offsetof(Block, scales)));
            bp[i] = buf[i];
        }
        __m256i sm[4];
        transpose8x16(bp, 0, sm);
        for (int j = 0; j < 8; ++j) {
            t.s[j] = _mm256_mul_ps(d, byte_u8(sm, j));
            t.m[j] = _mm256_mul_ps(dmin, byte_u8(sm, 8 + j));
        }
        if constexpr (!kCodes) return;
        __m256i qh[8];
        if constexpr (kQ5) transpose8x32(rp, off + offsetof(BlockQ5_K, qh), qh);
        for (int st = 0; st < 4; ++st) {
            __m256i raw[8];
            transpose8x32(rp, off + offsetof(Block, qs) + 32 * st, raw);
            for (int g = 0; g < 8; ++g) {
                __m256i lo = bits_at8(raw[g], 0, 0x0f, 0), hi = bits_at8(raw[g], 4, 0x0f, 0);
                if constexpr (kQ5) {
                    lo = _mm256_or_si256(lo, bits_at8(qh[g], 2 * st, 1, 4));
                    hi = _mm256_or_si256(hi, bits_at8(qh[g], 2 * st + 1, 1, 4));
                }
                t.c[2 * st][g] = lo;
                t.c[2 * st + 1][g] = hi;
            }
        }
    } else if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        const __m256 d = fp16x8(rp, off + offsetof(BlockQ6_K, d));
        __m256i sc[4];
        transpose8x16(rp, off + offsetof(BlockQ6_K, scales), sc);
        for (int h = 0; h < 16; ++h) {
            t.s[h] = _mm256_mul_ps(d, byte_s8(sc, h));
            t.m[h] = _mm256_mul_ps(_mm256_set1_ps(32.0f), t.s[h]);
        }
        if constexpr (!kCodes) return;
        for (int hf = 0; hf < 2; ++hf) {
            __m256i a[8], b[8], c[8];
            transpose8x32(rp, off + offsetof(BlockQ6_K, ql) + 64 * hf, a);
            transpose8x32(rp, off + offsetof(BlockQ6_K, ql) + 64 * hf + 32, b);
            transpose8x32(rp, off + offsetof(BlockQ6_K, qh) + 32 * hf, c);
            for (int g = 0; g < 8; ++g) {
                t.c[4 * hf + 0][g] = _mm256_or_si256(bits_at8(a[g], 0, 0x0f, 0), bits_at8(c[g], 0, 3, 4));
                t.c[4 * hf + 1][g] = _mm256_or_si256(bits_at8(b[g], 0, 0x0f, 0), bits_at8(c[g], 2, 3, 4));
                t.c[4 * hf + 2][g] = _mm256_or_si256(bits_at8(a[g], 4, 0x0f, 0), bits_at8(c[g], 4, 3, 4));
                t.c[4 * hf + 3][g] = _mm256_or_si256(bits_at8(b[g], 4, 0x0f, 0), bits_at8(c[g], 6, 3, 4));
            }
        }
    } else if constexpr (std::is_same_v<Block, BlockQ3_K>) {
        const __m256 d = fp16x8(rp, off + offsetof(BlockQ3_K, d));
        alignas(16) uint8_t buf[8][16];
        const unsigned char* bp[8];
        for (int i = 0; i < 8; ++i) {
            _mm_store_si128(reinterpret_cast<__m128i*>(buf[i]), q3_k_scales(rp[i] + off + offsetof(BlockQ3_K, scales)));
            bp[i] = buf[i];
        }
        __m256i sc[4];
        transpose8x16(bp, 0, sc);
        for (int h = 0; h < 16; ++h) {
            t.s[h] = _mm256_mul_ps(d, byte_s8(sc, h));
            t.m[h] = _mm256_mul_ps(_mm256_set1_ps(4.0f), t.s[h]);
        }
        if constexpr (!kCodes) return;
        __m256i hm[8];
        transpose8x32(rp, off + offsetof(BlockQ3_K, hmask), hm);
        for (int hf = 0; hf < 2; ++hf) {
            __m256i q[8];
            transpose8x32(rp, off + offsetof(BlockQ3_K, qs) + 32 * hf, q);
            for (int jj = 0; jj < 4; ++jj) {
                for (int g = 0; g < 8; ++g) {
                    t.c[4 * hf + jj][g] = _mm256_or_si256(bits_at8(q[g], 2 * jj, 3, 0), bits_at8(hm[g], 4 * hf + jj, 1, 2));
                }
            }
        }
    } else {  // Q2_K
        const __m256 d = fp16x8(rp, off + offsetof(BlockQ2_K, d)), dmin = fp16x8(rp, off + offsetof(BlockQ2_K, dmin));
        __m256i sc[4];
        transpose8x16(rp, off + offsetof(BlockQ2_K, scales), sc);
        for (int h = 0; h < 16; ++h) {
            const __m256i v = _mm256_srli_epi32(sc[h / 4], 8 * (h % 4));
            t.s[h] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x0f))));
            t.m[h] = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 4), _mm256_set1_epi32(0x0f))));
        }
        if constexpr (!kCodes) return;
        for (int hf = 0; hf < 2; ++hf) {
            __m256i q[8];
            transpose8x32(rp, off + offsetof(BlockQ2_K, qs) + 32 * hf, q);
            for (int jj = 0; jj < 4; ++jj) {
                for (int g = 0; g < 8; ++g) t.c[4 * hf + jj][g] = bits_at8(q[g], 2 * jj, 3, 0);
            }
        }
    }
}

// Sum over 16 codes (dwords c[0..4)) times the activation bytes q[0..16) as
// 8 int32 lanes. Codes <= 31: the four 16-bit pair sums stay below 2^15
// (4 * 2 * 31 * 127); Q6_K's codes (<= 63) add two at a time.
template <class Block>
inline __attribute__((always_inline)) __m256i dot16(const __m256i* c, const int8_t* q) {
    const __m256i ones = _mm256_set1_epi16(1);
    auto p = [&](int g) __attribute__((always_inline)) {
        return _mm256_maddubs_epi16(c[g], _mm256_set1_epi32(load_i32(q + 4 * g)));
    };
    if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p(0), p(1)), ones),
                                _mm256_madd_epi16(_mm256_add_epi16(p(2), p(3)), ones));
    } else {
        return _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p(0), p(1)), _mm256_add_epi16(p(2), p(3))), ones);
    }
}

// out[0..nv) (+)= v's first nv lanes. Plain stores: vmaskmovps gave wrong
// results here under GCC 12 with -fsanitize=address,undefined.
inline void store_lanes(float* out, __m256 v, int nv, bool accumulate) {
    if (nv == 8) {
        _mm256_storeu_ps(out, accumulate ? _mm256_add_ps(v, _mm256_loadu_ps(out)) : v);
        return;
    }
    alignas(32) float a[8];
    _mm256_store_ps(a, v);
    for (int i = 0; i < nv; ++i) out[i] = accumulate ? out[i] + a[i] : a[i];
}

// One block j (of 32 weights) of a super-block added to f, lane i = weight
// row i: i0, i1 = sum(code * xq) over its first and second 16 weights (or
// any split of the block's sum: Q4_K/Q5_K add them first); dx and hs of the
// activation row. Every K-quant path takes this order (each super-block's
// chain from zero, then added to the output), so a row's result has the
// same bits in any batch.
template <class Block>
inline __attribute__((always_inline)) __m256 kq_block_fma8(__m256 f, const KTile8& t, int j, __m256i i0, __m256i i1, float dx_s,
                                                           const HalfSums& hs) {
    const __m256 dx = _mm256_set1_ps(dx_s);
    if constexpr (kGroups16<Block>) {
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(t.s[2 * j], dx), f);
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(t.s[2 * j + 1], dx), f);
        f = _mm256_fnmadd_ps(t.m[2 * j], _mm256_set1_ps(hs.lo), f);
        return _mm256_fnmadd_ps(t.m[2 * j + 1], _mm256_set1_ps(hs.hi), f);
    } else {
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1)), _mm256_mul_ps(t.s[j], dx), f);
        return _mm256_fnmadd_ps(t.m[j], _mm256_set1_ps(hs.lo + hs.hi), f);
    }
}

// y[t][0..nv) (+)= activation rows t0 .. t0+NR against super-block sb's tile.
template <class Block, int NR>
inline __attribute__((always_inline)) void ktile8_rows(const KTile8& t, const PreparedInput& x, int64_t sb, int t0, float* y,
                                                       int64_t ldy, int nv, bool accumulate) {
    __m256 F[NR];
    for (int r = 0; r < NR; ++r) F[r] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * sb + j;
        for (int r = 0; r < NR; ++r) {
            const int8_t* q = x.q8_block(b, t0 + r);
            const __m256i i0 = dot16<Block>(t.c[j], q), i1 = dot16<Block>(t.c[j] + 4, q + 16);
            F[r] = kq_block_fma8<Block>(F[r], t, j, i0, i1, x.q8_scale(b, t0 + r), *x.half_sums(b, t0 + r));
        }
    }
    for (int r = 0; r < NR; ++r) store_lanes(y + (t0 + r) * ldy, F[r], nv, accumulate);
}

template <class Block, int NR>
void ktile8_rows_n(int nr, const KTile8& t, const PreparedInput& x, int64_t sb, int t0, float* y, int64_t ldy, int nv,
                   bool accumulate) {
    if constexpr (NR > 0) {
        if (nr == NR) return ktile8_rows<Block, NR>(t, x, sb, t0, y, ldy, nv, accumulate);
        ktile8_rows_n<Block, NR - 1>(nr, t, x, sb, t0, y, ldy, nv, accumulate);
    }
}

constexpr int kKTileRows = 4;  // activation rows whose accumulators stay in registers

template <class Block>
void kq_tile_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    const int64_t nsb = x.k() / kSuperBlock;
    const int rows = x.rows();
    KTile8 t;
    for (int64_t n = n0; n < n1; n += 8) {
        const int nv = static_cast<int>(std::min<int64_t>(8, n1 - n));
        const unsigned char* rp[8];  // weight row n + i; rows past n1 repeat the last (never stored)
        for (int i = 0; i < 8; ++i) rp[i] = W + (n + std::min(i, nv - 1)) * static_cast<int64_t>(rb);
        for (int64_t sb = 0; sb < nsb; ++sb) {
            for (int i = 0; i < nv; ++i) {
                const char* p = reinterpret_cast<const char*>(rp[i]) + (sb + 2) * static_cast<int64_t>(sizeof(Block));
                for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
            }
            decode_ktile8<Block>(rp, sb, t);
            int t0 = 0;
            for (; t0 + kKTileRows <= rows; t0 += kKTileRows) ktile8_rows<Block, kKTileRows>(t, x, sb, t0, y + n, ldy, nv, sb > 0);
            if (t0 < rows) ktile8_rows_n<Block, kKTileRows - 1>(rows - t0, t, x, sb, t0, y + n, ldy, nv, sb > 0);
        }
    }
}

// One weight row at a time (lanes along K, a pure weight stream: the
// fastest shape for one activation row), in two passes per 8 weight rows:
// each row's integer group sums for every activation row into a buffer,
// then the tiles' float steps (kq_block_fma8, each super-block's chain added
// to the output) over those sums transposed, so each output has the tiles'
// bits.
template <class Block>
void kq_stream_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    constexpr int G = kGroups16<Block> ? 16 : 8;  // integer sums per super-block
    const int64_t nsb = x.k() / kSuperBlock;
    const int rows = x.rows();
    const int64_t ld = nsb * G;  // sums of one (weight row, activation row)
    thread_local std::vector<int32_t> sums;  // (8, rows, nsb * G): weight row i of the 8, activation row t
    if (sums.size() < static_cast<size_t>(8 * rows * ld)) sums.resize(static_cast<size_t>(8 * rows * ld));
    KTile8 t;
    for (int64_t n = n0; n < n1; n += 8) {
        const int nv = static_cast<int>(std::min<int64_t>(8, n1 - n));
        const unsigned char* rp[8];  // weight row n + i; rows past n1 repeat the last (never stored)
        for (int i = 0; i < 8; ++i) rp[i] = W + (n + std::min(i, nv - 1)) * static_cast<int64_t>(rb);
        for (int i = 0; i < nv; ++i) {
            const Block* blocks = reinterpret_cast<const Block*>(rp[i]);
            if constexpr (kGroups16<Block>) q6_k_row_sums<Block>(blocks, nsb, x, &sums[static_cast<size_t>(i * rows) * ld], ld);
            else q4_k_row_sums<Block>(blocks, nsb, x, &sums[static_cast<size_t>(i * rows) * ld], ld);
        }
        for (int r = 0; r < rows; ++r) {
            const unsigned char* sp[8];  // the sums of weight row n + i against activation row r
            for (int i = 0; i < 8; ++i) sp[i] = reinterpret_cast<const unsigned char*>(&sums[static_cast<size_t>(std::min(i, nv - 1) * rows + r) * ld]);
            __m256 out = _mm256_setzero_ps();
            for (int64_t sb = 0; sb < nsb; ++sb) {
                decode_ktile8<Block, false>(rp, sb, t);
                __m256i is[16];  // is[g] lane i = sum g of super-block sb, weight row i
                const size_t off = static_cast<size_t>(sb * G) * sizeof(int32_t);
                transpose8x32(sp, off, is);
                if constexpr (G == 16) transpose8x32(sp, off + 32, is + 8);
                __m256 f = _mm256_setzero_ps();
                for (int j = 0; j < 8; ++j) {
                    const int64_t b = 8 * sb + j;
                    if constexpr (G == 16) f = kq_block_fma8<Block>(f, t, j, is[2 * j], is[2 * j + 1], x.q8_scale(b, r), *x.half_sums(b, r));
                    else f = kq_block_fma8<Block>(f, t, j, is[j], _mm256_setzero_si256(), x.q8_scale(b, r), *x.half_sums(b, r));
                }
                out = sb == 0 ? f : _mm256_add_ps(f, out);
            }
            store_lanes(y + r * ldy + n, out, nv, false);
        }
    }
}

// The stream for one activation row, tiles for more: both give the same
// bits (kq_block_fma8), so the choice is speed only.
template <class Block>
void kq_matmul_auto(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    // Q2_K's stream (codes of 2 bits: the weight stream is short, the float
    // steps dominate) was slower than its tiles even for one row.
    if (x.rows() < kKTileMinRows && !std::is_same_v<Block, BlockQ2_K>) kq_stream_matmul<Block>(W, rb, x, y, ldy, n0, n1);
    else kq_tile_matmul<Block>(W, rb, x, y, ldy, n0, n1);
}

// ------------------------- q5_0 / q5_1 / iq4_nl (and iq4_xs), q8 activations ---
// Most activation rows whose accumulators stay in registers.
constexpr int kKqRows = 4;

// The 32-weight types llama.cpp falls back to (rows not a multiple of 256),
// one weight row at a time, per block b: x_j = d_b * code_j + c_b, so
// dot(w, x) = sum_b dx_b * (d_b * sum(code * xq) + c_b * sum(xq)), with
//   q5_0:   code = q (0..31),        c = -16 d
//   q5_1:   code = q (0..31),        c = m
//   iq4_nl: code = value (-127..113), c = 0: vpmaddubsw takes |code| and
//           the activations with code's sign, so no pair can saturate.

// Byte j of the result: 0x10 where bit j of qh is set.
inline __m256i bits_to_0x10(uint32_t qh) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                               _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                                  0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

template <TensorType T>
inline __m256i block32_codes(const unsigned char* p, float& d, float& c) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    if constexpr (T == TensorType::IQ4_NL) {
        const BlockIQ4_NL& b = *reinterpret_cast<const BlockIQ4_NL*>(p);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
        const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
        d = _cvtsh_ss(b.d);
        c = 0.0f;
        return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), low4)),
                                _mm_shuffle_epi8(table, _mm_and_si128(qs, low4)));
    } else {
        using Block = std::conditional_t<T == TensorType::Q5_0, BlockQ5_0, BlockQ5_1>;
        const Block& b = *reinterpret_cast<const Block*>(p);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        d = _cvtsh_ss(b.d);
        if constexpr (T == TensorType::Q5_0) c = -16.0f * d;
        else c = _cvtsh_ss(b.m);
        const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), low4), _mm_and_si128(qs, low4));
        return _mm256_or_si256(nibbles, bits_to_0x10(qh));
    }
}

template <TensorType T>
constexpr size_t block32_bytes() {
    return T == TensorType::Q5_0 ? sizeof(BlockQ5_0) : T == TensorType::Q5_1 ? sizeof(BlockQ5_1) : sizeof(BlockIQ4_NL);
}

// Bytes of a row per 32 weights (IQ4_XS: 136 per 256, rounded down; only
// the prefetch distance uses it).
template <TensorType T>
constexpr size_t kBytesPer32 = T == TensorType::IQ4_XS ? sizeof(BlockIQ4_XS) / 8 : block32_bytes<T>();

// Codes, d and c of the b-th 32 weights of a row: a whole block of the
// 32-weight types, or group b % 8 of IQ4_XS super-block b / 8 (iq4_nl's
// codes with d = d_super * (ls - 32)).
template <TensorType T>
inline __attribute__((always_inline)) __m256i group_codes(const unsigned char* w, int64_t b, float& d, float& c) {
    if constexpr (T == TensorType::IQ4_XS) {
        const BlockIQ4_XS& s = reinterpret_cast<const BlockIQ4_XS*>(w)[b / 8];
        const int g = static_cast<int>(b % 8);
        const int ls = ((s.scales_l[g / 2] >> (4 * (g % 2))) & 0x0f) | (((s.scales_h >> (2 * g)) & 3) << 4);
        d = _cvtsh_ss(s.d) * static_cast<float>(ls - 32);
        c = 0.0f;
        const __m128i low4 = _mm_set1_epi8(0x0f);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.qs + 16 * g));
        const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
        return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), low4)),
                                _mm_shuffle_epi8(table, _mm_and_si128(qs, low4)));
    } else {
        return block32_codes<T>(w + b * block32_bytes<T>(), d, c);
    }
}

template <TensorType T, int NR>
inline __attribute__((always_inline)) void q32_row(const unsigned char* w, int64_t nb, const PreparedInput& x, int t0,
                                                   float* y, int64_t ldy) {
    __m256 acc[NR];  // d*dx * sum(code*xq), per lane
    float cacc[NR];  // c*dx * sum(xq)
    for (int r = 0; r < NR; ++r) {
        acc[r] = _mm256_setzero_ps();
        cacc[r] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(w + b * kBytesPer32<T>) + kQPrefetchBytes, _MM_HINT_T1);
        float d, c;
        const __m256i codes = group_codes<T>(w, b, d, c);
        constexpr bool kSigned = T == TensorType::IQ4_NL || T == TensorType::IQ4_XS;
        const __m256i mag = kSigned ? _mm256_sign_epi8(codes, codes) : codes;  // |code|
        for (int r = 0; r < NR; ++r) {
            const QuantMeta m = *x.q8_meta(b, t0 + r);
            __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q8_block(b, t0 + r)));
            if constexpr (kSigned) a = _mm256_sign_epi8(a, codes);
            const __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, a), _mm256_set1_epi16(1));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * m.d), acc[r]);
            if constexpr (!kSigned) cacc[r] += c * m.d * static_cast<float>(m.corr);
        }
    }
    for (int r = 0; r < NR; ++r) y[(t0 + r) * ldy] = hsum8(acc[r]) + cacc[r];
}

template <TensorType T, int NR>
void q32_rows_n(int nr, const unsigned char* w, int64_t nb, const PreparedInput& x, int t0, float* y, int64_t ldy) {
    if constexpr (NR > 0) {
        if (nr == NR) return q32_row<T, NR>(w, nb, x, t0, y, ldy);
        q32_rows_n<T, NR - 1>(nr, w, nb, x, t0, y, ldy);
    }
}

template <TensorType T>
void q32_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    const int64_t nb = x.k() / 32;
    const int rows = x.rows();
    for (int64_t n = n0; n < n1; ++n) {
        for (int t0 = 0; t0 < rows; t0 += kKqRows) {
            q32_rows_n<T, kKqRows>(std::min(kKqRows, rows - t0), W + n * rb, nb, x, t0, y + n, ldy);
        }
    }
}

template <TensorType T>
void matmul_float(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                  int64_t n1) {
    matmul_float_dot<T>(W, rb, x, y, ldy, n0, n1);
}

}  // namespace

void matmul_packed_avx2(TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                        int64_t n0, int64_t n1) {
    const unsigned char* w = static_cast<const unsigned char*>(W_packed);
    const size_t rb = tensor_row_bytes(type, x.k());
    if (type == TensorType::Q8_0) matmul_quant<TensorType::Q8_0, true>(w, rb, x, y, ldy, n0, n1);
    else matmul_quant<TensorType::Q4_0, true>(w, rb, x, y, ldy, n0, n1);
}

void matmul_avx2(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                 int64_t n1) {
    const unsigned char* w = static_cast<const unsigned char*>(W);
    const size_t rb = tensor_row_bytes(type, x.k());
    switch (type) {
        case TensorType::F32: matmul_float<TensorType::F32>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::F16: matmul_float<TensorType::F16>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::BF16: matmul_float<TensorType::BF16>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q8_0: matmul_quant<TensorType::Q8_0>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q4_0: matmul_quant<TensorType::Q4_0>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q4_K: kq_matmul_auto<BlockQ4_K>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q5_K: kq_matmul_auto<BlockQ5_K>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q6_K: kq_matmul_auto<BlockQ6_K>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q3_K: kq_matmul_auto<BlockQ3_K>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q2_K: kq_matmul_auto<BlockQ2_K>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q5_0: q32_matmul<TensorType::Q5_0>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::Q5_1: q32_matmul<TensorType::Q5_1>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::IQ4_NL: q32_matmul<TensorType::IQ4_NL>(w, rb, x, y, ldy, n0, n1); return;
        case TensorType::IQ4_XS: q32_matmul<TensorType::IQ4_XS>(w, rb, x, y, ldy, n0, n1); return;
        default: matmul_dequant_avx2(type, W, x, y, ldy, n0, n1); return;
    }
}

// Decode a weight block (the table's scalar dequantisation), then FMA it
// into one accumulator per activation row; summed across lanes at the end.
void matmul_kq_path_avx2(KqPath path, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy,
                         int64_t n0, int64_t n1) {
    const unsigned char* w = static_cast<const unsigned char*>(W);
    const size_t rb = tensor_row_bytes(type, x.k());
    auto run = [&](auto block) {
        using Block = decltype(block);
        if (path == KqPath::Rows) kq_stream_matmul<Block>(w, rb, x, y, ldy, n0, n1);
        else kq_tile_matmul<Block>(w, rb, x, y, ldy, n0, n1);
    };
    switch (type) {
        case TensorType::Q2_K: run(BlockQ2_K{}); return;
        case TensorType::Q3_K: run(BlockQ3_K{}); return;
        case TensorType::Q4_K: run(BlockQ4_K{}); return;
        case TensorType::Q5_K: run(BlockQ5_K{}); return;
        case TensorType::Q6_K: run(BlockQ6_K{}); return;
        default: matmul_avx2(type, W, x, y, ldy, n0, n1); return;
    }
}

void matmul_dequant_avx2(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                         int64_t n1) {
    const TensorTypeTraits& tt = *tensor_type_traits(static_cast<uint32_t>(type));
    const int64_t be = tt.block_elements, nb = x.k() / be;
    const size_t rb = tensor_row_bytes(type, x.k());
    alignas(32) float wb[kDequantMaxBlock];  // (be) one decoded block of the weight row
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = static_cast<const unsigned char*>(W) + static_cast<size_t>(n) * rb;
        for (int t0 = 0; t0 < x.rows(); t0 += kDequantRowGroup) {
            const int tn = std::min(kDequantRowGroup, x.rows() - t0);
            __m256 acc[kDequantRowGroup];  // (tn) per-lane running dots
            for (int t = 0; t < tn; ++t) acc[t] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const unsigned char* blk = w + static_cast<size_t>(b) * tt.block_bytes;
                _mm_prefetch(reinterpret_cast<const char*>(blk + kQPrefetchBytes), _MM_HINT_T1);
                tt.dequantize(blk, wb, 1);
                const int64_t c0 = b * be / 16;
                for (int t = 0; t < tn; ++t) {
                    __m256 a = acc[t];
                    for (int64_t c = 0; c < be / 16; ++c) {
                        const float* xc = x.f32_chunk(c0 + c, t0 + t);
                        a = _mm256_fmadd_ps(_mm256_load_ps(wb + 16 * c), _mm256_loadu_ps(xc), a);
                        a = _mm256_fmadd_ps(_mm256_load_ps(wb + 16 * c + 8), _mm256_loadu_ps(xc + 8), a);
                    }
                    acc[t] = a;
                }
            }
            for (int t = 0; t < tn; ++t) y[(t0 + t) * ldy + n] = hsum8(acc[t]);
        }
    }
}

// ------------------------------------------------------------ other kernels ---

void quantize_act_avx2(const float* x, int64_t k, const QuantDst& dst) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
            // round half away from zero, as std::round.
            const __m256 s = _mm256_mul_ps(v[i], vid);
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
            const __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, s))));
            q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvttps_epi32(r), _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        }
        // int32 -> int8 keeping order: packs work per 128-bit lane, then fix the lane order.
        const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
        const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.q + b * dst.stride), bytes);
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        dst.meta[b * dst.mstride] = {dst.corr_mul * _mm_cvtsi128_si32(s4), d};
    }
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float acc = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

void axpy_f32_avx2(float alpha, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += alpha * x[i];
}

void dot_rows_avx2(TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
                   float* out) {
    if (kv_type == TensorType::F32) {
        const float* kf = static_cast<const float*>(k);
        for (int32_t j = 0; j < rows; ++j) out[j] = dot_f32_avx2(q, kf + j * ldk, n) * scale;
        return;
    }
    // f16 keys: each row widened to f32 (exactly), then the f32 product, so
    // the sums are the f32 kernel's on the rounded keys.
    const uint16_t* kh = static_cast<const uint16_t*>(k);
    constexpr int64_t kStack = 512;
    alignas(32) float stack_row[kStack];
    std::vector<float> heap_row(n > kStack ? static_cast<size_t>(n) : 0);
    float* row = n > kStack ? heap_row.data() : stack_row;
    for (int32_t j = 0; j < rows; ++j) {
        const uint16_t* src = kh + j * ldk;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_store_ps(row + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
        for (; i < n; ++i) row[i] = fp16_to_fp32(src[i]);
        out[j] = dot_f32_avx2(q, row, n) * scale;
    }
}

void store_row_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

namespace {

// exp(x) for x <= 88.7, as exp16 in kernels_avx512.cpp: x = m ln2 + r, e^r
// by a polynomial, 2^m through the exponent bits (m >= -126 after the clamp).
inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kExpMax)), _mm256_set1_ps(kExpMin));
    const __m256 m = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(m, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(m, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kExpPoly[0]);
    for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // m is in [-126, 128]: 2^m as a float's exponent field (128 overflows to inf, as expf does).
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(m), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

}  // namespace

float exp_shift_sum_f32_avx2(float* x, int64_t n, float shift) {
    const __m256 vs = _mm256_set1_ps(shift);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        // The tail through the same polynomial, padded with -inf's stand-in (exp ~ 1e-38, not summed).
        alignas(32) float tail[8];
        for (int t = 0; t < 8; ++t) tail[t] = i + t < n ? x[i + t] : shift - 100.0f;
        const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(tail), vs));
        _mm256_store_ps(tail, e);
        for (int64_t t = 0; i + t < n; ++t) x[i + t] = tail[t];
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), lane));
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, keep));
    }
    return hsum8(sum);
}

void silu_mul_f32_avx2(float* g, const float* u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    auto silu8 = [&](__m256 x, __m256 uv) {
        return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x)))), uv);
    };
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, silu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        // The tail through the same lanes' arithmetic.
        alignas(32) float gt[8] = {}, ut[8] = {};
        for (int64_t t = 0; i + t < n; ++t) {
            gt[t] = g[i + t];
            ut[t] = u[i + t];
        }
        _mm256_store_ps(gt, silu8(_mm256_load_ps(gt), _mm256_load_ps(ut)));
        for (int64_t t = 0; i + t < n; ++t) g[i + t] = gt[t];
    }
}

namespace {

template <TensorType T>
void weighted_rows(const float* w, float w_scale, const unsigned char* v, int64_t ldv_bytes, int32_t rows, int64_t n, float* y) {
    // 32 outputs stay in registers across all rows; a scalar tail below 8.
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 acc[4];
        for (int c = 0; c < 4; ++c) acc[c] = _mm256_loadu_ps(y + i + 8 * c);
        for (int32_t j = 0; j < rows; ++j) {
            const __m256 a = _mm256_set1_ps(w[j] * w_scale);
            const unsigned char* vr = v + j * ldv_bytes;
            for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_ps(a, load_w8<T>(vr, i + 8 * c), acc[c]);
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y + i + 8 * c, acc[c]);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
        for (int32_t j = 0; j < rows; ++j) acc = _mm256_fmadd_ps(_mm256_set1_ps(w[j] * w_scale), load_w8<T>(v + j * ldv_bytes, i), acc);
        _mm256_storeu_ps(y + i, acc);
    }
    for (; i < n; ++i) {
        // std::fma, as the vector lanes: left to the compiler, contraction
        // could differ between the f32 and f16 instantiations.
        float acc = y[i];
        for (int32_t j = 0; j < rows; ++j) acc = std::fma(w[j] * w_scale, load_w1<T>(v + j * ldv_bytes, i), acc);
        y[i] = acc;
    }
}

}  // namespace

void weighted_rows_avx2(TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                        int64_t n, float* y) {
    const auto* vb = static_cast<const unsigned char*>(v);
    if (kv_type == TensorType::F16) return weighted_rows<TensorType::F16>(w, w_scale, vb, ldv * 2, rows, n, y);
    weighted_rows<TensorType::F32>(w, w_scale, vb, ldv * 4, rows, n, y);
}

void dequantize_row_avx2(TensorType type, const void* src, float* dst, int64_t n) {
    const unsigned char* s = static_cast<const unsigned char*>(src);
    switch (type) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: {
            int64_t i = 0;
            auto run = [&](auto tag) {
                constexpr TensorType T = decltype(tag)::value;
                for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_w8<T>(s, i));
                for (; i < n; ++i) dst[i] = load_w1<T>(s, i);
            };
            if (type == TensorType::F32) run(std::integral_constant<TensorType, TensorType::F32>{});
            else if (type == TensorType::F16) run(std::integral_constant<TensorType, TensorType::F16>{});
            else run(std::integral_constant<TensorType, TensorType::BF16>{});
            return;
        }
        case TensorType::Q8_0: {
            tensor_row_bytes(type, n);  // throws for n % 32 != 0
            const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
            for (int64_t i = 0; i < n / 32; ++i) {
                const __m256 d = _mm256_set1_ps(fp16_to_fp32(b[i].d));
                for (int j = 0; j < 4; ++j) {
                    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + 8 * j));
                    _mm256_storeu_ps(dst + 32 * i + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
                }
            }
            return;
        }
        case TensorType::Q4_0: {
            tensor_row_bytes(type, n);
            const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
            const __m256i eight = _mm256_set1_epi32(8), low4 = _mm256_set1_epi32(0x0f);
            for (int64_t i = 0; i < n / 32; ++i) {
                const __m256 d = _mm256_set1_ps(fp16_to_fp32(b[i].d));
                for (int j = 0; j < 2; ++j) {
                    const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + 8 * j)));
                    const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, low4), eight);
                    const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
                    _mm256_storeu_ps(dst + 32 * i + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d));
                    _mm256_storeu_ps(dst + 32 * i + 16 + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
                }
            }
            return;
        }
        default: dequantize_row(type, src, dst, n); return;
    }
}

}  // namespace specd::kern
