// Kernels: the scalar reference against double-precision sums over the
// dequantised operands, every SIMD build against the scalar reference, odd
// shapes, thread splits, and the hidden "[.bench]" micro-benchmark
// (./engine_test_kernels "[.bench]").
//
// Tolerances, per output y[t][n] = sum_k w[n][k] x[t][k], are relative to
// S = sum_k |w[n][k] x[t][k]| (the natural scale of a float dot product's
// rounding error):
//   scalar vs double, float weights:          1e-5 * S  (K <= 1000 float additions)
//   scalar vs double, quantised weights:      1e-5 * S  (integer block sums are exact; the
//                                                        double side uses the same q8 activations)
//   SIMD vs scalar (all types):               1e-5 * S  (same products, another summation order)
//   quantised vs the un-quantised f32 x:      0.02 * S  (q8_0 activations: <= 1/254 of amax per element)
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <xmmintrin.h>  // _mm_prefetch (SSE, baseline x86-64) for the bench's bandwidth probe

#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/tensor_type.h"

using namespace specd;

namespace {

constexpr TensorType kTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0};

bool is_quant(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0; }

std::vector<Isa> simd_isas() {
    std::vector<Isa> out;
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        if (isa_supported(isa)) {
            out.push_back(isa);
        } else {
            WARN("skipping ISA " << isa_name(isa) << ": this CPU lacks it");
        }
    }
    return out;
}

// A weight matrix in `type`'s layout plus its dequantised f32 copy.
struct Weights {
    TensorType type;
    int64_t n, k;
    std::vector<unsigned char> data;  // (n, row_bytes)
    std::vector<float> deq;           // (n, k)
    size_t row_bytes;
    const void* ptr() const { return data.data(); }
};

// The byte offsets of the fp16 scale (and min) fields in a block of the
// types specd reads but cannot write (ggml-common.h's layouts).
std::vector<size_t> read_only_fp16_fields(TensorType type) {
    switch (type) {
        case TensorType::Q2_K: return {80, 82};
        case TensorType::Q3_K: return {108};
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS: return {0};
        default: return {};
    }
}

Weights make_weights(TensorType type, int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    Weights w{type, n, k, {}, {}, tensor_row_bytes(type, k)};
    if (const std::vector<size_t> fields = read_only_fp16_fields(type); !fields.empty()) {
        // Random blocks: random bytes, fp16 fields set to small scales.
        w.data.resize(w.row_bytes * static_cast<size_t>(n));
        for (unsigned char& b : w.data) b = static_cast<unsigned char>(rng());
        const size_t bb = tensor_type_block_bytes(type);
        std::uniform_real_distribution<float> scale(0.002f, 0.02f);
        for (size_t b = 0; b < w.data.size() / bb; ++b) {
            for (size_t off : fields) {
                const uint16_t h = fp32_to_fp16(scale(rng));
                std::memcpy(&w.data[b * bb + off], &h, sizeof h);
            }
        }
        w.deq.resize(static_cast<size_t>(n * k));
        for (int64_t r = 0; r < n; ++r) {
            dequantize_row(type, w.data.data() + static_cast<size_t>(r) * w.row_bytes, &w.deq[static_cast<size_t>(r * k)], k);
        }
        return w;
    }
    // Exactly the bytes the kernels may read: tail reads past the last row
    // would show up under ASan.
    w.data.resize(w.row_bytes * static_cast<size_t>(n));
    w.deq.resize(static_cast<size_t>(n * k));
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
        const float scale = 0.05f * static_cast<float>(1 + r % 7);
        for (float& v : row) v = dist(rng) * scale;
        quantize_row(type, row.data(), w.data.data() + static_cast<size_t>(r) * w.row_bytes, k);
        dequantize_row(type, w.data.data() + static_cast<size_t>(r) * w.row_bytes, &w.deq[static_cast<size_t>(r * k)], k);
    }
    return w;
}

// x: (rows, ldx) with ldx >= k; the gap holds NaN so reading it would show.
std::vector<float> make_x(int rows, int64_t k, int64_t ldx, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows * ldx), NAN);
    for (int t = 0; t < rows; ++t)
        for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(t * ldx + i)] = dist(rng);
    return x;
}

// The activations as the kernels see them: f32, or q8_0 codes times scales.
std::vector<double> effective_x(const PreparedInput& in, const std::vector<float>& x, int64_t ldx) {
    const int rows = in.rows();
    const int64_t k = in.k();
    std::vector<double> out(static_cast<size_t>(rows * k));
    for (int t = 0; t < rows; ++t) {
        for (int64_t i = 0; i < k; ++i) {
            if (in.quantized()) {
                out[static_cast<size_t>(t * k + i)] =
                    static_cast<double>(in.q8_scale(i / 32, t)) * in.q8_block(i / 32, t)[i % 32];
            } else {
                out[static_cast<size_t>(t * k + i)] = x[static_cast<size_t>(t * ldx + i)];
            }
        }
    }
    return out;
}

struct Ref {
    std::vector<double> y;    // (rows, n)
    std::vector<double> mag;  // (rows, n) sum |w x|
};

Ref reference(const Weights& w, const std::vector<double>& xe, int rows) {
    Ref r{std::vector<double>(static_cast<size_t>(rows * w.n)), std::vector<double>(static_cast<size_t>(rows * w.n))};
    for (int t = 0; t < rows; ++t) {
        for (int64_t n = 0; n < w.n; ++n) {
            double s = 0.0, m = 0.0;
            for (int64_t i = 0; i < w.k; ++i) {
                const double p = static_cast<double>(w.deq[static_cast<size_t>(n * w.k + i)]) * xe[static_cast<size_t>(t * w.k + i)];
                s += p;
                m += std::fabs(p);
            }
            r.y[static_cast<size_t>(t * w.n + n)] = s;
            r.mag[static_cast<size_t>(t * w.n + n)] = m;
        }
    }
    return r;
}

constexpr float kSentinel = -12345.0f;

// Runs matmul for [n0, n1) into a (rows, ldy) sentinel-filled buffer.
std::vector<float> run_matmul(Isa isa, const Weights& w, const PreparedInput& in, int64_t ldy, int64_t n0, int64_t n1) {
    std::vector<float> y(static_cast<size_t>(in.rows() * ldy), kSentinel);
    matmul(isa, w.type, w.ptr(), in, y.data(), ldy, n0, n1);
    return y;
}

