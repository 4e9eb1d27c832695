// AVX-512 (F/BW/VL/DQ + VNNI) kernels. The matmul shapes:
//
//  * float weights: "dot" tiles of MR weight rows x NR activation rows,
//    vectors along K, one horizontal reduction per output at the end, in one
//    order for every tile shape (reduce4), so a row's outputs have the same
//    bits in any batch. Every weight is loaded once for all rows; at rows=1
//    this is a DRAM stream. (Panel tiles, lanes along the activation rows,
//    were up to 15-20% faster from 64 rows on but summed in another order:
//    a verification step of 64 rows could then change greedy output.)
//  * q8_0/q4_0 weights: 16 weight rows of one block are transposed in
//    registers so lane i holds weight row i: G[g] = bytes 4g..4g+3 of every
//    row's block. One vpdpbusd with a broadcast activation dword then serves
//    16 weight rows, the int32 lanes need no reduction, and the float scaling
//    (16 different weight scales x one activation scale) is one FMA per block
//    and activation row. dpbusd multiplies unsigned x signed bytes, so the
//    weights are made unsigned (q8_0: w ^ 0x80 = w + 128; q4_0: nibbles
//    0..15 without their -8) and the prepared per-block correction
//    (-128 or -8 times the activation sum) starts each integer sum.

// GCC 12 warns about the self-initialised "undefined" vectors inside its own
// AVX-512 intrinsics once they are inlined (GCC PR105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels_internal.h"
#include "engine/quant_k.h"

// Full unrolling of the small constant loops keeps tiles in registers.
#define SPECD_UNROLL _Pragma("GCC unroll 16")
// Tile helpers must inline into their kernels, or their register tiles
// go through memory.
#define SPECD_INLINE inline __attribute__((always_inline))

namespace specd::kern {

namespace {

// ---------------------------------------------------------------- helpers ---

// Hides a value from the optimiser so that addresses derived from it stay
// base + index*scale operands instead of 16 separately kept pointers.
template <class T>
SPECD_INLINE T opaque(T v) {
    __asm__("" : "+r"(v));
    return v;
}

SPECD_INLINE __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1u); }

// 16 weights of type T starting at element k of a row, as f32; masked
// lanes read nothing and are zero.
template <TensorType T>
SPECD_INLINE __m512 load_w16(const unsigned char* row, int64_t k) {
    if constexpr (T == TensorType::F32) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else if constexpr (T == TensorType::F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
    } else {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

template <TensorType T>
SPECD_INLINE __m512 load_w16_mask(const unsigned char* row, int64_t k, __mmask16 m) {
    if constexpr (T == TensorType::F32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
    } else if constexpr (T == TensorType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

// 8 weights of type T as f32 (for packing).
template <TensorType T>
SPECD_INLINE __m256 load_w8(const unsigned char* row, int64_t k) {
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
SPECD_INLINE float load_w1(const unsigned char* row, int64_t k) {
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

// Per 128-bit lane: [sum-parts of a0, a1, a2, a3].
SPECD_INLINE __m512 partial4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))));
}

// [sum(a0), sum(a1), sum(a2), sum(a3)]: per 128-bit lane L, (e0 + e2) +
// (e1 + e3); then (L0 + L2) + (L1 + L3). The one summation order of the
// float dot tiles (reduce8 and reduce1 follow it).
SPECD_INLINE __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 u = partial4(a0, a1, a2, a3);
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// sum(a) in reduce4's order.
SPECD_INLINE float reduce1(__m512 a) { return _mm_cvtss_f32(reduce4(a, a, a, a)); }

// [sum(a0), ..., sum(a7)], each summed in reduce4's order (so an output's
// bits do not depend on the tile shape that computed it).
SPECD_INLINE __m256 reduce8(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 a4, __m512 a5, __m512 a6, __m512 a7) {
    const __m512 u = partial4(a0, a1, a2, a3), v = partial4(a4, a5, a6, a7);
    // [u.L0+u.L2, u.L1+u.L3, v.L0+v.L2, v.L1+v.L3]
    const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(u, v, 0x44), _mm512_shuffle_f32x4(u, v, 0xee));
    const __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(w, w, 0x88), _mm512_shuffle_f32x4(w, w, 0xdd));
    return _mm512_castps512_ps256(z);
}

// In-register 8x8 transpose of f32.
SPECD_INLINE void transpose8(__m256 r[8]) {
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

// acc += dpbusd(a, broadcast of the dword at p). GCC 12 does not fold the
// broadcast into the instruction's {1to16} memory operand by itself, and the
// separate vpbroadcastd would double the instruction count of the loop.
SPECD_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i a, const void* p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*static_cast<const int32_t*>(p)));
    return acc;
}

SPECD_INLINE int32_t load_i32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// ------------------------------------------------- float weights, dot tiles ---

// y[t0 + j][n + i] for i < MR, j < NR. w: weight row n; rb: row bytes.
template <TensorType T, int MR, int NR>
void dot_tile(const unsigned char* w, size_t rb, int64_t K, const PreparedInput& x, int t0, float* y, int64_t ldy) {
    __m512 acc[MR][NR];
    SPECD_UNROLL
    for (int i = 0; i < MR; ++i)
        SPECD_UNROLL
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t rows = x.rows();
    const float* xc = x.f32_chunk(0, t0);  // chunk c of row t0 + j at xc + (c*rows + j)*16
    // The next tile's rows, one tile ahead, into L1: rows = 1..8 is a DRAM
    // stream of 4..8 interleaved rows that the hardware prefetcher alone
    // covers poorly. And the bytes kFarPrefetchBytes ahead, as one linear
    // range (this tile's MR*16 elements per step, shifted), into L2: L1's
    // few miss buffers cap one core near 9 GB/s, L2 keeps more in flight.
    const unsigned char* next = w + MR * rb;
    constexpr int64_t es = T == TensorType::F32 ? 4 : 2;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16, xc += rows * 16) {
        __m512 wv[MR];
        SPECD_UNROLL
        for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * rb + k * es), _MM_HINT_T0);
        SPECD_UNROLL
        for (int i = 0; i < MR; ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(w + kFarPrefetchBytes + (k * MR + i * 16) * es), _MM_HINT_T1);
        }
        SPECD_UNROLL
        for (int i = 0; i < MR; ++i) wv[i] = load_w16<T>(w + i * rb, k);
        SPECD_UNROLL
        for (int j = 0; j < NR; ++j) {
            const __m512 xv = _mm512_load_ps(xc + j * 16);
            SPECD_UNROLL
            for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < K) {
        const __mmask16 m = tail_mask(K - k);
        __m512 wv[MR];
        SPECD_UNROLL
        for (int i = 0; i < MR; ++i) wv[i] = load_w16_mask<T>(w + i * rb, k, m);
        SPECD_UNROLL
        for (int j = 0; j < NR; ++j) {
            const __m512 xv = _mm512_load_ps(xc + j * 16);  // zero past K
            SPECD_UNROLL
            for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    SPECD_UNROLL
    for (int j = 0; j < NR; ++j) {
        float* out = y + (t0 + j) * ldy;
        if constexpr (MR == 8) {
            _mm256_storeu_ps(out, reduce8(acc[0][j], acc[1][j], acc[2][j], acc[3][j], acc[4][j], acc[5][j], acc[6][j],
                                          acc[7][j]));
        } else if constexpr (MR == 4) {
            _mm_storeu_ps(out, reduce4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
        } else {
            SPECD_UNROLL
            for (int i = 0; i < MR; ++i) out[i] = reduce1(acc[i][j]);
        }
    }
}

template <TensorType T, int MR>
void dot_tile_rows(int nr, const unsigned char* w, size_t rb, int64_t K, const PreparedInput& x, int t0, float* y,
                   int64_t ldy) {
    switch (nr) {
        case 1: dot_tile<T, MR, 1>(w, rb, K, x, t0, y, ldy); return;
        case 2: dot_tile<T, MR, 2>(w, rb, K, x, t0, y, ldy); return;
        case 3: dot_tile<T, MR, 3>(w, rb, K, x, t0, y, ldy); return;
        case 4: dot_tile<T, MR, 4>(w, rb, K, x, t0, y, ldy); return;
        case 5: dot_tile<T, MR, 5>(w, rb, K, x, t0, y, ldy); return;
        default: dot_tile<T, MR, 6>(w, rb, K, x, t0, y, ldy); return;
    }
}

template <TensorType T>
void matmul_float_dot(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
    const int64_t K = x.k();
    const int rows = x.rows();
    int64_t n = n0;
    if (rows == 1) {
        for (; n + 8 <= n1; n += 8) dot_tile<T, 8, 1>(W + n * rb, rb, K, x, 0, y + n, ldy);
    } else {
        // Row groups of at most 6, as even as possible; each 4-row weight
        // tile is read from memory once and from L1 for the other groups.
        const int groups = (rows + 5) / 6;
        for (; n + 4 <= n1; n += 4) {
            int t0 = 0;
            for (int g = 0; g < groups; ++g) {
                const int nr = (rows - t0) / (groups - g);
                dot_tile_rows<T, 4>(nr, W + n * rb, rb, K, x, t0, y + n, ldy);
                t0 += nr;
            }
        }
    }
    for (; n < n1; ++n) {
        for (int t0 = 0; t0 < rows; t0 += 6) dot_tile_rows<T, 1>(std::min(6, rows - t0), W + n * rb, rb, K, x, t0, y + n, ldy);
    }
}

// ------------------------------------------------------ quantised weights ---

// One block of 16 weight rows, transposed: g[j] lane i = unsigned bytes
// 4j..4j+3 of weight row i's 32 values; s lane i = weight row i's scale.
struct QTile {
    __m512i g[8];
    __m512 s;
};

// Addresses of the 16 weight rows of a tile from 2 bases and 4 strides:
// row i = p + i*rb, written so each is one base + index*scale operand
// (6 registers instead of 16 pointers).
struct QRows {
    size_t rb, r3, r5, r7;  // row stride times 1, 3, 5, 7
};

SPECD_INLINE QRows q_rows(size_t rb) { return QRows{rb, 3 * rb, 5 * rb, 7 * rb}; }

template <int I>
SPECD_INLINE const unsigned char* row_at(const unsigned char* p, const unsigned char* p8, const QRows& q) {
    if constexpr (I == 0) return p;
    if constexpr (I == 1) return p + q.rb;
    if constexpr (I == 2) return p + 2 * q.rb;
    if constexpr (I == 3) return p + q.r3;
    if constexpr (I == 4) return p + 4 * q.rb;
    if constexpr (I == 5) return p + q.r5;
    if constexpr (I == 6) return p + 2 * q.r3;
    if constexpr (I == 7) return p + q.r7;
    if constexpr (I == 8) return p8;
    if constexpr (I == 9) return p8 + q.rb;
    if constexpr (I == 10) return p + 2 * q.r5;
    if constexpr (I == 11) return p8 + q.r3;
    if constexpr (I == 12) return p + 4 * q.r3;
    if constexpr (I == 13) return p8 + q.r5;
    if constexpr (I == 14) return p + 2 * q.r7;
    return p8 + q.r7;
}

// Block b of rows n.. of a tile: Full = all 16 rows valid; otherwise rows
// >= nv repeat row nv - 1 (their lanes are computed but never stored, and
// nothing past the last row is read).
template <TensorType T, bool Full>
SPECD_INLINE void load_qtile(const unsigned char* tile, const QRows& q, int nv, int64_t b, QTile& t) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const unsigned char* p = opaque(tile + static_cast<size_t>(b) * bb);  // row 0, block b
    const unsigned char* p8 = p + 8 * q.rb;
    // Address of row i's quantised bytes (after the 2-byte scale).
    auto at = [&](auto i) __attribute__((always_inline)) -> const unsigned char* {
        constexpr int I = decltype(i)::value;
        if constexpr (Full) return row_at<I>(p, p8, q) + 2;
        return p + std::min(I, nv - 1) * q.rb + 2;
    };
    // The 16 fp16 scales: one dword load per row (d and two code bytes),
    // then an unpack tree (off the multiply pipes) keeps the low words.
    // vpgatherdd is microcoded on AMD (~12 cycles per 16 lanes), and scalar
    // 16-bit loads packed in GPRs measured slower still.
    {
        using std::integral_constant;
        auto d = [&](auto i) __attribute__((always_inline)) -> __m128i {
            return _mm_cvtsi32_si128(load_i32(at(i) - 2));
        };
        auto pair = [&](auto a, auto b) __attribute__((always_inline)) { return _mm_unpacklo_epi16(d(a), d(b)); };
        const __m128i w0 = _mm_unpacklo_epi32(pair(integral_constant<int, 0>{}, integral_constant<int, 1>{}),
                                              pair(integral_constant<int, 2>{}, integral_constant<int, 3>{}));
        const __m128i w1 = _mm_unpacklo_epi32(pair(integral_constant<int, 4>{}, integral_constant<int, 5>{}),
                                              pair(integral_constant<int, 6>{}, integral_constant<int, 7>{}));
        const __m128i w2 = _mm_unpacklo_epi32(pair(integral_constant<int, 8>{}, integral_constant<int, 9>{}),
                                              pair(integral_constant<int, 10>{}, integral_constant<int, 11>{}));
        const __m128i w3 = _mm_unpacklo_epi32(pair(integral_constant<int, 12>{}, integral_constant<int, 13>{}),
                                              pair(integral_constant<int, 14>{}, integral_constant<int, 15>{}));
        const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(w0, w1)),
                                                  _mm_unpacklo_epi64(w2, w3), 1);
        t.s = _mm512_cvtph_ps(h);
    }
    if constexpr (T == TensorType::Q8_0) {
        // Z[k]: rows lo(k) | hi(k) with lo = 0,1,2,3,8,9,10,11 and hi = lo + 4, so
        // the final 128-bit shuffle leaves lanes in row order.
        __m512i z[8];
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        auto make = [&](auto lo, auto hi) __attribute__((always_inline)) {
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(lo)));
            const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(hi)));
            return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1), flip);
        };
        z[0] = make(std::integral_constant<int, 0>{}, std::integral_constant<int, 4>{});
        z[1] = make(std::integral_constant<int, 1>{}, std::integral_constant<int, 5>{});
        z[2] = make(std::integral_constant<int, 2>{}, std::integral_constant<int, 6>{});
        z[3] = make(std::integral_constant<int, 3>{}, std::integral_constant<int, 7>{});
        z[4] = make(std::integral_constant<int, 8>{}, std::integral_constant<int, 12>{});
        z[5] = make(std::integral_constant<int, 9>{}, std::integral_constant<int, 13>{});
        z[6] = make(std::integral_constant<int, 10>{}, std::integral_constant<int, 14>{});
        z[7] = make(std::integral_constant<int, 11>{}, std::integral_constant<int, 15>{});
        SPECD_UNROLL
        for (int h = 0; h < 2; ++h) {
            const __m512i* zz = z + 4 * h;
            const __m512i a0 = _mm512_unpacklo_epi32(zz[0], zz[1]), a1 = _mm512_unpackhi_epi32(zz[0], zz[1]);
            const __m512i a2 = _mm512_unpacklo_epi32(zz[2], zz[3]), a3 = _mm512_unpackhi_epi32(zz[2], zz[3]);
            z[4 * h + 0] = _mm512_unpacklo_epi64(a0, a2);
            z[4 * h + 1] = _mm512_unpackhi_epi64(a0, a2);
            z[4 * h + 2] = _mm512_unpacklo_epi64(a1, a3);
            z[4 * h + 3] = _mm512_unpackhi_epi64(a1, a3);
        }
        SPECD_UNROLL
        for (int g = 0; g < 4; ++g) {
            t.g[g] = _mm512_shuffle_i32x4(z[g], z[4 + g], 0x88);
            t.g[g + 4] = _mm512_shuffle_i32x4(z[g], z[4 + g], 0xdd);
        }
    } else {
        // Z[m]: 128-bit lane L = row 4L + m's 16 bytes; a 4x4 dword transpose
        // per lane leaves lane i = row i.
        auto make = [&](auto r0, auto r1, auto r2, auto r3) __attribute__((always_inline)) {
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at(r0))));
            v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at(r1))), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at(r2))), 2);
            return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at(r3))), 3);
        };
        using std::integral_constant;
        __m512i z[4];
        z[0] = make(integral_constant<int, 0>{}, integral_constant<int, 4>{}, integral_constant<int, 8>{}, integral_constant<int, 12>{});
        z[1] = make(integral_constant<int, 1>{}, integral_constant<int, 5>{}, integral_constant<int, 9>{}, integral_constant<int, 13>{});
        z[2] = make(integral_constant<int, 2>{}, integral_constant<int, 6>{}, integral_constant<int, 10>{}, integral_constant<int, 14>{});
        z[3] = make(integral_constant<int, 3>{}, integral_constant<int, 7>{}, integral_constant<int, 11>{}, integral_constant<int, 15>{});
        const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
        const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
        const __m512i d[4] = {_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
                              _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3)};
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        SPECD_UNROLL
        for (int g = 0; g < 4; ++g) {
            t.g[g] = _mm512_and_si512(d[g], low4);                             // values 4g..4g+3
            t.g[g + 4] = _mm512_and_si512(_mm512_srli_epi16(d[g], 4), low4);  // values 16+4g..
        }
    }
}