void prepare(PreparedInput& in, Isa isa, TensorType type, const std::vector<float>& x, int rows, int64_t k, int64_t ldx) {
    in.set_shape(type, rows, k);
    // Two disjoint halves, as two threads would.
    const int mid = rows / 2;
    in.prepare_rows(isa, x.data(), ldx, 0, mid);
    in.prepare_rows(isa, x.data(), ldx, mid, rows);
}

// Checks y against ref for columns [n0, n1), and that nothing else was written.
void check_output(const std::vector<float>& y, int64_t ldy, const Ref& ref, int64_t n_total, int rows, int64_t n0,
                  int64_t n1, double tol) {
    for (int t = 0; t < rows; ++t) {
        for (int64_t n = 0; n < ldy; ++n) {
            const float v = y[static_cast<size_t>(t * ldy + n)];
            if (n < n0 || n >= n1) {
                INFO("row " << t << " column " << n << " outside [" << n0 << ", " << n1 << ")");
                REQUIRE(v == kSentinel);
                continue;
            }
            const double want = ref.y[static_cast<size_t>(t * n_total + n)];
            const double bound = tol * ref.mag[static_cast<size_t>(t * n_total + n)] + 1e-30;
            INFO("row " << t << " column " << n << ": got " << v << " want " << want << " bound " << bound);
            REQUIRE(std::fabs(v - want) <= bound);
        }
    }
}

Ref as_ref(const std::vector<float>& y, int64_t ldy, const Ref& mags, int rows, int64_t n_total) {
    Ref r{std::vector<double>(static_cast<size_t>(rows * n_total)), mags.mag};
    for (int t = 0; t < rows; ++t)
        for (int64_t n = 0; n < n_total; ++n) r.y[static_cast<size_t>(t * n_total + n)] = y[static_cast<size_t>(t * ldy + n)];
    return r;
}

void check_matmul_shape(TensorType type, int64_t N, int64_t K, int rows, uint32_t seed) {
    INFO("type " << tensor_type_name(type) << " N " << N << " K " << K << " rows " << rows);
    const Weights w = make_weights(type, N, K, seed);
    const int64_t ldx = K + 3, ldy = N + 5;
    const std::vector<float> x = make_x(rows, K, ldx, seed + 1);
    PreparedInput in;
    prepare(in, Isa::Scalar, type, x, rows, K, ldx);
    const Ref ref = reference(w, effective_x(in, x, ldx), rows);

    // Scalar against double over the dequantised operands.
    const std::vector<float> ys = run_matmul(Isa::Scalar, w, in, ldy, 0, N);
    check_output(ys, ldy, ref, N, rows, 0, N, 1e-5);
    if (is_quant(type)) {
        // ... and, loosely, against the f32 activations the q8_0 codes stand for.
        std::vector<double> xf(static_cast<size_t>(rows * K));
        for (int t = 0; t < rows; ++t)
            for (int64_t i = 0; i < K; ++i) xf[static_cast<size_t>(t * K + i)] = x[static_cast<size_t>(t * ldx + i)];
        check_output(ys, ldy, reference(w, xf, rows), N, rows, 0, N, 0.02);
    }
    const Ref scalar = as_ref(ys, ldy, ref, rows, N);

    // Every SIMD build against the scalar reference, whole and partial N ranges.
    for (Isa isa : simd_isas()) {
        INFO("isa " << isa_name(isa));
        PreparedInput in2;
        prepare(in2, isa, type, x, rows, K, ldx);
        const std::pair<int64_t, int64_t> ranges[] = {{0, N}, {N / 3, N - N / 4}, {std::min<int64_t>(16, N), N}, {N - 1, N}};
        for (auto [n0, n1] : ranges) {
            INFO("range [" << n0 << ", " << n1 << ")");
            check_output(run_matmul(isa, w, in2, ldy, n0, n1), ldy, scalar, N, rows, n0, n1, 1e-5);
        }
    }
}

}  // namespace

TEST_CASE("isa: best_isa never exceeds the CPU, SPECD_ISA lowers it, and a bad value is an error", "[kernels]") {
    const Isa cpu = cpu_isa();
    CHECK(isa_supported(Isa::Scalar));
    CHECK(isa_supported(cpu));
    unsetenv("SPECD_ISA");
    CHECK(best_isa() == cpu);
    setenv("SPECD_ISA", "scalar", 1);
    CHECK(best_isa() == Isa::Scalar);
    setenv("SPECD_ISA", "avx512", 1);
    CHECK(best_isa() == cpu);  // never raised above the CPU
    setenv("SPECD_ISA", "avx2", 1);
    CHECK(static_cast<int>(best_isa()) == std::min(static_cast<int>(cpu), static_cast<int>(Isa::Avx2)));
    setenv("SPECD_ISA", "sse9", 1);
    CHECK_THROWS_WITH(best_isa(), Catch::Contains("SPECD_ISA=sse9"));
    unsetenv("SPECD_ISA");
    CHECK(std::string(isa_name(Isa::Avx512)) == "avx512");
    CHECK(std::string(isa_name(Isa::Avx2)) == "avx2");
    CHECK(std::string(isa_name(Isa::Scalar)) == "scalar");
}

TEST_CASE("matmul, float weights: every ISA matches the scalar reference, and it matches double sums, for odd K, rows and N ranges", "[kernels]") {
    uint32_t seed = 100;
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
        for (int64_t K : {1, 16, 31, 33, 288, 1000}) {
            for (int rows : {1, 2, 3, 5, 8, 9, 17, 64, 130}) {
                if (rows == 130 && K == 1000 && type != TensorType::F32) continue;  // keep the run short
                check_matmul_shape(type, 53, K, rows, seed++);
            }
        }
    }
}

TEST_CASE("matmul, q8_0 and q4_0 weights: every ISA matches the scalar reference, and it matches double sums, for K = 32m, odd rows and N ranges", "[kernels]") {
    uint32_t seed = 500;
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
        for (int64_t K : {32, 96, 288, 768, 1056}) {  // 1056 = 33 blocks: more than one transposed chunk
            for (int rows : {1, 2, 3, 5, 8, 9, 16, 17, 64, 130}) {
                check_matmul_shape(type, 53, K, rows, seed++);
            }
        }
    }
}

TEST_CASE("matmul: model shapes (N = 288/768/32000 slices, K = 288/768) agree across ISAs for every type", "[kernels]") {
    for (TensorType type : kTypes) {
        for (auto [N, K] : {std::pair<int64_t, int64_t>{288, 288}, {768, 288}, {288, 768}, {1000, 288}}) {
            for (int rows : {1, 9, 32, 64}) check_matmul_shape(type, N, K, rows, static_cast<uint32_t>(N + K + rows));
        }
    }
}

TEST_CASE("matmul: extreme codes (q8_0 weights of -128 and +-127, activations at +-127) agree on every ISA", "[kernels]") {
    // quantize_row never writes -128, but other quantisers may; the sign
    // trick (AVX2) and the +128 offset (AVX-512) must both stay exact there.
    const int64_t N = 40, K = 96;
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
        Weights w = make_weights(type, N, K, 9);
        for (int64_t n = 0; n < N; ++n) {
            unsigned char* row = w.data.data() + static_cast<size_t>(n) * w.row_bytes;
            for (int64_t b = 0; b < K / 32; ++b) {
                if (type == TensorType::Q8_0) {
                    BlockQ8_0* blk = reinterpret_cast<BlockQ8_0*>(row) + b;
                    for (int j = 0; j < 32; ++j) blk->qs[j] = static_cast<int8_t>((n + j) % 3 == 0 ? -128 : (n + j) % 3 == 1 ? 127 : -127);
                } else {
                    BlockQ4_0* blk = reinterpret_cast<BlockQ4_0*>(row) + b;
                    for (int j = 0; j < 16; ++j) blk->qs[j] = static_cast<uint8_t>((n + j) % 2 ? 0x0f : 0xf0);
                }
            }
            dequantize_row(type, row, &w.deq[static_cast<size_t>(n * K)], K);
        }
        const int rows = 3;
        std::vector<float> x(static_cast<size_t>(rows * K));
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? 1.0f : -1.0f;  // every code is +-127
        PreparedInput in;
        prepare(in, Isa::Scalar, type, x, rows, K, K);
        const Ref ref = reference(w, effective_x(in, x, K), rows);
        const std::vector<float> ys = run_matmul(Isa::Scalar, w, in, N, 0, N);
        check_output(ys, N, ref, N, rows, 0, N, 1e-5);
        for (Isa isa : simd_isas()) {
            INFO("isa " << isa_name(isa) << " type " << tensor_type_name(type));
            PreparedInput in2;
            prepare(in2, isa, type, x, rows, K, K);
            check_output(run_matmul(isa, w, in2, N, 0, N), N, as_ref(ys, N, ref, rows, N), N, rows, 0, N, 1e-5);
        }
    }
}

TEST_CASE("matmul: AMX products of q8_0 weights give the AVX-512 path's bits exactly (any rows, partial tiles, chunks), and q4_0 is unchanged by the switch",
          "[kernels]") {
    if (!isa_supported(Isa::Avx512) || !amx_available()) {
        WARN("skipped: this CPU or OS has no AMX (amx-tile + amx-int8 and the tile state)");
        return;
    }
    struct Restore {
        ~Restore() { set_amx_enabled(true); }
    } restore;
    // K: 37 blocks, more than one 32-block chunk of the many-row path; N: a partial last tile.
    const int64_t N = 67, K = 32 * 37, ldx = K + 5, ldy = N + 3;
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
        Weights w = make_weights(type, N, K, 21);
        if (type == TensorType::Q8_0) {  // the extreme codes in a few rows
            for (int64_t n = 0; n < N; n += 5) {
                BlockQ8_0* blk = reinterpret_cast<BlockQ8_0*>(w.data.data() + static_cast<size_t>(n) * w.row_bytes);
                for (int j = 0; j < 32; ++j) blk->qs[j] = static_cast<int8_t>(j % 2 ? -128 : 127);
            }
        }
        for (int rows : {1, 3, 4, 5, 9, 16, 17, 31, 33, 40}) {
            INFO(tensor_type_name(type) << " rows " << rows);
            const std::vector<float> x = make_x(rows, K, ldx, 100 + static_cast<uint32_t>(rows));
            PreparedInput in;
            prepare(in, Isa::Avx512, type, x, rows, K, ldx);
            set_amx_enabled(false);
            const std::vector<float> plain = run_matmul(Isa::Avx512, w, in, ldy, 0, N);
            const std::vector<float> plain_part = run_matmul(Isa::Avx512, w, in, ldy, 16, N - 2);
            set_amx_enabled(true);
            const std::vector<float> amx = run_matmul(Isa::Avx512, w, in, ldy, 0, N);
            const std::vector<float> amx_part = run_matmul(Isa::Avx512, w, in, ldy, 16, N - 2);
            REQUIRE(std::memcmp(plain.data(), amx.data(), plain.size() * sizeof(float)) == 0);
            REQUIRE(std::memcmp(plain_part.data(), amx_part.data(), plain_part.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("matmul, q8_0 and q4_0: a row's outputs have the same bits alone, in any batch (1 to 40 rows, K past one chunk) and over any N range", "[kernels]") {
    // Speculative decoding's greedy output equals plain decoding only if the
    // one-row path (a weight stream, its own prefetching) and the batch paths
    // agree exactly; and RangeShare hands out N in chunks of any bounds.
    // Past 16 rows the batch paths (q_buffered, AMX) walk K in chunks of 32
    // blocks; K = 37 blocks has two, and the rows must still match.
    const int64_t N = 67, ldy = N + 3;
    for (Isa isa : simd_isas()) {
        for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
            for (int64_t K : {int64_t{96}, int64_t{32 * 37}}) {
                const int64_t ldx = K + 5;
                const Weights w = make_weights(type, N, K, 77 + static_cast<uint32_t>(K));
                for (int rows : {2, 5, 9, 15, 16, 17, 31, 33, 40}) {
                    INFO("isa " << isa_name(isa) << " " << tensor_type_name(type) << " K " << K << " rows " << rows);
                    const std::vector<float> x = make_x(rows, K, ldx, 300 + static_cast<uint32_t>(rows));
                    PreparedInput batch;
                    prepare(batch, isa, type, x, rows, K, ldx);
                    const std::vector<float> yb = run_matmul(isa, w, batch, ldy, 0, N);
                    for (int r = 0; r < rows; r += 3) {
                        const std::vector<float> xr(x.begin() + r * ldx, x.begin() + (r + 1) * ldx);
                        PreparedInput one;
                        prepare(one, isa, type, xr, 1, K, ldx);
                        std::vector<float> y1(static_cast<size_t>(ldy), kSentinel);
                        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 48}, {48, 50}, {50, N}}) {
                            matmul(isa, type, w.ptr(), one, y1.data(), ldy, n0, n1);
                        }
                        REQUIRE(std::memcmp(y1.data(), &yb[static_cast<size_t>(r * ldy)], static_cast<size_t>(N) * sizeof(float)) == 0);
                    }
                }
            }
        }
    }
}