// F[r] += block b's contribution for activation rows t0 + r, r < NR.
// Per row and block: 8 vpdpbusd with the activation dword as a {1to16}
// memory operand, the correction broadcast, the scale multiply and the FMA.
// The multiply pipes (8 dpbusd + mul + fma) and the vector loads (10 at 2 per
// cycle) both come to ~5 cycles per row; moving the broadcasts to vpshufd
// instead (3 loads per row) measured no faster for twice the instructions.
template <int NR>
SPECD_INLINE void q_block_rows(const QTile& t, const PreparedInput& x, int64_t b, int t0, __m512 F[NR]) {
    const int8_t* xq = x.q8_block(b, t0);     // row t0 + r at xq + 32r
    const QuantMeta* xm = x.q8_meta(b, t0);   // row t0 + r at xm + r
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) {
        const int8_t* q = xq + 32 * r;
        const __m512i corr = _mm512_set1_epi32(xm[r].corr);
        __m512i acc;
        if constexpr (NR <= 2) {
            // Two chains so a lone row's eight dpbusd are not one serial chain.
            __m512i a = corr, c = _mm512_setzero_si512();
            SPECD_UNROLL
            for (int g = 0; g < 4; ++g) {
                a = dpbusd_bcast(a, t.g[g], q + 4 * g);
                c = dpbusd_bcast(c, t.g[g + 4], q + 16 + 4 * g);
            }
            acc = _mm512_add_epi32(a, c);
        } else {
            acc = corr;
            SPECD_UNROLL
            for (int g = 0; g < 8; ++g) acc = dpbusd_bcast(acc, t.g[g], q + 4 * g);
        }
        F[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(t.s, _mm512_set1_ps(xm[r].d)), F[r]);
    }
}

template <int NR>
SPECD_INLINE void store_rows(const __m512 F[NR], float* y, int64_t ldy, int t0, __mmask16 m, bool accumulate) {
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) {
        float* out = y + (t0 + r) * ldy;
        __m512 v = F[r];
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, out));
        _mm512_mask_storeu_ps(out, m, v);
    }
}

// Prefetches a linear stream of weights kQTilePrefetchBytes ahead of the
// reads, into L2, a cache line at a time: each block step moves the target
// by the bytes the step reads (spread evenly, so the misses stay in flight
// at a steady rate; see q_direct). Starts at `from`; a prefetch past the
// weights' end never faults.
class StreamPrefetch {
public:
    explicit StreamPrefetch(const unsigned char* from)
        : pf_(reinterpret_cast<const unsigned char*>(reinterpret_cast<uintptr_t>(from + kQTilePrefetchBytes) & ~uintptr_t{63})) {}
    // Lines up to kQTilePrefetchBytes past `read_to` not yet asked for.
    SPECD_INLINE void upto(const unsigned char* read_to) {
        for (const unsigned char* at = read_to + kQTilePrefetchBytes; pf_ < at; pf_ += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(pf_), _MM_HINT_T1);
        }
    }

private:
    const unsigned char* pf_;
};

// rows <= 16: each block is transposed once and used for all rows at once.
template <TensorType T, int NR>
void q_direct(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const int64_t nb = x.n_blocks();
    // A tile reads 16 rows block by block: 16 interleaved streams that the
    // hardware prefetchers cover poorly once the weights come from DRAM.
    // The lines kQTilePrefetchBytes ahead are asked for into L2 as one linear
    // range, a tile's worth spread evenly over its blocks (each block step
    // prefetches as many bytes as it reads), so that the misses stay in
    // flight at a steady rate. The whole tile's range at once at the tile's
    // start (as before) queued ~600 prefetches behind the few miss buffers:
    // the 1.1B q8_0 target decoded 16.0 t/s that way, 20.2 spread (2
    // threads, Sapphire Rapids class Xeon). The cursor runs past n1: a
    // thread taking the next rows next (RangeShare) finds them on their way,
    // and a prefetch never faults.
    StreamPrefetch pf(W + n0 * rb);
    auto tile = [&](auto full, int64_t n, int nv) {
        const QRows q = q_rows(rb);
        const unsigned char* w = W + n * rb;
        const size_t step = static_cast<size_t>(nv) * bb;  // a tile's bytes over its blocks
        __m512 F[NR];
        SPECD_UNROLL
        for (int r = 0; r < NR; ++r) F[r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            pf.upto(w + static_cast<size_t>(b + 1) * step);
            QTile t;
            load_qtile<T, decltype(full)::value>(w, q, nv, b, t);
            q_block_rows<NR>(t, x, b, 0, F);
        }
        store_rows<NR>(F, y + n, ldy, 0, tail_mask(nv), false);
    };
    int64_t n = n0;
    for (; n + 16 <= n1; n += 16) tile(std::true_type{}, n, 16);
    if (n < n1) tile(std::false_type{}, n, static_cast<int>(n1 - n));
}

constexpr int kQChunk = 32;  // blocks per transposed chunk: 32 * 9 zmm = 18 KiB

template <int NR>
void q_chunk_rows(const QTile* tiles, int64_t b0, int64_t nbc, const PreparedInput& x, int t0, float* y, int64_t ldy,
                  __mmask16 m, const unsigned char* pf = nullptr, size_t pf_block_bytes = 0) {
    // pf: bytes to ask for into L2 while this runs, pf_block_bytes per block
    // (the next chunk of packed weights, so that its loads overlap this
    // chunk's arithmetic instead of following it).
    // After the first chunk, the sums so far come back from y and the FMA
    // chain goes on from them: the same operations in the same order as
    // q_direct's one chain over all blocks, so a row has the same bits in a
    // batch of any size (adding each chunk's own sum to y did not: greedy
    // verification of more than 16 rows could differ from plain decoding
    // once K passed kQChunk blocks).
    __m512 F[NR];
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) F[r] = b0 > 0 ? _mm512_maskz_loadu_ps(m, y + (t0 + r) * ldy) : _mm512_setzero_ps();
    for (int64_t b = 0; b < nbc; ++b) {
        if (pf != nullptr) {
            for (size_t o = 0; o < pf_block_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + o), _MM_HINT_T1);
            pf += pf_block_bytes;
        }
        q_block_rows<NR>(tiles[b], x, b0 + b, t0, F);
    }
    store_rows<NR>(F, y, ldy, t0, m, false);
}

template <int MAXR>
void q_chunk_rows_n(int nr, const QTile* tiles, int64_t b0, int64_t nbc, const PreparedInput& x, int t0, float* y,
                    int64_t ldy, __mmask16 m, const unsigned char* pf = nullptr, size_t pf_block_bytes = 0) {
    if constexpr (MAXR > 0) {
        if (nr == MAXR) return q_chunk_rows<MAXR>(tiles, b0, nbc, x, t0, y, ldy, m, pf, pf_block_bytes);
        return q_chunk_rows_n<MAXR - 1>(nr, tiles, b0, nbc, x, t0, y, ldy, m, pf, pf_block_bytes);
    }
}

// rows > 16: a chunk of transposed blocks is kept in L1 and reused by every
// group of 16 rows.
template <TensorType T>
void q_buffered(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                int64_t n1) {
    QTile tiles[kQChunk];  // transposed blocks b0 .. b0 + nbc of the current 16 weight rows
    const int64_t nb = x.n_blocks();
    const int rows = x.rows();
    for (int64_t n = n0; n < n1; n += 16) {
        const int nv = static_cast<int>(std::min<int64_t>(16, n1 - n));
        const __mmask16 m = tail_mask(nv);
        const QRows q = q_rows(rb);
        const unsigned char* w = W + n * rb;
        for (int64_t b0 = 0; b0 < nb; b0 += kQChunk) {
            const int64_t nbc = std::min<int64_t>(kQChunk, nb - b0);
            if (nv == 16) {
                for (int64_t b = 0; b < nbc; ++b) load_qtile<T, true>(w, q, nv, b0 + b, tiles[b]);
            } else {
                for (int64_t b = 0; b < nbc; ++b) load_qtile<T, false>(w, q, nv, b0 + b, tiles[b]);
            }
            int t0 = 0;
            for (; t0 + 16 <= rows; t0 += 16) q_chunk_rows<16>(tiles, b0, nbc, x, t0, y + n, ldy, m);
            if (t0 < rows) q_chunk_rows_n<15>(rows - t0, tiles, b0, nbc, x, t0, y + n, ldy, m);
        }
    }
}

template <TensorType T, int MAXR>
void q_direct_n(int nr, const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                int64_t n1) {
    if constexpr (MAXR > 0) {
        if (nr == MAXR) return q_direct<T, MAXR>(W, rb, x, y, ldy, n0, n1);
        return q_direct_n<T, MAXR - 1>(nr, W, rb, x, y, ldy, n0, n1);
    }
}

// ---------------------------------------- q8_0/q4_0, 16-row packed weights ---
// The same tiles as above, read from the packed layout (kernels.h) that
// holds them already transposed: per block, one 32-byte scale load and 8
// (q8_0) or 4 (q4_0) aligned 64-byte loads, where load_qtile spends ~40
// loads, inserts and shuffles. The integer and float steps are
// q_block_rows', so every output has matmul_quant's bits.

// Block b of a packed tile (nb blocks per row).
template <TensorType T>
SPECD_INLINE void load_packed_qtile(const unsigned char* tile, int64_t nb, int64_t b, QTile& t) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const PackedBlockOffsets at = packed_block_offsets(b, nb, 16, bb, 2);
    const unsigned char* c = tile + at.chunks;
    t.s = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + at.fp16)));
    if constexpr (T == TensorType::Q8_0) {
        SPECD_UNROLL
        for (int g = 0; g < 8; ++g) t.g[g] = _mm512_loadu_si512(c + 64 * g);
    } else {
        const __m512i low4 = _mm512_set1_epi8(0x0f);
        SPECD_UNROLL
        for (int g = 0; g < 4; ++g) {
            const __m512i d = _mm512_loadu_si512(c + 64 * g);
            t.g[g] = _mm512_and_si512(d, low4);
            t.g[g + 4] = _mm512_and_si512(_mm512_srli_epi16(d, 4), low4);
        }
    }
}

// rows <= 16: q_direct over packed tiles. The weights are one linear stream
// per thread now; the spread prefetch ahead stays (it still measured faster).
template <TensorType T, int NR>
void qp_direct(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    const int64_t nb = x.n_blocks();
    StreamPrefetch pf(W + n0 * rb);
    for (int64_t n = n0; n < n1; n += 16) {
        const unsigned char* w = W + n * rb;  // the tile of rows n..n+15
        __m512 F[NR];
        SPECD_UNROLL
        for (int r = 0; r < NR; ++r) F[r] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            pf.upto(w + static_cast<size_t>(b + 1) * 16 * bb);
            QTile t;
            load_packed_qtile<T>(w, nb, b, t);
            q_block_rows<NR>(t, x, b, 0, F);
        }
        store_rows<NR>(F, y + n, ldy, 0, 0xffff, false);
    }
}

template <TensorType T, int MAXR>
void qp_direct_n(int nr, const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                 int64_t n1) {
    if constexpr (MAXR > 0) {
        if (nr == MAXR) return qp_direct<T, MAXR>(W, rb, x, y, ldy, n0, n1);
        return qp_direct_n<T, MAXR - 1>(nr, W, rb, x, y, ldy, n0, n1);
    }
}

// rows > 16: q_buffered over packed tiles.
template <TensorType T>
void qp_buffered(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                 int64_t n1) {
    constexpr size_t bb = T == TensorType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    QTile tiles[kQChunk];  // blocks b0 .. b0 + nbc of the current 16 weight rows
    const int64_t nb = x.n_blocks();
    const int rows = x.rows();
    for (int64_t n = n0; n < n1; n += 16) {
        const unsigned char* w = W + n * rb;
        for (int64_t b0 = 0; b0 < nb; b0 += kQChunk) {
            const int64_t nbc = std::min<int64_t>(kQChunk, nb - b0);
            for (int64_t b = 0; b < nbc; ++b) load_packed_qtile<T>(w, nb, b0 + b, tiles[b]);
            // The packed weights are one linear stream: the next chunk (of
            // this tile or the next) starts where this one ends. The first
            // group of rows asks for it, a block's worth per block; without
            // this a step of 17 rows took 2x one of 16 (1.1B q8_0 construct,
            // Zen 4): each chunk's loads waited, then its arithmetic ran.
            const unsigned char* next = w + static_cast<size_t>(b0 + nbc) * 16 * bb;
            int t0 = 0;
            for (; t0 + 16 <= rows; t0 += 16) {
                q_chunk_rows<16>(tiles, b0, nbc, x, t0, y + n, ldy, 0xffff, t0 == 0 ? next : nullptr, 16 * bb);
            }
            if (t0 < rows) q_chunk_rows_n<15>(rows - t0, tiles, b0, nbc, x, t0, y + n, ldy, 0xffff, t0 == 0 ? next : nullptr, 16 * bb);
        }
    }
}

// ------------------------------------------------------ q8_0 on Intel AMX ---
// The integer products of q8_0 weights on AMX's tile unit, with the weights
// read as they lie: tile A is 16 weight rows of one block (16 x 32 int8,
// loaded straight from the tensor with the row stride, no transposition), B
// is 16 activation rows of that block packed once per call in the dword
// layout tdpbssd reads (8 x 16 dwords: B[j][r] = bytes 4j..4j+3 of row r),
// and C (16 x 16 int32) row i holds weight row i's sums against every
// activation row: exactly sum_j w * x, the integer the vpdpbusd chain ends
// with after its correction. The float steps are q_block_rows' on the same
// operands (the scale product s_i * d_r, then one FMA per block, blocks in
// the same order, chunks as q_buffered's), so every output has the same bits
// as without AMX; only the 16 x 16 result is transposed before it is stored.
// Measured on a Sapphire Rapids class Xeon, 2 threads, the 1.1B q8_0 target
// (specd bench --step-rows, SPECD_AMX=0/1, alternating in one run): 16 rows
// 80-86 ms against 95-97 without AMX, 32 and 64 rows 2-5 % faster; spreading
// the next tile's prefetch over the block loop then took 16 / 32 / 64 rows
// from 101-111 / 169-173 / 295 ms to 75-81 / 138 / 274-278 (a busier
// machine). What is left is the per-block rescale (16 fp16 scales and 16
// FMAs per block and activation group), not the tile unit; below
// kAmxMinRows the vpdpbusd chains won.

// Tiles: two blocks in flight, so one block's tile product overlaps the
// other's store and rescale (one at a time, each block waited ~100 cycles on
// its own tdpbssd -> tilestored -> load chain): 0/1 = A, 2/3 = B, 4/5 = C of
// the even and odd block. The last, shorter tile of weight rows gets its own
// configuration (nv rows of A and C).
struct alignas(64) AmxConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

SPECD_INLINE AmxConfig amx_config(int weight_rows) {
    AmxConfig c;
    for (int t = 0; t < 2; ++t) {
        c.rows[t] = static_cast<uint8_t>(weight_rows), c.colsb[t] = 32;      // A: weight rows x 32 int8
        c.rows[2 + t] = 8, c.colsb[2 + t] = 64;                              // B: 8 x 16 dwords
        c.rows[4 + t] = static_cast<uint8_t>(weight_rows), c.colsb[4 + t] = 64;  // C: weight rows x 16 int32
    }
    return c;
}

// The activations of one call in B's layout, per group g of 16 rows and
// block b: b_tiles (groups, n_blocks, 8, 16) int32, d (groups, n_blocks, 16)
// f32; rows past the last are zero.
struct AmxActs {
    std::vector<int32_t> b_tiles;
    std::vector<float> d;
    int groups = 0;
    int64_t nb = 0;
    const int32_t* b_tile(int g, int64_t b) const { return b_tiles.data() + (static_cast<size_t>(g) * nb + b) * 128; }
    const float* d_at(int g, int64_t b) const { return d.data() + (static_cast<size_t>(g) * nb + b) * 16; }
};

void pack_amx_acts(const PreparedInput& x, AmxActs& a) {
    const int rows = x.rows();
    a.nb = x.n_blocks();
    a.groups = (rows + 15) / 16;
    a.b_tiles.assign(static_cast<size_t>(a.groups) * a.nb * 128, 0);
    a.d.assign(static_cast<size_t>(a.groups) * a.nb * 16, 0.0f);
    for (int g = 0; g < a.groups; ++g) {
        const int nr = std::min(16, rows - 16 * g);
        for (int64_t b = 0; b < a.nb; ++b) {
            int32_t* bt = a.b_tiles.data() + (static_cast<size_t>(g) * a.nb + b) * 128;
            float* d = a.d.data() + (static_cast<size_t>(g) * a.nb + b) * 16;
            const int8_t* q = x.q8_block(b, 16 * g);  // row 16g + r at q + 32r
            const QuantMeta* m = x.q8_meta(b, 16 * g);
            for (int r = 0; r < nr; ++r) {
                for (int j = 0; j < 8; ++j) bt[j * 16 + r] = load_i32(q + 32 * r + 4 * j);
                d[r] = m[r].d;
            }
        }
    }
}