TEST_CASE("matmul_packed: packed weights give matmul's bits exactly on each SIMD ISA (q8_0 and q4_0, Q2_K to Q6_K on AVX-512, 1 to 40 rows, odd and even block counts, whole-tile ranges), and bad shapes are refused",
          "[kernels]") {
    const int64_t N = 64, ldy = N + 3;
    for (Isa isa : simd_isas()) {
        const int64_t R = packed_tile_rows(isa);
        REQUIRE(R > 0);
        std::vector<TensorType> types = {TensorType::Q8_0, TensorType::Q4_0};
        if (isa == Isa::Avx512) {
            for (TensorType t : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) types.push_back(t);
        }
        for (TensorType type : types) {
            const int64_t be = tensor_type_block_elements(type);
            // 2 blocks (one pair), 3 (a pair and a lone block), 37 for q8_0/q4_0
            // (past a 32-block chunk), 5 super-blocks for the K-quants.
            for (int64_t K : {2 * be, 3 * be, be == 32 ? 32 * 37 : 5 * be}) {
                Weights w = make_weights(type, N, K, 500 + static_cast<uint32_t>(K));
                if (type == TensorType::Q8_0) {  // the extreme codes in a few rows
                    for (int64_t n = 0; n < N; n += 7) {
                        BlockQ8_0* blk = reinterpret_cast<BlockQ8_0*>(w.data.data() + static_cast<size_t>(n) * w.row_bytes);
                        for (int j = 0; j < 32; ++j) blk->qs[j] = static_cast<int8_t>(j % 2 ? -128 : 127);
                    }
                }
                REQUIRE(packable(isa, type, N, K));
                std::vector<unsigned char> packed(w.data.size());
                pack_weights(isa, type, w.ptr(), N, K, packed.data());
                REQUIRE(packed != w.data);  // the layout differs; only the products agree
                for (int rows : {1, 2, 5, 9, 16, 17, 33, 40}) {
                    INFO(isa_name(isa) << " " << tensor_type_name(type) << " K " << K << " rows " << rows);
                    const int64_t ldx = K + 5;
                    const std::vector<float> x = make_x(rows, K, ldx, 600 + static_cast<uint32_t>(rows));
                    PreparedInput in;
                    prepare(in, isa, type, x, rows, K, ldx);
                    const std::vector<float> want = run_matmul(isa, w, in, ldy, 0, N);
                    std::vector<float> got(static_cast<size_t>(rows * ldy), kSentinel);
                    for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 48}, {48, 56}, {56, N}}) {
                        if (n0 % R != 0 || n1 % R != 0) continue;  // AVX-512: 48..64 in one call
                        matmul_packed(isa, type, packed.data(), in, got.data(), ldy, n0, n1);
                    }
                    if (R == 16) matmul_packed(isa, type, packed.data(), in, got.data(), ldy, 48, N);
                    REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
                }
            }
        }
    }
    // Refused: other types, rows not whole tiles, K not whole blocks, the
    // scalar ISA, ranges not whole tiles, weights packed for nothing here.
    CHECK(packed_tile_rows(Isa::Scalar) == 0);
    CHECK_FALSE(packable(Isa::Avx2, TensorType::Q4_K, 64, 256));
    CHECK(packable(Isa::Avx512, TensorType::Q4_K, 64, 256));
    CHECK_FALSE(packable(Isa::Avx512, TensorType::Q6_K, 64, 128));
    CHECK_FALSE(packable(Isa::Avx512, TensorType::Q5_0, 64, 256));
    CHECK_FALSE(packable(Isa::Avx2, TensorType::Q8_0, 20, 64));
    CHECK(packable(Isa::Avx2, TensorType::Q8_0, 40, 64));
    CHECK_FALSE(packable(Isa::Avx512, TensorType::Q8_0, 40, 64));
    CHECK_FALSE(packable(Isa::Avx512, TensorType::Q4_0, 64, 48));
    CHECK_FALSE(packable(Isa::Scalar, TensorType::Q4_0, 64, 64));
    std::vector<unsigned char> buf(tensor_row_bytes(TensorType::Q8_0, 64) * 40);
    CHECK_THROWS_WITH(pack_weights(Isa::Avx512, TensorType::Q8_0, buf.data(), 40, 64, buf.data()),
                      Catch::Contains("cannot pack q8_0 40x64 for avx512"));
    for (Isa isa : simd_isas()) {
        const Weights w = make_weights(TensorType::Q4_0, 32, 64, 9);
        std::vector<unsigned char> packed(w.data.size());
        pack_weights(isa, TensorType::Q4_0, w.ptr(), 32, 64, packed.data());
        const std::vector<float> x = make_x(1, 64, 64, 10);
        PreparedInput in;
        prepare(in, isa, TensorType::Q4_0, x, 1, 64, 64);
        std::vector<float> y(32);
        CHECK_THROWS_WITH(matmul_packed(isa, TensorType::Q4_0, packed.data(), in, y.data(), 32, 0, 4), Catch::Contains("whole tiles"));
        CHECK_THROWS_WITH(matmul_packed(Isa::Scalar, TensorType::Q4_0, packed.data(), in, y.data(), 32, 0, 32),
                          Catch::Contains("no packed layout for scalar"));
        CHECK_THROWS_WITH(matmul_packed(isa, TensorType::Q8_0, packed.data(), in, y.data(), 32, 0, 32), Catch::Contains("prepared for q4_0"));
    }
}