// F[i] (lane r) += block b's contribution of weight row i against activation
// rows 16g + r, from C (nv x 16 int32, stride 64 bytes) and the rows' fp16 scales.
SPECD_INLINE void amx_scale_rows(const int32_t* c, const unsigned char* w_scales, size_t rb, int nv, const float* d, __m512 F[16]) {
    const __m512 dv = _mm512_loadu_ps(d);  // std::vector: 16-byte aligned only
    SPECD_UNROLL
    for (int i = 0; i < 16; ++i) {
        if (i >= nv) break;
        uint16_t h;
        std::memcpy(&h, w_scales + static_cast<size_t>(i) * rb, 2);
        const __m512 s = _mm512_set1_ps(_cvtsh_ss(h));
        // s_i * d_r: the operands of q_block_rows' t.s * set1(d) (a product commutes exactly).
        F[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * i)), _mm512_mul_ps(s, dv), F[i]);
    }
}

// y[r][n + i] = F[i] lane r, r < nr, i < nv.
SPECD_INLINE void amx_store(const __m512 F[16], int nv, int nr, float* y, int64_t ldy) {
    alignas(64) float t[16 * 16];  // (16 weight rows, 16 activation rows)
    for (int i = 0; i < 16; ++i) _mm512_store_ps(t + 16 * i, F[i]);
    const __m512i column = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
    const __mmask16 m = tail_mask(nv);
    for (int r = 0; r < nr; ++r) {
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, column, t + r, 4);
        _mm512_mask_storeu_ps(y + r * ldy, m, v);
    }
}

// The inverse: F[i] lane r = y[r][n + i] (zero where r >= nr or i >= nv).
SPECD_INLINE void amx_load(__m512 F[16], int nv, int nr, const float* y, int64_t ldy) {
    alignas(64) float t[16 * 16] = {};  // (16 activation rows, 16 weight rows)
    const __mmask16 m = tail_mask(nv);
    for (int r = 0; r < nr; ++r) _mm512_store_ps(t + 16 * r, _mm512_maskz_loadu_ps(m, y + r * ldy));
    const __m512i column = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(16));
    for (int i = 0; i < 16; ++i) F[i] = _mm512_i32gather_ps(column, t + i, 4);
}

// Weight rows n .. n + nv against activation group g, blocks [b0, b1):
// F = 0, the blocks two at a time, then the store. c: (2, 16, 16) int32.
__attribute__((target("amx-tile,amx-int8"))) SPECD_INLINE void amx_tile_blocks(const unsigned char* w, size_t rb, int nv,
                                                                               const AmxActs& a, int g, int nr, int64_t b0,
                                                                               int64_t b1, float* y, int64_t ldy,
                                                                               bool accumulate, int32_t* c,
                                                                               const unsigned char* next, int next_rows) {
    // F[i] lane r: weight row n + i against activation row r. After the
    // first chunk it continues from the sums so far in y (as q_chunk_rows).
    __m512 F[16];
    if (accumulate) {
        amx_load(F, nv, nr, y, ldy);
    } else {
        SPECD_UNROLL
        for (int i = 0; i < 16; ++i) F[i] = _mm512_setzero_ps();
    }
    const long stride = static_cast<long>(rb);
    int64_t b = b0;
    for (; b + 1 < b1; b += 2) {
        const unsigned char* blk0 = w + static_cast<size_t>(b) * sizeof(BlockQ8_0);  // row 0's block b
        const unsigned char* blk1 = blk0 + sizeof(BlockQ8_0);
        // The next tile's bytes of these two blocks into L2, a few lines per
        // block pair: spread over the loop, the misses overlap the tile work
        // (one burst of the whole next tile, as q_direct does, stalled the
        // core on the full miss queue: a third of the samples at 32 rows).
        for (int i = 0; i < next_rows; ++i) {
            const unsigned char* p = next + static_cast<size_t>(i) * rb + static_cast<size_t>(b) * sizeof(BlockQ8_0);
            _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(p + 2 * sizeof(BlockQ8_0) - 1), _MM_HINT_T1);
        }
        _tile_loadd(0, blk0 + 2, stride);
        _tile_loadd(2, a.b_tile(g, b), 64);
        _tile_zero(4);
        _tile_loadd(1, blk1 + 2, stride);
        _tile_loadd(3, a.b_tile(g, b + 1), 64);
        _tile_zero(5);
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 1, 3);
        _tile_stored(4, c, 64);
        _tile_stored(5, c + 256, 64);
        amx_scale_rows(c, blk0, rb, nv, a.d_at(g, b), F);  // blocks in order: b, then b + 1
        amx_scale_rows(c + 256, blk1, rb, nv, a.d_at(g, b + 1), F);
    }
    if (b < b1) {
        const unsigned char* blk = w + static_cast<size_t>(b) * sizeof(BlockQ8_0);
        for (int i = 0; i < next_rows; ++i) {
            const unsigned char* p = next + static_cast<size_t>(i) * rb + static_cast<size_t>(b) * sizeof(BlockQ8_0);
            _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
            _mm_prefetch(reinterpret_cast<const char*>(p + sizeof(BlockQ8_0) - 1), _MM_HINT_T1);
        }
        _tile_loadd(0, blk + 2, stride);
        _tile_loadd(2, a.b_tile(g, b), 64);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_stored(4, c, 64);
        amx_scale_rows(c, blk, rb, nv, a.d_at(g, b), F);
    }
    amx_store(F, nv, nr, y, ldy);
}

__attribute__((target("amx-tile,amx-int8"))) void q8_amx(const unsigned char* W, size_t rb, const PreparedInput& x, float* y,
                                                          int64_t ldy, int64_t n0, int64_t n1) {
    thread_local AmxActs acts;
    pack_amx_acts(x, acts);
    alignas(64) int32_t c[2 * 16 * 16];  // (2, 16, 16) int32: C of the even and odd block
    const int rows = x.rows();
    const int64_t nb = x.n_blocks();
    // q_direct's order up to 16 rows (all blocks, then the store), q_buffered's beyond.
    const int64_t chunk = rows <= 16 ? nb : kQChunk;
    const AmxConfig full = amx_config(16);
    _tile_loadconfig(&full);
    for (int64_t n = n0; n < n1; n += 16) {
        const int nv = static_cast<int>(std::min<int64_t>(16, n1 - n));
        if (nv < 16) {  // the last tile of weight rows: tiles of nv rows, so no row past n1 is read
            const AmxConfig tail = amx_config(nv);
            _tile_loadconfig(&tail);
        }
        const unsigned char* w = W + n * rb;
        const unsigned char* next = w + 16 * rb;  // the next tile of weight rows, prefetched while this one runs
        const int next_rows = static_cast<int>(std::clamp<int64_t>(n1 - (n + 16), 0, 16));
        for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
            const int64_t b1 = std::min(nb, b0 + chunk);
            for (int g = 0; g < acts.groups; ++g) {
                const int nr = std::min(16, rows - 16 * g);
                float* yg = y + static_cast<int64_t>(16 * g) * ldy + n;
                amx_tile_blocks(w, rb, nv, acts, g, nr, b0, b1, yg, ldy, b0 > 0, c, next, g == 0 ? next_rows : 0);
            }
        }
    }
    _tile_release();
}

template <TensorType T>
void matmul_quant(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                  int64_t n1) {
    if (T == TensorType::Q8_0 && x.rows() >= kAmxMinRows && amx_enabled()) return q8_amx(W, rb, x, y, ldy, n0, n1);
    if (x.rows() <= 16) q_direct_n<T, 16>(x.rows(), W, rb, x, y, ldy, n0, n1);
    else q_buffered<T>(W, rb, x, y, ldy, n0, n1);
}

// ------------------------------------------ Q4_K / Q5_K / Q6_K, q8 activations ---
// One weight row at a time, lanes along K: the super-block's codes are
// decoded once into registers and used by up to kDequantRowGroup activation
// rows; vpdpbusd multiplies the unsigned codes with the rows' int8 values,
// giving per-lane sums of 4 weights that all share one scale.

// Q4_K's 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a super-block.
SPECD_INLINE __m128i q4_k_scale_bytes(const uint8_t* s) {
    uint32_t w0, w1, w2;
    std::memcpy(&w0, s, 4);
    std::memcpy(&w1, s + 4, 4);
    std::memcpy(&w2, s + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo), static_cast<int>(m_hi));
}

// 32 int8 activations of blocks a and b of one row, side by side.
SPECD_INLINE __m512i two_blocks(const int8_t* a, const int8_t* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

SPECD_INLINE float hsum8_512(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Prefetches a block's bytes kQPrefetchBytes ahead into L2 (a prefetch past
// the weights' end is harmless: prefetches never fault).
template <size_t Bytes>
SPECD_INLINE void prefetch_ahead(const void* p) {
    const char* c = static_cast<const char*>(p) + kQPrefetchBytes;
    SPECD_UNROLL
    for (size_t o = 0; o < Bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
}

// Q4_K or Q5_K (Block): for one weight row and every activation row t,
// sums[t * ld + 8 sb + j] = sum over block j of super-block sb of
// code * xq (unsigned codes 0..31, int8 activations): exact integers, so
// the tiles' float steps (kq_block_fma) can follow in their order.
template <class Block>
SPECD_INLINE void q4_k_row_sums(const Block* blocks, int64_t nsb, const PreparedInput& x, int32_t* sums, int64_t ld) {
    const int rows = x.rows();
    const int64_t st = static_cast<int64_t>(rows) * 32;  // int8 between blocks b and b+1 of one row
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    // z lanes 0,1,2,3 = blocks 0,1,4,5 and lanes 8,9,10,11 = blocks 2,3,6,7 (below): to block order.
    const __m512i order = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const Block& b = blocks[sb];
        prefetch_ahead<sizeof(Block)>(&b);
        const __m512i z0 = _mm512_loadu_si512(b.qs), z1 = _mm512_loadu_si512(b.qs + 64);
        __m512i lo0 = _mm512_and_si512(z0, low4), hi0 = _mm512_and_si512(_mm512_srli_epi16(z0, 4), low4);
        __m512i lo1 = _mm512_and_si512(z1, low4), hi1 = _mm512_and_si512(_mm512_srli_epi16(z1, 4), low4);
        if constexpr (std::is_same_v<Block, BlockQ5_K>) {
            // Fifth bits: group g's in bit g of qh[l] (l = its byte within the
            // 32); lanes 0..31 of lo0 hold group 0, lanes 32..63 group 2, ...
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
            const __m512i one = _mm512_set1_epi8(1);
            auto bit = [&](int a, int c) __attribute__((always_inline)) {
                const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(a)), _mm256_set1_epi16(static_cast<short>(c)), 1);
                return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh), one), 4);
            };
            lo0 = _mm512_or_si512(lo0, bit(0, 2));
            hi0 = _mm512_or_si512(hi0, bit(1, 3));
            lo1 = _mm512_or_si512(lo1, bit(4, 6));
            hi1 = _mm512_or_si512(hi1, bit(5, 7));
        }
        for (int t = 0; t < rows; ++t) {
            const int8_t* a = x.q8_block(8 * sb, t);  // block 8sb + g at a + g*st
            // Lanes 0..7: dwords of the first block named, 8..15: of the second.
            const __m512i i02 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo0, two_blocks(a, a + 2 * st));
            const __m512i i13 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi0, two_blocks(a + st, a + 3 * st));
            const __m512i i46 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo1, two_blocks(a + 4 * st, a + 6 * st));
            const __m512i i57 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi1, two_blocks(a + 5 * st, a + 7 * st));
            // Per 128-bit lane L: [i02, i13, i46, i57] summed over L's 4 dwords.
            const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi32(i02, i13), _mm512_unpackhi_epi32(i02, i13));
            const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi32(i46, i57), _mm512_unpackhi_epi32(i46, i57));
            const __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
            // Lanes 0+1 (first blocks) and 2+3 (second blocks).
            const __m512i z = _mm512_add_epi32(w, _mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(2, 3, 0, 1)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + t * ld + 8 * sb),
                                _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, z)));
        }
    }
}

// Q3_K's sixteen 6-bit scales minus 32, as int8.
SPECD_INLINE __m128i q3_k_scales(const uint8_t* s) {
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
// (32, 4) and Q2_K's mins are applied by the float steps (kq_block_fma).
template <class Block>
SPECD_INLINE void q6_k_row_sums(const Block* blocks, int64_t nsb, const PreparedInput& x, int32_t* sums, int64_t ld) {
    constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>, kQ2 = std::is_same_v<Block, BlockQ2_K>;
    const int rows = x.rows();
    const int64_t st = static_cast<int64_t>(rows) * 32;
    const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(0x03);
    // qh shifts per 16-bit lane: elements l (bytes 0..31) and l+32 (32..63).
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    // w lane 4L + k holds group 4k + L (below): to group order.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const Block& b = blocks[sb];
        prefetch_ahead<sizeof(Block)>(&b);
        __m512i v[4];  // 64 codes each: elements 64k .. 64k+63 of the super-block
        if constexpr (kQ2) {
            // Elements 32j + l of half h: bits 2j of qs[32h + l].
            SPECD_UNROLL
            for (int h = 0; h < 2; ++h) {
                const __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h)));
                SPECD_UNROLL
                for (int p = 0; p < 2; ++p) {
                    const __m512i sq = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(4 * p)),
                                                          _mm256_set1_epi16(static_cast<short>(4 * p + 2)), 1);
                    v[2 * h + p] = _mm512_and_si512(_mm512_srlv_epi16(qs, sq), low2);
                }
            }
        } else if constexpr (kQ3) {
            // Elements 32j + l of half h: bits 2j of qs[32h + l], bit 4h + j of hmask[l].
            const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask)));
            const __m512i one = _mm512_set1_epi8(1);
            SPECD_UNROLL
            for (int h = 0; h < 2; ++h) {
                const __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h)));
                SPECD_UNROLL
                for (int p = 0; p < 2; ++p) {  // j = 2p (lanes 0..31), 2p + 1 (lanes 32..63)
                    const __m512i sq = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(4 * p)),
                                                          _mm256_set1_epi16(static_cast<short>(4 * p + 2)), 1);
                    const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(4 * h + 2 * p)),
                                                          _mm256_set1_epi16(static_cast<short>(4 * h + 2 * p + 1)), 1);
                    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(qs, sq), low2);
                    const __m512i hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, sh), one), 2);
                    v[2 * h + p] = _mm512_or_si512(lo, hi);
                }
            }
        } else {
            SPECD_UNROLL
            for (int h = 0; h < 2; ++h) {
                const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
                const __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), low2), 4);
                const __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), low2), 4);
                v[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), h01);
                v[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), h23);
            }
        }
        for (int t = 0; t < rows; ++t) {
            const int8_t* a = x.q8_block(8 * sb, t);  // block 8sb + g at a + g*st
            __m512i iq[4];  // iq[k] lanes 4L..4L+3: group 4k + L's dwords
            SPECD_UNROLL
            for (int k = 0; k < 4; ++k) iq[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[k], two_blocks(a + 2 * k * st, a + (2 * k + 1) * st));
            // Per 128-bit lane L: [iq0, iq1, iq2, iq3] summed over L's 4 dwords.
            const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi32(iq[0], iq[1]), _mm512_unpackhi_epi32(iq[0], iq[1]));
            const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi32(iq[2], iq[3]), _mm512_unpackhi_epi32(iq[2], iq[3]));
            const __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
            _mm512_storeu_si512(sums + t * ld + 16 * sb, _mm512_permutexvar_epi32(order, w));
        }
    }
}

// ------------------------ K-quants, several activation rows: 16-row tiles ---
// Here, as for q4_0/q8_0, one
// super-block of 16 weight rows is decoded once into a transposed tile
// (lane i = weight row i) and each activation row then costs, per 32
// weights, 8 vpdpbusd with broadcast activation dwords and 3-4 FMAs:
//   x_w = s_g * code - m_g over groups g of 16 (Q2_K, Q3_K, Q6_K; offsets
//   as m_g = offset * s_g) or 32 (Q4_K, Q5_K), so per block of 32 and
//   activation row: dot = dx * sum_g s_g * sum(code * xq) - sum_g m_g * (dx * sum_g(xq)),
// the last factor being the prepared half sums.

struct KTile {
    __m512i c[8][8];  // block j of the super-block, dword g: lane i = codes 4g..4g+3 of weight row i (unsigned)
    __m512 s[16];     // group h (of 16; Q4_K/Q5_K: s[j] per block of 32): lane i = weight row i's scale
    __m512 m[16];     // as s: lane i = the min (or offset * scale), times the group's activation sum in kq_block_fma
};

// Lane i, dword g = bytes off + 4g .. off + 4g + 3 of row rp[i] (16 bytes per row).
SPECD_INLINE void transpose16x16(const unsigned char* const rp[16], size_t off, __m512i d[4]) {
    auto ld = [&](int i) __attribute__((always_inline)) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rp[i] + off)); };
    __m512i z[4];  // 128-bit lane L of z[m] = row 4L + m
    SPECD_UNROLL
    for (int m = 0; m < 4; ++m) {
        __m512i v = _mm512_castsi128_si512(ld(m));
        v = _mm512_inserti32x4(v, ld(4 + m), 1);
        v = _mm512_inserti32x4(v, ld(8 + m), 2);
        z[m] = _mm512_inserti32x4(v, ld(12 + m), 3);
    }
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    d[0] = _mm512_unpacklo_epi64(a0, a2);
    d[1] = _mm512_unpackhi_epi64(a0, a2);
    d[2] = _mm512_unpacklo_epi64(a1, a3);
    d[3] = _mm512_unpackhi_epi64(a1, a3);
}

// The same for 32 bytes per row: d[0..8).
SPECD_INLINE void transpose16x32(const unsigned char* const rp[16], size_t off, __m512i d[8]) {
    transpose16x16(rp, off, d);
    transpose16x16(rp, off + 16, d + 4);
}

// 16 fp16 values, one at rp[i] + off, as floats.
SPECD_INLINE __m512 fp16x16(const unsigned char* const rp[16], size_t off) {
    alignas(32) uint16_t h[16];
    SPECD_UNROLL
    for (int i = 0; i < 16; ++i) std::memcpy(&h[i], rp[i] + off, 2);
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
}

// Byte e (0..15) of each lane's 16 bytes in d[4], unsigned or signed, as float.
SPECD_INLINE __m512 byte_u(const __m512i d[4], int e) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d[e / 4], 8 * (e % 4)), _mm512_set1_epi32(0xff)));
}
SPECD_INLINE __m512 byte_s(const __m512i d[4], int e) {
    return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d[e / 4], 24 - 8 * (e % 4)), 24));
}

// Bits [sh, sh + width) of every byte of v, moved to bit `to`: shifts by
// 16-bit lanes are safe because the mask keeps only bits from the same byte.
SPECD_INLINE __m512i bits_at(__m512i v, int sh, int mask, int to) {
    const __m512i b = _mm512_and_si512(_mm512_srli_epi16(v, sh), _mm512_set1_epi8(static_cast<char>(mask)));
    return to == 0 ? b : _mm512_slli_epi16(b, to);
}

// Whether the block type's scale groups are 16 weights (else 32).
template <class Block>
constexpr bool kGroups16 = !std::is_same_v<Block, BlockQ4_K> && !std::is_same_v<Block, BlockQ5_K>;

// Where decode_ktile reads a super-block of 16 weight rows, as 16-lane
// vectors (lane i = weight row i), at byte offsets o within the rows:
//   dwords16(o, d): d[g] = bytes o + 4g .. o + 4g + 3 (g < 4); dwords32: g < 8
//   halves(o): the fp16 at o, as floats
//   q4k_scales(o, sm): Q4_K/Q5_K's 12 scale bytes at o decoded, sm[0..4) =
//     the 8 scales, then the 8 mins, one byte each (q4_k_scale_bytes' order)
//   q3k_scales(o, sc): Q3_K's 16 scales minus 32 (q3_k_scales' order)
// RowSrc: the file's layout (16 row pointers; transposes per call).
struct RowSrc {
    const unsigned char* const* rp;  // (16) weight row i
    SPECD_INLINE void dwords16(size_t o, __m512i d[4]) const { transpose16x16(rp, o, d); }
    SPECD_INLINE void dwords32(size_t o, __m512i d[8]) const { transpose16x32(rp, o, d); }
    SPECD_INLINE __m512 halves(size_t o) const { return fp16x16(rp, o); }
    template <class Decode>
    SPECD_INLINE void scale_bytes(size_t o, __m512i out[4], Decode decode) const {
        alignas(64) uint8_t buf[16][16];  // per row: the decoded bytes
        const unsigned char* bp[16];
        SPECD_UNROLL
        for (int i = 0; i < 16; ++i) {
            _mm_store_si128(reinterpret_cast<__m128i*>(buf[i]), decode(rp[i] + o));
            bp[i] = buf[i];
        }
        transpose16x16(bp, 0, out);
    }
    SPECD_INLINE void q4k_scales(size_t o, __m512i sm[4]) const { scale_bytes(o, sm, q4_k_scale_bytes); }
    SPECD_INLINE void q3k_scales(size_t o, __m512i sc[4]) const { scale_bytes(o, sc, q3_k_scales); }
};