TEST_CASE("matmul, every weight type: a row's outputs have the same bits alone as in a batch of 2 to 70 rows", "[kernels]") {
    // The q8_0/q4_0 property above for the other types a verification step
    // multiplies: the one-row kernels (K-quants: the weight stream; floats:
    // dot tiles of 8 weight rows) and the multi-row ones (K-quant tiles;
    // float dot tiles of 4) take the same float steps in the same order. K =
    // 1280 is 5 super-blocks and past the float kernels' K chunks; 64 and 70
    // rows are where float panels used to take over and break this.
    const int64_t N = 37, K = 1280, ldx = K + 3, ldy = N + 1;
    for (Isa isa : simd_isas()) {
        for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q2_K, TensorType::Q3_K,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q5_0, TensorType::Q5_1,
                                TensorType::IQ4_NL, TensorType::IQ4_XS}) {
            const Weights w = make_weights(type, N, K, 500 + static_cast<uint32_t>(type));
            for (int rows : {2, 5, 9, 16, 17, 33, 40, 64, 70}) {
                INFO("isa " << isa_name(isa) << " " << tensor_type_name(type) << " rows " << rows);
                const std::vector<float> x = make_x(rows, K, ldx, 900 + static_cast<uint32_t>(rows));
                PreparedInput batch;
                prepare(batch, isa, type, x, rows, K, ldx);
                const std::vector<float> yb = run_matmul(isa, w, batch, ldy, 0, N);
                for (int r = 0; r < rows; r += 4) {
                    INFO("row " << r);
                    const std::vector<float> xr(x.begin() + r * ldx, x.begin() + (r + 1) * ldx);
                    PreparedInput one;
                    prepare(one, isa, type, xr, 1, K, ldx);
                    const std::vector<float> y1 = run_matmul(isa, w, one, ldy, 0, N);
                    REQUIRE(std::memcmp(y1.data(), &yb[static_cast<size_t>(r * ldy)], static_cast<size_t>(N) * sizeof(float)) == 0);
                }
            }
        }
    }
}

TEST_CASE("prepared q8_0 activations are bit-identical on every ISA", "[kernels]") {
    for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
        const int rows = 7;
        const int64_t K = 320;
        std::vector<float> x = make_x(rows, K, K, 42);
        x[5] = 0.0f;
        for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
        x[70] = 1e-30f;                                                   // a denormal-scale value
        for (int i = 96; i < 128; ++i) x[static_cast<size_t>(i)] = (i % 2 ? 0.5f : -2.5f) * 127.0f / 2.5f;  // exact halves
        PreparedInput ref;
        prepare(ref, Isa::Scalar, type, x, rows, K, K);
        for (Isa isa : simd_isas()) {
            INFO("isa " << isa_name(isa) << " type " << tensor_type_name(type));
            PreparedInput in;
            prepare(in, isa, type, x, rows, K, K);
            for (int t = 0; t < rows; ++t) {
                for (int64_t b = 0; b < K / 32; ++b) {
                    REQUIRE(std::memcmp(in.q8_block(b, t), ref.q8_block(b, t), 32) == 0);
                    REQUIRE(in.q8_scale(b, t) == ref.q8_scale(b, t));
                    REQUIRE(in.q8_corr(b, t) == ref.q8_corr(b, t));
                }
            }
        }
        // corr is -128 (q8_0) or -8 (q4_0) times the code sum.
        for (int t = 0; t < rows; ++t) {
            for (int64_t b = 0; b < K / 32; ++b) {
                int sum = 0;
                for (int j = 0; j < 32; ++j) sum += ref.q8_block(b, t)[j];
                CHECK(ref.q8_corr(b, t) == (type == TensorType::Q8_0 ? -128 : -8) * sum);
            }
        }
    }
}

TEST_CASE("matmul: two threads on disjoint N halves give the single-threaded result", "[kernels]") {
    for (TensorType type : kTypes) {
        const int64_t N = 1000, K = 288;
        const int rows = 9;
        const Weights w = make_weights(type, N, K, 77);
        const std::vector<float> x = make_x(rows, K, K, 78);
        const Isa isa = cpu_isa();
        PreparedInput in;
        in.reserve(rows, K);
        in.set_shape(type, rows, K);
        std::vector<float> y1(static_cast<size_t>(rows * N)), y2(static_cast<size_t>(rows * N));
        std::thread th[2];
        for (int i = 0; i < 2; ++i) th[i] = std::thread([&, i] { in.prepare_rows(isa, x.data(), K, i == 0 ? 0 : 4, i == 0 ? 4 : rows); });
        for (auto& t : th) t.join();
        matmul(isa, type, w.ptr(), in, y1.data(), N, 0, N);
        for (int i = 0; i < 2; ++i) {
            th[i] = std::thread([&, i] { matmul(isa, type, w.ptr(), in, y2.data(), N, i == 0 ? 0 : 496, i == 0 ? 496 : N); });
        }
        for (auto& t : th) t.join();
        CHECK(y1 == y2);
    }
}

TEST_CASE("PreparedInput: reserve allocates once, shapes within it reuse the buffer, bad shapes and calls are refused", "[kernels]") {
    PreparedInput in;
    in.reserve(32, 768);
    in.set_shape(TensorType::F32, 32, 768);
    const void* base = in.f32_chunk(0, 0);
    for (TensorType type : kTypes) {
        for (int rows : {1, 9, 16, 32}) {
            for (int64_t k : {288, 768}) {
                in.set_shape(type, rows, k);
                const void* p = in.quantized() ? static_cast<const void*>(in.q8_block(0, 0)) : in.f32_chunk(0, 0);
                CHECK(p == base);
                CHECK(in.rows() == rows);
                CHECK(in.k() == k);
                CHECK(in.weight_type() == type);
            }
        }
    }
    CHECK_THROWS_WITH(in.set_shape(TensorType::Q8_0, 4, 100), Catch::Contains("multiple of 32"));
    CHECK_THROWS_AS(in.set_shape(TensorType::F32, -1, 8), Error);
    CHECK_THROWS_AS(in.set_shape(static_cast<TensorType>(3), 1, 32), Error);
    in.set_shape(TensorType::F32, 4, 64);
    std::vector<float> x(4 * 64, 1.0f);
    CHECK_THROWS_AS(in.prepare_rows(Isa::Scalar, x.data(), 64, 2, 5), Error);
    in.prepare_rows(Isa::Scalar, x.data(), 64, 0, 4);
    const Weights w = make_weights(TensorType::Q8_0, 4, 64, 1);
    std::vector<float> y(16);
    CHECK_THROWS_WITH(matmul(Isa::Scalar, TensorType::Q8_0, w.ptr(), in, y.data(), 4, 0, 4), Catch::Contains("prepared for f32"));
    // Beyond the reservation set_shape grows the buffer instead of failing.
    in.set_shape(TensorType::F32, 100, 2000);
    CHECK(in.rows() == 100);
}