// PackedSrc: one super-block of a packed tile (kernels.h pack_weights): the
// block's bytes as 64-byte chunks q (lane i = row i's bytes 4q..4q+3),
// except a trailing fp16 (Q6_K's, Q3_K's d, at tail_at) kept apart as 16
// fp16 values. Every read is a load and a few lane-wise bit operations.
struct PackedSrc {
    const unsigned char* body;  // (bytes without the tail / 4) chunks of 64 bytes
    const unsigned char* tail;  // 16 fp16, or null
    size_t tail_at;             // the tail's offset in the block (SIZE_MAX: none)
    SPECD_INLINE __m512i chunk(size_t q) const { return _mm512_loadu_si512(body + 64 * q); }
    SPECD_INLINE void dwords16(size_t o, __m512i d[4]) const {
        SPECD_UNROLL
        for (int g = 0; g < 4; ++g) d[g] = chunk(o / 4 + static_cast<size_t>(g));
    }
    SPECD_INLINE void dwords32(size_t o, __m512i d[8]) const {
        SPECD_UNROLL
        for (int g = 0; g < 8; ++g) d[g] = chunk(o / 4 + static_cast<size_t>(g));
    }
    SPECD_INLINE __m512 halves(size_t o) const {
        if (o == tail_at) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tail)));
        __m512i c = chunk(o / 4);
        if (o % 4 != 0) c = _mm512_srli_epi32(c, 16);
        return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(c));
    }
    SPECD_INLINE void q4k_scales(size_t o, __m512i sm[4]) const {
        const __m512i w0 = chunk(o / 4), w1 = chunk(o / 4 + 1), w2 = chunk(o / 4 + 2);
        const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303);
        sm[0] = _mm512_and_si512(w0, m6);
        sm[1] = _mm512_or_si512(_mm512_and_si512(w2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4));
        sm[2] = _mm512_and_si512(w1, m6);
        sm[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m4),
                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4));
    }
    SPECD_INLINE void q3k_scales(size_t o, __m512i sc[4]) const {
        const __m512i w0 = chunk(o / 4), w1 = chunk(o / 4 + 1), w2 = chunk(o / 4 + 2);
        const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303), k32 = _mm512_set1_epi8(32);
        auto part = [&](__m512i lo, int lo_sh, int hi_sh) __attribute__((always_inline)) {
            const __m512i l = _mm512_and_si512(lo_sh ? _mm512_srli_epi32(lo, lo_sh) : lo, m4);
            const __m512i h = _mm512_slli_epi32(_mm512_and_si512(hi_sh ? _mm512_srli_epi32(w2, hi_sh) : w2, m2), 4);
            return _mm512_sub_epi8(_mm512_or_si512(l, h), k32);
        };
        sc[0] = part(w0, 0, 0);
        sc[1] = part(w1, 0, 2);
        sc[2] = part(w0, 4, 4);
        sc[3] = part(w1, 4, 6);
    }
};

// Decodes the super-block at byte `off` of src's 16 weight rows into t: the
// scales and mins, and (kCodes) the codes.
template <class Block, bool kCodes = true, class Src>
SPECD_INLINE void decode_ktile_from(const Src& src, size_t off, KTile& t);

// Super-block `sb` of the 16 weight rows at rp (rows past the last valid one
// repeat it), in the file's layout.
template <class Block, bool kCodes = true>
SPECD_INLINE void decode_ktile(const unsigned char* const rp[16], int64_t sb, KTile& t) {
    decode_ktile_from<Block, kCodes>(RowSrc{rp}, static_cast<size_t>(sb) * sizeof(Block), t);
}

template <class Block, bool kCodes, class Src>
SPECD_INLINE void decode_ktile_from(const Src& src, size_t off, KTile& t) {
    if constexpr (std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>) {
        constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
        const __m512 d = src.halves(off + offsetof(Block, d)), dmin = src.halves(off + offsetof(Block, dmin));
        __m512i sm[4];  // the 8 scales, then the 8 mins
        src.q4k_scales(off + offsetof(Block, scales), sm);
        SPECD_UNROLL
        for (int j = 0; j < 8; ++j) {
            t.s[j] = _mm512_mul_ps(d, byte_u(sm, j));
            t.m[j] = _mm512_mul_ps(dmin, byte_u(sm, 8 + j));
        }
        if constexpr (!kCodes) return;
        __m512i qh[8];
        if constexpr (kQ5) src.dwords32(off + offsetof(BlockQ5_K, qh), qh);
        SPECD_UNROLL
        for (int st = 0; st < 4; ++st) {  // 64-weight stretches: low nibbles = block 2st, high = 2st + 1
            __m512i raw[8];
            src.dwords32(off + offsetof(Block, qs) + 32 * st, raw);
            SPECD_UNROLL
            for (int g = 0; g < 8; ++g) {
                __m512i lo = bits_at(raw[g], 0, 0x0f, 0), hi = bits_at(raw[g], 4, 0x0f, 0);
                if constexpr (kQ5) {  // fifth bit of block j: bit j of qh
                    lo = _mm512_or_si512(lo, bits_at(qh[g], 2 * st, 1, 4));
                    hi = _mm512_or_si512(hi, bits_at(qh[g], 2 * st + 1, 1, 4));
                }
                t.c[2 * st][g] = lo;
                t.c[2 * st + 1][g] = hi;
            }
        }
    } else if constexpr (std::is_same_v<Block, BlockQ6_K>) {
        const __m512 d = src.halves(off + offsetof(BlockQ6_K, d));
        __m512i sc[4];
        src.dwords16(off + offsetof(BlockQ6_K, scales), sc);
        SPECD_UNROLL
        for (int h = 0; h < 16; ++h) {
            t.s[h] = _mm512_mul_ps(d, byte_s(sc, h));
            t.m[h] = _mm512_mul_ps(_mm512_set1_ps(32.0f), t.s[h]);  // codes 0..63 carry +32
        }
        if constexpr (!kCodes) return;
        SPECD_UNROLL
        for (int hf = 0; hf < 2; ++hf) {  // halves of 128: ql bytes 64hf.. and 64hf+32.., qh bytes 32hf..
            __m512i a[8], b[8], c[8];
            src.dwords32(off + offsetof(BlockQ6_K, ql) + 64 * hf, a);
            src.dwords32(off + offsetof(BlockQ6_K, ql) + 64 * hf + 32, b);
            src.dwords32(off + offsetof(BlockQ6_K, qh) + 32 * hf, c);
            SPECD_UNROLL
            for (int g = 0; g < 8; ++g) {
                t.c[4 * hf + 0][g] = _mm512_or_si512(bits_at(a[g], 0, 0x0f, 0), bits_at(c[g], 0, 3, 4));
                t.c[4 * hf + 1][g] = _mm512_or_si512(bits_at(b[g], 0, 0x0f, 0), bits_at(c[g], 2, 3, 4));
                t.c[4 * hf + 2][g] = _mm512_or_si512(bits_at(a[g], 4, 0x0f, 0), bits_at(c[g], 4, 3, 4));
                t.c[4 * hf + 3][g] = _mm512_or_si512(bits_at(b[g], 4, 0x0f, 0), bits_at(c[g], 6, 3, 4));
            }
        }
    } else if constexpr (std::is_same_v<Block, BlockQ3_K>) {
        const __m512 d = src.halves(off + offsetof(BlockQ3_K, d));
        __m512i sc[4];  // the 16 scales minus 32, int8
        src.q3k_scales(off + offsetof(BlockQ3_K, scales), sc);
        SPECD_UNROLL
        for (int h = 0; h < 16; ++h) {
            t.s[h] = _mm512_mul_ps(d, byte_s(sc, h));
            t.m[h] = _mm512_mul_ps(_mm512_set1_ps(4.0f), t.s[h]);  // codes 0..7 carry +4
        }
        if constexpr (!kCodes) return;
        __m512i hm[8];
        src.dwords32(off + offsetof(BlockQ3_K, hmask), hm);
        SPECD_UNROLL
        for (int hf = 0; hf < 2; ++hf) {
            __m512i q[8];
            src.dwords32(off + offsetof(BlockQ3_K, qs) + 32 * hf, q);
            SPECD_UNROLL
            for (int jj = 0; jj < 4; ++jj) {
                SPECD_UNROLL
                for (int g = 0; g < 8; ++g) {
                    t.c[4 * hf + jj][g] = _mm512_or_si512(bits_at(q[g], 2 * jj, 3, 0), bits_at(hm[g], 4 * hf + jj, 1, 2));
                }
            }
        }
    } else {  // Q2_K
        const __m512 d = src.halves(off + offsetof(BlockQ2_K, d)), dmin = src.halves(off + offsetof(BlockQ2_K, dmin));
        __m512i sc[4];
        src.dwords16(off + offsetof(BlockQ2_K, scales), sc);
        SPECD_UNROLL
        for (int h = 0; h < 16; ++h) {
            const __m512i v = _mm512_srli_epi32(sc[h / 4], 8 * (h % 4));
            t.s[h] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0f))));
            t.m[h] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 4), _mm512_set1_epi32(0x0f))));
        }
        if constexpr (!kCodes) return;
        SPECD_UNROLL
        for (int hf = 0; hf < 2; ++hf) {
            __m512i q[8];
            src.dwords32(off + offsetof(BlockQ2_K, qs) + 32 * hf, q);
            SPECD_UNROLL
            for (int jj = 0; jj < 4; ++jj) {
                SPECD_UNROLL
                for (int g = 0; g < 8; ++g) t.c[4 * hf + jj][g] = bits_at(q[g], 2 * jj, 3, 0);
            }
        }
    }
}

// One block j (of 32 weights) of a super-block added to f, lane i = weight
// row i: i0, i1 = sum(code * xq) over its first and second 16 weights (or
// any split of the block's sum: Q4_K/Q5_K add them first); dx and hs of the
// activation row. The one order every K-quant path takes (tiles and the
// one-row stream), so a row's result has the same bits in any batch.
template <class Block>
SPECD_INLINE __m512 kq_block_fma(__m512 f, const KTile& t, int j, __m512i i0, __m512i i1, float dx_s, const HalfSums& hs) {
    const __m512 dx = _mm512_set1_ps(dx_s);
    if constexpr (kGroups16<Block>) {
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(t.s[2 * j], dx), f);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(t.s[2 * j + 1], dx), f);
        f = _mm512_fnmadd_ps(t.m[2 * j], _mm512_set1_ps(hs.lo), f);
        return _mm512_fnmadd_ps(t.m[2 * j + 1], _mm512_set1_ps(hs.hi), f);
    } else {
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), _mm512_mul_ps(t.s[j], dx), f);
        return _mm512_fnmadd_ps(t.m[j], _mm512_set1_ps(hs.lo + hs.hi), f);
    }
}

// y[t][0..16) (+)= activation rows t0 .. t0+NR against super-block sb's tile.
template <class Block, int NR>
SPECD_INLINE void ktile_rows(const KTile& t, const PreparedInput& x, int64_t sb, int t0, float* y, int64_t ldy, __mmask16 m,
                             bool accumulate) {
    __m512 F[NR];
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) F[r] = accumulate ? _mm512_maskz_loadu_ps(m, y + (t0 + r) * ldy) : _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * sb + j;
        const int8_t* xq = x.q8_block(b, t0);      // row t0 + r at xq + 32r
        const QuantMeta* xm = x.q8_meta(b, t0);    // row t0 + r at xm + r
        const HalfSums* hs = x.half_sums(b, t0);   // row t0 + r at hs + r
        SPECD_UNROLL
        for (int r = 0; r < NR; ++r) {
            const int8_t* q = xq + 32 * r;
            __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
            SPECD_UNROLL
            for (int g = 0; g < 4; ++g) {
                i0 = dpbusd_bcast(i0, t.c[j][g], q + 4 * g);
                i1 = dpbusd_bcast(i1, t.c[j][g + 4], q + 16 + 4 * g);
            }
            F[r] = kq_block_fma<Block>(F[r], t, j, i0, i1, xm[r].d, hs[r]);
        }
    }
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + (t0 + r) * ldy, m, F[r]);
}

constexpr int kKTileRows = 8;  // activation rows whose accumulators stay in registers

template <class Block, int NR>
SPECD_INLINE void ktile_rows_n(int nr, const KTile& t, const PreparedInput& x, int64_t sb, int t0, float* y, int64_t ldy,
                               __mmask16 m, bool accumulate) {
    if constexpr (NR > 0) {
        if (nr == NR) return ktile_rows<Block, NR>(t, x, sb, t0, y, ldy, m, accumulate);
        ktile_rows_n<Block, NR - 1>(nr, t, x, sb, t0, y, ldy, m, accumulate);
    }
}

// 16 weight rows at a time: each super-block is decoded once, then used by
// every activation row (y accumulates across super-blocks).
template <class Block>
void kq_tile_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    const int64_t nsb = x.k() / kSuperBlock;
    const int rows = x.rows();
    KTile t;
    for (int64_t n = n0; n < n1; n += 16) {
        const int nv = static_cast<int>(std::min<int64_t>(16, n1 - n));
        const __mmask16 m = tail_mask(nv);
        const unsigned char* rp[16];  // weight row n + i; rows past n1 repeat the last (never stored)
        for (int i = 0; i < 16; ++i) rp[i] = W + (n + std::min(i, nv - 1)) * static_cast<int64_t>(rb);
        for (int64_t sb = 0; sb < nsb; ++sb) {
            // 16 interleaved streams: fetch the next super-blocks into L2 ahead
            // of the hardware prefetcher (a prefetch past the end never faults).
            for (int i = 0; i < nv; ++i) {
                const char* p = reinterpret_cast<const char*>(rp[i]) + (sb + 2) * static_cast<int64_t>(sizeof(Block));
                SPECD_UNROLL
                for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
            }
            decode_ktile<Block>(rp, sb, t);
            int t0 = 0;
            for (; t0 + kKTileRows <= rows; t0 += kKTileRows) ktile_rows<Block, kKTileRows>(t, x, sb, t0, y + n, ldy, m, sb > 0);
            if (t0 < rows) ktile_rows_n<Block, kKTileRows - 1>(rows - t0, t, x, sb, t0, y + n, ldy, m, sb > 0);
        }
    }
}

// One weight row at a time (lanes along K, a pure weight stream: the
// fastest shape for one activation row), in two passes per 16 weight rows:
// each row's integer group sums for every activation row into a buffer,
// then the tiles' float steps (kq_block_fma) over those sums transposed, so
// each output has the tiles' bits. (Interleaving the float pass with the
// next group's integer pass, or prefetching the next group during it, was
// no faster.)
template <class Block>
void kq_stream_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    constexpr int G = kGroups16<Block> ? 16 : 8;  // integer sums per super-block
    const int64_t nsb = x.k() / kSuperBlock;
    const int rows = x.rows();
    const int64_t ld = nsb * G;  // sums of one (weight row, activation row)
    thread_local std::vector<int32_t> sums;  // (16, rows, nsb * G): weight row i of the 16, activation row t
    if (sums.size() < static_cast<size_t>(16 * rows * ld)) sums.resize(static_cast<size_t>(16 * rows * ld));
    KTile t;
    for (int64_t n = n0; n < n1; n += 16) {
        const int nv = static_cast<int>(std::min<int64_t>(16, n1 - n));
        const unsigned char* rp[16];  // weight row n + i; rows past n1 repeat the last (never stored)
        for (int i = 0; i < 16; ++i) rp[i] = W + (n + std::min(i, nv - 1)) * static_cast<int64_t>(rb);
        for (int i = 0; i < nv; ++i) {
            const Block* blocks = reinterpret_cast<const Block*>(rp[i]);
            if constexpr (kGroups16<Block>) q6_k_row_sums<Block>(blocks, nsb, x, &sums[static_cast<size_t>(i * rows) * ld], ld);
            else q4_k_row_sums<Block>(blocks, nsb, x, &sums[static_cast<size_t>(i * rows) * ld], ld);
        }
        for (int r = 0; r < rows; ++r) {
            const unsigned char* sp[16];  // the sums of weight row n + i against activation row r
            for (int i = 0; i < 16; ++i) sp[i] = reinterpret_cast<const unsigned char*>(&sums[static_cast<size_t>(std::min(i, nv - 1) * rows + r) * ld]);
            __m512 f = _mm512_setzero_ps();
            for (int64_t sb = 0; sb < nsb; ++sb) {
                decode_ktile<Block, false>(rp, sb, t);
                __m512i is[16];  // is[g] lane i = sum g of super-block sb, weight row i
                const size_t off = static_cast<size_t>(sb * G) * sizeof(int32_t);
                transpose16x32(sp, off, is);
                if constexpr (G == 16) transpose16x32(sp, off + 32, is + 8);
                SPECD_UNROLL
                for (int j = 0; j < 8; ++j) {
                    const int64_t b = 8 * sb + j;
                    if constexpr (G == 16) f = kq_block_fma<Block>(f, t, j, is[2 * j], is[2 * j + 1], x.q8_meta(b, r)->d, *x.half_sums(b, r));
                    else f = kq_block_fma<Block>(f, t, j, is[j], _mm512_setzero_si512(), x.q8_meta(b, r)->d, *x.half_sums(b, r));
                }
            }
            _mm512_mask_storeu_ps(y + r * ldy + n, tail_mask(nv), f);
        }
    }
}

// Packed K-quant weights (kernels.h pack_weights): the tiles' path for any
// number of activation rows, each super-block of 16 weight rows decoded
// from aligned chunks instead of transposed from 16 rows (for one row the
// file layout's stream path is faster; packed, the tiles are). Same bits
// as kq_tile_matmul and kq_stream_matmul.
template <class Block>
void kq_packed_matmul(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
    constexpr size_t bb = sizeof(Block);
    constexpr size_t tail_at = std::is_same_v<Block, BlockQ6_K>   ? offsetof(BlockQ6_K, d)
                               : std::is_same_v<Block, BlockQ3_K> ? offsetof(BlockQ3_K, d)
                                                                   : SIZE_MAX;
    constexpr size_t apart = tail_at == SIZE_MAX ? 0 : 2;
    const int64_t nsb = x.k() / kSuperBlock;
    const int rows = x.rows();
    // As qp_direct: a linear stream, prefetched spread over the super-blocks.
    StreamPrefetch pf(W + n0 * rb);
    KTile t;
    for (int64_t n = n0; n < n1; n += 16) {
        const unsigned char* w = W + n * rb;  // the tile of rows n..n+15
        for (int64_t sb = 0; sb < nsb; ++sb) {
            pf.upto(w + static_cast<size_t>(sb + 1) * 16 * bb);
            const PackedBlockOffsets at = packed_block_offsets(sb, nsb, 16, bb, apart);
            const PackedSrc src{w + at.chunks, apart == 0 ? nullptr : w + at.fp16, tail_at};
            decode_ktile_from<Block>(src, 0, t);
            int t0 = 0;
            for (; t0 + kKTileRows <= rows; t0 += kKTileRows) ktile_rows<Block, kKTileRows>(t, x, sb, t0, y + n, ldy, 0xffff, sb > 0);
            if (t0 < rows) ktile_rows_n<Block, kKTileRows - 1>(rows - t0, t, x, sb, t0, y + n, ldy, 0xffff, sb > 0);
        }
    }
}

// The stream for one activation row, tiles for more: both give the same
// bits (kq_block_fma), so the choice is speed only.
template <class Block>
void kq_matmul_auto(const unsigned char* W, size_t rb, const PreparedInput& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    // Q2_K's stream (codes of 2 bits: the weight stream is short, the float
    // steps dominate) was slower than its tiles even for one row.
    if (x.rows() < kKTileMinRows && !std::is_same_v<Block, BlockQ2_K>) kq_stream_matmul<Block>(W, rb, x, y, ldy, n0, n1);
    else kq_tile_matmul<Block>(W, rb, x, y, ldy, n0, n1);
}
// ------------------------- q5_0 / q5_1 / iq4_nl (and iq4_xs), q8 activations ---
// Most activation rows whose accumulators stay in registers.
constexpr int kKqRows = 8;

// The 32-weight types llama.cpp falls back to (rows not a multiple of 256),
// one weight row at a time, two blocks per vpdpbusd. Per block b the codes
// are unsigned bytes and x_j = d_b * code_j + c_b:
//   q5_0:   code = q (0..31),             c = -16 d
//   q5_1:   code = q (0..31),             c = m
//   iq4_nl: code = value + 128 (1..241),  c = -128 d
// so dot(w, x) = sum_b dx_b * (d_b * sum(code * xq) + c_b * sum(xq)).

template <TensorType T>
SPECD_INLINE __m256i block32_codes(const unsigned char* p, float& d, float& c) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    if constexpr (T == TensorType::IQ4_NL) {
        const BlockIQ4_NL& b = *reinterpret_cast<const BlockIQ4_NL*>(p);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
        const __m128i table = _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
                                            static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
                                            static_cast<char>(197), static_cast<char>(217), static_cast<char>(241));
        d = _cvtsh_ss(b.d);
        c = -128.0f * d;
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
        return _mm256_or_si256(nibbles, _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10)));  // bit j -> byte j's 16
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
SPECD_INLINE __m256i group_codes(const unsigned char* w, int64_t b, float& d, float& c) {
    if constexpr (T == TensorType::IQ4_XS) {
        const BlockIQ4_XS& s = reinterpret_cast<const BlockIQ4_XS*>(w)[b / 8];
        const int g = static_cast<int>(b % 8);
        const int ls = ((s.scales_l[g / 2] >> (4 * (g % 2))) & 0x0f) | (((s.scales_h >> (2 * g)) & 3) << 4);
        d = _cvtsh_ss(s.d) * static_cast<float>(ls - 32);
        c = -128.0f * d;
        const __m128i low4 = _mm_set1_epi8(0x0f);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.qs + 16 * g));
        const __m128i table = _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
                                            static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
                                            static_cast<char>(197), static_cast<char>(217), static_cast<char>(241));
        return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), low4)),
                                _mm_shuffle_epi8(table, _mm_and_si128(qs, low4)));
    } else {
        return block32_codes<T>(w + b * block32_bytes<T>(), d, c);
    }
}

template <TensorType T, int NR>
SPECD_INLINE void q32_row(const unsigned char* w, int64_t nb, const PreparedInput& x, int t0, float* y, int64_t ldy) {
    __m512 acc[NR];   // d*dx * sum(code*xq), per lane
    float cacc[NR];   // c*dx * sum(xq)
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) {
        acc[r] = _mm512_setzero_ps();
        cacc[r] = 0.0f;
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch(reinterpret_cast<const char*>(w + b * kBytesPer32<T>) + kQPrefetchBytes, _MM_HINT_T1);
        float d0, c0, d1, c1;
        const __m256i k0 = group_codes<T>(w, b, d0, c0);
        const __m256i k1 = group_codes<T>(w, b + 1, d1, c1);
        const __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(k0), k1, 1);
        SPECD_UNROLL
        for (int r = 0; r < NR; ++r) {
            const QuantMeta m0 = *x.q8_meta(b, t0 + r), m1 = *x.q8_meta(b + 1, t0 + r);
            const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, two_blocks(x.q8_block(b, t0 + r), x.q8_block(b + 1, t0 + r)));
            const __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(d0 * m0.d), _mm256_set1_ps(d1 * m1.d), 1);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[r]);
            cacc[r] += c0 * m0.d * static_cast<float>(m0.corr) + c1 * m1.d * static_cast<float>(m1.corr);
        }
    }
    if (b < nb) {  // an odd last block
        float d0, c0;
        const __m256i k0 = group_codes<T>(w, b, d0, c0);
        SPECD_UNROLL
        for (int r = 0; r < NR; ++r) {
            const QuantMeta m0 = *x.q8_meta(b, t0 + r);
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q8_block(b, t0 + r)));
            const __m256i isum = _mm256_dpbusd_epi32(_mm256_setzero_si256(), k0, a);
            const __m512 scale = _mm512_castps256_ps512(_mm256_set1_ps(d0 * m0.d));
            acc[r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_castsi256_si512(isum)), scale, acc[r], 0x00ff);
            cacc[r] += c0 * m0.d * static_cast<float>(m0.corr);
        }
    }
    SPECD_UNROLL
    for (int r = 0; r < NR; ++r) y[(t0 + r) * ldy] = _mm512_reduce_add_ps(acc[r]) + cacc[r];
}