TEST_CASE("dot_f32 and axpy_f32 match double arithmetic on every ISA for any n", "[kernels]") {
    std::vector<Isa> isas = simd_isas();
    isas.insert(isas.begin(), Isa::Scalar);
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 64, 100, 1000}) {
        // One float of margin on each side: the operands start unaligned and
        // the margins must stay untouched.
        std::vector<float> a(static_cast<size_t>(n) + 2), b(static_cast<size_t>(n) + 2);
        for (auto& v : a) v = dist(rng);
        for (auto& v : b) v = dist(rng);
        const float* pa = a.data() + 1;
        const float* pb = b.data() + 1;
        double want = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            want += static_cast<double>(pa[i]) * pb[i];
            mag += std::fabs(static_cast<double>(pa[i]) * pb[i]);
        }
        for (Isa isa : isas) {
            INFO("isa " << isa_name(isa) << " n " << n);
            const float got = dot_f32(isa, pa, pb, n);
            CHECK(std::fabs(got - want) <= 1e-6 * mag + 1e-30);
            std::vector<float> y = b;
            axpy_f32(isa, 0.75f, pa, y.data() + 1, n);
            for (int64_t i = 0; i < n; ++i) {
                const double e = static_cast<double>(pb[i]) + 0.75 * pa[i];
                REQUIRE(std::fabs(y[static_cast<size_t>(i + 1)] - e) <= 1e-6 * (std::fabs(pb[i]) + std::fabs(pa[i])));
            }
            CHECK(y.front() == b.front());
            CHECK(y.back() == b.back());
        }
    }
}