template <TensorType T, int NR>
SPECD_INLINE void q32_rows_n(int nr, const unsigned char* w, int64_t nb, const PreparedInput& x, int t0, float* y, int64_t ldy) {
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

void matmul_avx512(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
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
        default: matmul_dequant_avx512(type, W, x, y, ldy, n0, n1); return;
    }
}

void matmul_packed_avx512(TensorType type, const void* W_packed, const PreparedInput& x, float* y, int64_t ldy,
                          int64_t n0, int64_t n1) {
    const unsigned char* w = static_cast<const unsigned char*>(W_packed);
    const size_t rb = tensor_row_bytes(type, x.k());
    switch (type) {
        case TensorType::Q4_K: return kq_packed_matmul<BlockQ4_K>(w, rb, x, y, ldy, n0, n1);
        case TensorType::Q5_K: return kq_packed_matmul<BlockQ5_K>(w, rb, x, y, ldy, n0, n1);
        case TensorType::Q6_K: return kq_packed_matmul<BlockQ6_K>(w, rb, x, y, ldy, n0, n1);
        case TensorType::Q3_K: return kq_packed_matmul<BlockQ3_K>(w, rb, x, y, ldy, n0, n1);
        case TensorType::Q2_K: return kq_packed_matmul<BlockQ2_K>(w, rb, x, y, ldy, n0, n1);
        default: break;
    }
    const bool q8 = type == TensorType::Q8_0;
    if (x.rows() <= 16) {
        if (q8) qp_direct_n<TensorType::Q8_0, 16>(x.rows(), w, rb, x, y, ldy, n0, n1);
        else qp_direct_n<TensorType::Q4_0, 16>(x.rows(), w, rb, x, y, ldy, n0, n1);
    } else {
        if (q8) qp_buffered<TensorType::Q8_0>(w, rb, x, y, ldy, n0, n1);
        else qp_buffered<TensorType::Q4_0>(w, rb, x, y, ldy, n0, n1);
    }
}

// Decode a weight block (the table's scalar dequantisation), then FMA it
// into one accumulator per activation row; summed across lanes at the end.
void matmul_kq_path_avx512(KqPath path, TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy,
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
        default: matmul_avx512(type, W, x, y, ldy, n0, n1); return;
    }
}

void matmul_dequant_avx512(TensorType type, const void* W, const PreparedInput& x, float* y, int64_t ldy, int64_t n0,
                           int64_t n1) {
    const TensorTypeTraits& tt = *tensor_type_traits(static_cast<uint32_t>(type));
    const int64_t be = tt.block_elements, nb = x.k() / be;
    const size_t rb = tensor_row_bytes(type, x.k());
    alignas(64) float wb[kDequantMaxBlock];  // (be) one decoded block of the weight row
    for (int64_t n = n0; n < n1; ++n) {
        const unsigned char* w = static_cast<const unsigned char*>(W) + static_cast<size_t>(n) * rb;
        for (int t0 = 0; t0 < x.rows(); t0 += kDequantRowGroup) {
            const int tn = std::min(kDequantRowGroup, x.rows() - t0);
            __m512 acc[kDequantRowGroup];  // (tn) per-lane running dots
            for (int t = 0; t < tn; ++t) acc[t] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const unsigned char* blk = w + static_cast<size_t>(b) * tt.block_bytes;
                _mm_prefetch(reinterpret_cast<const char*>(blk + kQPrefetchBytes), _MM_HINT_T1);
                tt.dequantize(blk, wb, 1);
                const int64_t c0 = b * be / 16;
                for (int t = 0; t < tn; ++t) {
                    __m512 a = acc[t];
                    for (int64_t c = 0; c < be / 16; ++c) {
                        a = _mm512_fmadd_ps(_mm512_load_ps(wb + 16 * c), _mm512_loadu_ps(x.f32_chunk(c0 + c, t0 + t)), a);
                    }
                    acc[t] = a;
                }
            }
            for (int t = 0; t < tn; ++t) y[(t0 + t) * ldy + n] = _mm512_reduce_add_ps(acc[t]);
        }
    }
}

// ------------------------------------------------------------ other kernels ---

void quantize_act_avx512(const float* x, int64_t k, const QuantDst& dst) {
    const __m512 sign = _mm512_set1_ps(-0.0f), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        __m512i q[2];
        SPECD_UNROLL
        for (int h = 0; h < 2; ++h) {
            // round half away from zero, as std::round: trunc, then +-1 when |frac| >= 0.5.
            const __m512 v = _mm512_mul_ps(h == 0 ? x0 : x1, vid);
            const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
            const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(one, _mm512_and_ps(sign, v)));
            q[h] = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvttps_epi32(r), _mm512_set1_epi32(127)),
                                    _mm512_set1_epi32(-127));
        }
        int8_t* qb = dst.q + b * dst.stride;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q[0]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q[1]));
        dst.meta[b * dst.mstride] = {dst.corr_mul * _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1])), d};
    }
}

float dot_f32_avx512(const float* a, const float* b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void axpy_f32_avx512(float alpha, const float* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

namespace {

// Keys stored as T (F32 or F16): each key element becomes the f32 the f32
// kernel would load, so an f16 cache gives the f32 kernel's bits on the
// rounded keys.
template <TensorType T>
void dot_rows(const float* q, const unsigned char* k, int64_t ldk_bytes, int32_t rows, int64_t n, float scale, float* out) {
    // Eight rows at a time, one accumulator each, and one reduce8 for the
    // eight sums (a third of the shuffles of eight single reductions). A
    // short last group leaves its missing rows at zero, so every row's sum
    // takes the same path whatever `rows` is.
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int32_t j0 = 0; j0 < rows; j0 += 8) {
        const int32_t nr = std::min(8, rows - j0);
        __m512 acc[8];
        SPECD_UNROLL
        for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
        for (int64_t c = 0; c < n; c += 16) {
            const __mmask16 m = tail_mask(n - c);
            const __m512 qv = _mm512_maskz_loadu_ps(m, q + c);
            SPECD_UNROLL
            for (int r = 0; r < 8; ++r) {
                if (r < nr) acc[r] = _mm512_fmadd_ps(qv, load_w16_mask<T>(k + (j0 + r) * ldk_bytes, c, m), acc[r]);
            }
        }
        const __m256 sums = _mm256_mul_ps(reduce8(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]), vscale);
        _mm256_mask_storeu_ps(out + j0, static_cast<__mmask8>((1u << nr) - 1u), sums);
    }
}

}  // namespace

void dot_rows_avx512(TensorType kv_type, const float* q, const void* k, int64_t ldk, int32_t rows, int64_t n, float scale,
                     float* out) {
    const auto* kb = static_cast<const unsigned char*>(k);
    if (kv_type == TensorType::F16) return dot_rows<TensorType::F16>(q, kb, ldk * 2, rows, n, scale, out);
    dot_rows<TensorType::F32>(q, kb, ldk * 4, rows, n, scale, out);
}

namespace {

// exp(x) for x <= 88.7 (Cephes' expf scheme): x = m ln2 + r, |r| <= ln2/2,
// e^r by a degree-7 polynomial, times 2^m; below -87.3 the result is the
// clamp's ~1e-38 (0 in a softmax sum of terms >= 1).
SPECD_INLINE __m512 exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kExpMax)), _mm512_set1_ps(kExpMin));
    const __m512 m = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(m, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(m, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kExpPoly[0]);
    SPECD_UNROLL
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, m);
}

}  // namespace

float exp_shift_sum_f32_avx512(float* x, int64_t n, float shift) {
    const __m512 vs = _mm512_set1_ps(shift);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(sum);
}

void silu_mul_f32_avx512(float* g, const float* u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

namespace {

template <TensorType T>
void weighted_rows(const float* w, float w_scale, const unsigned char* v, int64_t ldv_bytes, int32_t rows, int64_t n, float* y) {
    // Up to 64 outputs stay in registers across all rows.
    for (int64_t i = 0; i < n; i += 64) {
        __m512 acc[4];
        __mmask16 mask[4];
        SPECD_UNROLL
        for (int c = 0; c < 4; ++c) {
            mask[c] = i + 16 * c < n ? tail_mask(n - i - 16 * c) : 0;
            acc[c] = _mm512_maskz_loadu_ps(mask[c], y + i + 16 * c);
        }
        for (int32_t j = 0; j < rows; ++j) {
            const __m512 a = _mm512_set1_ps(w[j] * w_scale);
            const unsigned char* vr = v + j * ldv_bytes;
            SPECD_UNROLL
            for (int c = 0; c < 4; ++c) {
                if (mask[c]) acc[c] = _mm512_fmadd_ps(a, load_w16_mask<T>(vr, i + 16 * c, mask[c]), acc[c]);
            }
        }
        SPECD_UNROLL
        for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(y + i + 16 * c, mask[c], acc[c]);
    }
}

}  // namespace

void weighted_rows_avx512(TensorType kv_type, const float* w, float w_scale, const void* v, int64_t ldv, int32_t rows,
                          int64_t n, float* y) {
    const auto* vb = static_cast<const unsigned char*>(v);
    if (kv_type == TensorType::F16) return weighted_rows<TensorType::F16>(w, w_scale, vb, ldv * 2, rows, n, y);
    weighted_rows<TensorType::F32>(w, w_scale, vb, ldv * 4, rows, n, y);
}

void store_row_f16_avx512(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}

void dequantize_row_avx512(TensorType type, const void* src, float* dst, int64_t n) {
    const unsigned char* s = static_cast<const unsigned char*>(src);
    switch (type) {
        case TensorType::F32:
        case TensorType::F16:
        case TensorType::BF16: {
            int64_t i = 0;
            auto run = [&](auto tag) {
                constexpr TensorType T = decltype(tag)::value;
                for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load_w16<T>(s, i));
                if (i < n) _mm512_mask_storeu_ps(dst + i, tail_mask(n - i), load_w16_mask<T>(s, i, tail_mask(n - i)));
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
                const __m512 d = _mm512_set1_ps(fp16_to_fp32(b[i].d));
                const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
                const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16));
                _mm512_storeu_ps(dst + 32 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d));
                _mm512_storeu_ps(dst + 32 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d));
            }
            return;
        }
        case TensorType::Q4_0: {
            tensor_row_bytes(type, n);
            const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
            const __m512i eight = _mm512_set1_epi32(8), low4 = _mm512_set1_epi32(0x0f);
            for (int64_t i = 0; i < n / 32; ++i) {
                const __m512 d = _mm512_set1_ps(fp16_to_fp32(b[i].d));
                const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)));
                const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, low4), eight);
                const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
                _mm512_storeu_ps(dst + 32 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
                _mm512_storeu_ps(dst + 32 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
            }
            return;
        }
        default: dequantize_row(type, src, dst, n); return;
    }
}

}  // namespace specd::kern