TEST_CASE("dequantize_row_isa is bit-identical to dequantize_row for every type and ISA", "[kernels]") {
    std::vector<Isa> isas = simd_isas();
    isas.insert(isas.begin(), Isa::Scalar);
    for (TensorType type : kTypes) {
        for (int64_t n : {32, 64, 288, 800}) {
            for (int64_t m : {n, n - 1, n - 15, n + 1}) {
                if (is_quant(type) && m != n) continue;
                const Weights w = make_weights(type, 1, m, static_cast<uint32_t>(m));
                for (Isa isa : isas) {
                    INFO("type " << tensor_type_name(type) << " isa " << isa_name(isa) << " n " << m);
                    std::vector<float> got(static_cast<size_t>(m) + 1, kSentinel);
                    dequantize_row_isa(isa, type, w.ptr(), got.data(), m);
                    REQUIRE(std::memcmp(got.data(), w.deq.data(), static_cast<size_t>(m) * sizeof(float)) == 0);
                    REQUIRE(got[static_cast<size_t>(m)] == kSentinel);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ bench ---

namespace {

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Two persistent threads (the caller is thread 0) that run a job on a
// signal, so a timed call costs one spin hand-off, not a thread start.
class BenchThreads {
public:
    explicit BenchThreads(int n) : n_(n) {
        for (int i = 1; i < n_; ++i) workers_.emplace_back([this, i] { loop(i); });
    }
    ~BenchThreads() {
        stop_ = true;
        gen_.fetch_add(1);
        for (auto& t : workers_) t.join();
    }
    template <class Fn>
    void run(Fn&& fn) {
        job_ = [&fn](int i) { fn(i); };
        pending_ = n_ - 1;
        gen_.fetch_add(1, std::memory_order_release);
        fn(0);
        for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
            if (spins > 100000) std::this_thread::yield();  // a loaded machine: let the worker run
        }
    }

private:
    void loop(int i) {
        uint64_t seen = 0;
        for (;;) {
            uint64_t g;
            for (int spins = 0; (g = gen_.load(std::memory_order_acquire)) == seen; ++spins) {
                if (spins > 100000) std::this_thread::yield();
            }
            seen = g;
            if (stop_) return;
            job_(i);
            pending_.fetch_sub(1, std::memory_order_release);
        }
    }
    int n_;
    std::vector<std::thread> workers_;
    std::function<void(int)> job_;
    std::atomic<uint64_t> gen_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
};

struct Timing {
    double median, min;
};

// Median and minimum of `reps` timed calls; `before` runs untimed ahead of each.
template <class Fn, class Before>
Timing time_us(int reps, Fn&& fn, Before&& before) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        before();
        const double t0 = now_us();
        fn();
        t.push_back(now_us() - t0);
    }
    std::sort(t.begin(), t.end());
    return {t[t.size() / 2], t[0]};
}

template <class Fn>
double median_us(int reps, Fn&& fn) {
    return time_us(reps, fn, [] {}).median;
}

// Streaming-read bandwidth over `bytes` (512 MiB: DRAM; a few MiB read
// repeatedly: L3) with nth of the threads, GB/s, median of `reps`.
// prefetch: also software-prefetch 2 KiB ahead, as the matmul kernels do.
double read_bandwidth_gbs(BenchThreads& threads, int nth, size_t bytes, int reps, bool prefetch = false) {
    const size_t n = bytes >> 3;
    std::vector<uint64_t> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = i;
    std::vector<uint64_t> sink(16 * 8);
    const double us = median_us(reps, [&] {
        threads.run([&](int i) {
            if (i >= nth) return;
            const size_t b = n / static_cast<size_t>(nth) * static_cast<size_t>(i);
            const size_t e = i == nth - 1 ? n : n / static_cast<size_t>(nth) * static_cast<size_t>(i + 1);
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
            for (size_t j = b; j + 8 <= e; j += 8) {
                if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(&buf[j] + 256), _MM_HINT_T0);
                a0 += buf[j]; a1 += buf[j + 1]; a2 += buf[j + 2]; a3 += buf[j + 3];
                a4 += buf[j + 4]; a5 += buf[j + 5]; a6 += buf[j + 6]; a7 += buf[j + 7];
            }
            sink[static_cast<size_t>(i) * 8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
        });
    });
    return static_cast<double>(n * 8) / us / 1e3;
}

}  // namespace

// Filters for the bench: SPECD_BENCH_TYPES="q8_0,f32", SPECD_BENCH_ROWS="1,9",
// SPECD_BENCH_SHAPES="32000x288", SPECD_BENCH_ALL_ISAS=1 (avx2 too).
bool bench_pick(const char* env, const std::string& item) {
    const char* v = std::getenv(env);
    if (v == nullptr || *v == '\0') return true;
    const std::string list = std::string(",") + v + ",";
    return list.find("," + item + ",") != std::string::npos;
}

TEST_CASE("bench: matmul at the stories15M shapes, 1 and 2 threads", "[.bench]") {
    BenchThreads threads(2);
    const double bw2 = read_bandwidth_gbs(threads, 2, size_t{512} << 20, 5), bw1 = read_bandwidth_gbs(threads, 1, size_t{512} << 20, 5);
    std::printf("DRAM streaming read (512 MiB, median of 5): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", bw1, bw2);
    const double pf2 = read_bandwidth_gbs(threads, 2, size_t{512} << 20, 5, true);
    std::printf("DRAM streaming read with software prefetch (512 MiB): 2 threads %.1f GB/s\n", pf2);
    for (size_t mb : {5u, 10u}) {  // the q4_0 / q8_0 classifier sizes, read again and again: L3
        const double l1 = read_bandwidth_gbs(threads, 1, mb << 20, 51), l2 = read_bandwidth_gbs(threads, 2, mb << 20, 51);
        std::printf("L3 streaming read (%zu MiB, median of 51): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", mb, l1, l2);
    }
    std::vector<Isa> isas = {cpu_isa()};
    if (const char* e = std::getenv("SPECD_BENCH_ALL_ISAS"); e && *e) {
        isas.clear();
        for (Isa i : {Isa::Avx2, Isa::Avx512})
            if (isa_supported(i)) isas.push_back(i);
    }
    // Evicts the weights from L3 before a "cold" call (the f32 classifier
    // does not fit in L3 with the rest of the model, so decode reads it from DRAM).
    std::vector<uint64_t> flush_buf(size_t{96} << 20 >> 3, 1);  // 96 MiB
    std::vector<uint64_t> flush_sink(16);
    auto flush = [&] {
        threads.run([&](int i) {
            uint64_t a = 0;
            const size_t half = flush_buf.size() / 2;
            for (size_t j = half * static_cast<size_t>(i); j < half * static_cast<size_t>(i + 1); j += 8) a += flush_buf[j];
            flush_sink[static_cast<size_t>(i) * 8] = a;
        });
    };
    std::printf("%-10s %-5s %-7s %5s %-5s %3s %10s %10s  %s\n", "NxK", "type", "isa", "rows", "cache", "thr", "median us",
                "min us", "rate (median)");
    struct Shape {
        int64_t n, k;
    };
    for (const Shape s : {Shape{32000, 288}, Shape{768, 288}, Shape{288, 768}, Shape{288, 288}}) {
        char shape[32];
        std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(s.n), static_cast<long long>(s.k));
        if (!bench_pick("SPECD_BENCH_SHAPES", shape)) continue;
        for (TensorType type : kTypes) {
            if (!bench_pick("SPECD_BENCH_TYPES", tensor_type_name(type))) continue;
            const Weights w = make_weights(type, s.n, s.k, 1);
            for (Isa isa : isas) {
                for (int rows : {1, 2, 4, 9, 16, 32, 64, 128}) {
                    if (!bench_pick("SPECD_BENCH_ROWS", std::to_string(rows))) continue;
                    const std::vector<float> x = make_x(rows, s.k, s.k, 2);
                    std::vector<float> y(static_cast<size_t>(rows * s.n));
                    PreparedInput in;
                    in.reserve(rows, s.k);
                    in.set_shape(type, rows, s.k);
                    in.prepare_rows(isa, x.data(), s.k, 0, rows);
                    const bool big = s.n >= 32000;
                    for (bool cold : {false, true}) {
                        if (cold && !(big && !is_quant(type) && rows <= 16)) continue;
                        for (int nth : {1, 2}) {
                            const int64_t half = (s.n / 2 + 15) / 16 * 16;
                            const int reps = rows >= 128 ? 7 : big ? (cold ? 9 : 31) : 301;
                            auto call = [&] {
                                threads.run([&](int i) {
                                    if (nth == 1) {
                                        if (i == 0) matmul(isa, type, w.ptr(), in, y.data(), s.n, 0, s.n);
                                    } else {
                                        matmul(isa, type, w.ptr(), in, y.data(), s.n, i == 0 ? 0 : half, i == 0 ? half : s.n);
                                    }
                                });
                            };
                            call();  // warm caches (L3 for the quantised classifier)
                            const Timing t = time_us(reps, call, [&] {
                                if (cold) flush();
                            });
                            const double bytes = static_cast<double>(w.data.size());
                            const double flops = 2.0 * static_cast<double>(s.n * s.k) * rows;
                            char rate[64];
                            if (rows <= 16) {
                                std::snprintf(rate, sizeof rate, "%6.1f GB/s %7.1f GFLOP/s", bytes / t.median / 1e3, flops / t.median / 1e3);
                            } else {
                                std::snprintf(rate, sizeof rate, "%18.1f GFLOP/s", flops / t.median / 1e3);
                            }
                            std::printf("%-10s %-5s %-7s %5d %-5s %3d %10.1f %10.1f  %s\n", shape, tensor_type_name(type),
                                        isa_name(isa), rows, cold ? "cold" : "warm", nth, t.median, t.min, rate);
                            std::fflush(stdout);
                        }
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------ attention helpers ---

TEST_CASE("attention helpers over an f16 KV block give exactly the f32 kernels' bits on the widened values, and "
          "store_kv_row rounds to nearest even as fp32_to_fp16 on every ISA",
          "[kernels][attention]") {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    std::vector<Isa> isas = simd_isas();
    isas.push_back(Isa::Scalar);
    for (Isa isa : isas) {
        INFO("isa " << isa_name(isa));
        for (int64_t hd : {1, 7, 16, 48, 70, 128}) {
            for (int32_t rows : {1, 5, 16}) {
                const int64_t ld = hd + 13;
                std::vector<float> q(static_cast<size_t>(hd)), kf(static_cast<size_t>(rows * ld)), vf(kf.size());
                for (float& f : q) f = u(rng);
                for (float& f : kf) f = u(rng);
                for (float& f : vf) f = u(rng);
                // Stored through the kernel under test, row by row.
                std::vector<uint16_t> kh(kf.size()), vh(vf.size());
                for (int32_t j = 0; j < rows; ++j) {
                    store_kv_row(isa, TensorType::F16, &kf[static_cast<size_t>(j * ld)], &kh[static_cast<size_t>(j * ld)], ld);
                    store_kv_row(isa, TensorType::F16, &vf[static_cast<size_t>(j * ld)], &vh[static_cast<size_t>(j * ld)], ld);
                }
                std::vector<float> kw(kf.size()), vw(vf.size());  // the stored values widened back
                for (size_t i = 0; i < kf.size(); ++i) {
                    REQUIRE(kh[i] == fp32_to_fp16(kf[i]));
                    REQUIRE(vh[i] == fp32_to_fp16(vf[i]));
                    kw[i] = fp16_to_fp32(kh[i]);
                    vw[i] = fp16_to_fp32(vh[i]);
                }
                std::vector<float> s16(static_cast<size_t>(rows)), s32(s16.size());
                dot_rows(isa, TensorType::F16, q.data(), kh.data(), ld, rows, hd, 0.5f, s16.data());
                dot_rows_f32(isa, q.data(), kw.data(), ld, rows, hd, 0.5f, s32.data());
                CHECK(s16 == s32);
                std::vector<float> w(static_cast<size_t>(rows)), y16(static_cast<size_t>(hd)), y32;
                for (float& f : w) f = u(rng);
                for (float& f : y16) f = u(rng);
                y32 = y16;
                weighted_rows(isa, TensorType::F16, w.data(), 0.25f, vh.data(), ld, rows, hd, y16.data());
                weighted_rows_f32(isa, w.data(), 0.25f, vw.data(), ld, rows, hd, y32.data());
                CHECK(y16 == y32);
            }
        }
        // Ties, overflow, subnormals and signed zero, through the vector body and the tail.
        const std::vector<float> edge = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 70000.0f, -70000.0f, 0x1p-20f,
                                         0x1p-25f, 0x1.8p-25f, -0.0f, 0.0f, 65504.0f, -1e-8f, 3.14159f, 0x1p-14f, 0x1.ffcp-15f,
                                         1e30f, -2.0f};
        std::vector<uint16_t> h(edge.size());
        store_kv_row(isa, TensorType::F16, edge.data(), h.data(), static_cast<int64_t>(edge.size()));
        for (size_t i = 0; i < edge.size(); ++i) {
            INFO("value " << edge[i]);
            CHECK(h[i] == fp32_to_fp16(edge[i]));
        }
    }
    float out = 0.0f;
    const float one = 1.0f;
    CHECK_THROWS_WITH(dot_rows(Isa::Scalar, TensorType::Q8_0, &one, &one, 1, 1, 1, 1.0f, &out), Catch::Contains("f32 or f16"));
}

TEST_CASE("attention and SwiGLU helpers: per-block dot rows, exp-and-sum, weighted rows and silu-times-up match "
          "double sums on every ISA, and exp gives each lane the same bits whatever n",
          "[kernels][attention]") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<Isa> isas = simd_isas();
    isas.push_back(Isa::Scalar);
    for (Isa isa : isas) {
        INFO("isa " << isa_name(isa));
        for (int64_t hd : {1, 7, 16, 48, 64, 70, 128}) {
            for (int32_t rows : {1, 5, 16}) {
                const int64_t ld = hd + 13;
                std::vector<float> q(static_cast<size_t>(hd)), k(static_cast<size_t>(rows * ld)), v(k.size());
                for (float& f : q) f = u(rng);
                for (float& f : k) f = u(rng);
                for (float& f : v) f = u(rng);
                std::vector<float> s(static_cast<size_t>(rows));
                dot_rows_f32(isa, q.data(), k.data(), ld, rows, hd, 0.5f, s.data());
                for (int32_t j = 0; j < rows; ++j) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < hd; ++i) {
                        ref += static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(j * ld + i)];
                        mag += std::fabs(static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(j * ld + i)]);
                    }
                    CHECK(std::fabs(s[static_cast<size_t>(j)] - 0.5 * ref) <= 1e-5 * mag + 1e-7);
                }
                std::vector<float> w(static_cast<size_t>(rows)), y(static_cast<size_t>(hd)), y0(y.size());
                for (float& f : w) f = u(rng);
                for (float& f : y0) f = u(rng);
                y = y0;
                weighted_rows_f32(isa, w.data(), 0.25f, v.data(), ld, rows, hd, y.data());
                for (int64_t i = 0; i < hd; ++i) {
                    double ref = y0[static_cast<size_t>(i)], mag = std::fabs(ref);
                    for (int32_t j = 0; j < rows; ++j) {
                        const double term = 0.25 * w[static_cast<size_t>(j)] * v[static_cast<size_t>(j * ld + i)];
                        ref += term;
                        mag += std::fabs(term);
                    }
                    CHECK(std::fabs(y[static_cast<size_t>(i)] - ref) <= 1e-5 * mag + 1e-7);
                }
            }
        }
        // exp over the softmax range, with tails of every length.
        for (int64_t n : {1, 3, 8, 15, 16, 17, 31, 33, 70, 257}) {
            std::vector<float> x(static_cast<size_t>(n));
            for (size_t i = 0; i < x.size(); ++i) x[i] = -30.0f * static_cast<float>(i) / static_cast<float>(n) + 0.5f * u(rng);
            const float shift = 0.7f;
            std::vector<float> e = x;
            const float sum = exp_shift_sum_f32(isa, e.data(), n, shift);
            double ref_sum = 0;
            for (int64_t i = 0; i < n; ++i) {
                const float d = x[static_cast<size_t>(i)] - shift;  // the kernels subtract in float too
                const double ref = std::exp(static_cast<double>(d));
                ref_sum += ref;
                CHECK(std::fabs(e[static_cast<size_t>(i)] - ref) <= 4e-7 * ref);
            }
            CHECK(std::fabs(sum - ref_sum) <= 1e-6 * ref_sum);
            // A prefix gives each of its elements the same bits.
            for (int64_t m : {int64_t{1}, n / 2 + 1}) {
                std::vector<float> p(x.begin(), x.begin() + m);
                exp_shift_sum_f32(isa, p.data(), m, shift);
                for (int64_t i = 0; i < m; ++i) CHECK(p[static_cast<size_t>(i)] == e[static_cast<size_t>(i)]);
            }
        }
        // SwiGLU's gate over a wide range, tails of every length.
        for (int64_t n : {1, 7, 8, 15, 16, 17, 100}) {
            std::vector<float> g(static_cast<size_t>(n)), up(g.size());
            for (size_t i = 0; i < g.size(); ++i) {
                g[i] = 40.0f * u(rng);
                up[i] = u(rng);
            }
            std::vector<float> out = g;
            silu_mul_f32(isa, out.data(), up.data(), n);
            for (size_t i = 0; i < g.size(); ++i) {
                const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * up[i];
                CHECK(std::fabs(out[i] - ref) <= 1e-6 * std::fabs(ref) + 1e-30);
            }
        }
        // Far below the max: ~0, never negative or NaN.
        std::vector<float> far = {-200.0f, -90.0f, 0.0f};
        const float s = exp_shift_sum_f32(isa, far.data(), 3, 0.0f);
        CHECK(far[0] >= 0.0f);
        CHECK(far[0] < 1e-37f);
        CHECK(far[1] < 1e-37f);
        CHECK(far[2] == 1.0f);
        CHECK(std::fabs(s - 1.0f) < 1e-6f);
    }
}
