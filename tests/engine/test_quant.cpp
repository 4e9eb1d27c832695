// Tensor types: fp16/bf16 conversions against independent exact references,
// q8_0/q4_0 quantisation against ggml's reference formulas and error bounds,
// row sizes and names.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/error.h"
#include "engine/tensor_type.h"

using namespace specd;

namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Value of every non-negative half 0x0000..0x7c00 computed from the format's
// definition, with 0x7c00 (inf) standing for 65536 = where the next binade
// would start, so "nearest, ties to even" over this table is IEEE rounding
// including overflow.
const std::vector<double>& half_values() {
    static const std::vector<double> table = [] {
        std::vector<double> t(0x7c01);
        for (uint32_t h = 0; h <= 0x7c00; ++h) {
            const uint32_t e = h >> 10, m = h & 0x3ff;
            t[h] = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15);
        }
        return t;
    }();
    return table;
}

uint16_t ref_fp32_to_fp16(float f) {
    const uint16_t sign = (bits(f) >> 31) ? 0x8000 : 0;
    if (std::isnan(f)) return 0x7e00;  // callers compare nan-ness only
    const double a = std::fabs(static_cast<double>(f));
    const std::vector<double>& t = half_values();
    if (a >= 65536.0) return sign | 0x7c00;
    const size_t hi = static_cast<size_t>(std::lower_bound(t.begin(), t.end(), a) - t.begin());
    if (t[hi] == a) return static_cast<uint16_t>(sign | hi);
    const size_t lo = hi - 1;
    const double dl = a - t[lo], dh = t[hi] - a;
    const size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | pick);
}

uint16_t ref_fp32_to_bf16(float f) {
    if (std::isnan(f)) return 0x7fc0;
    const uint32_t u = bits(f);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    const double v = std::fabs(static_cast<double>(f));
    const double vl = std::fabs(static_cast<double>(from_bits(lo)));
    // The value above lo in magnitude; past the largest finite it is inf,
    // which rounds like 2^128.
    const double vh = ((hi >> 16) & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(from_bits(hi)));
    const double dl = v - vl, dh = vh - v;
    const uint32_t pick = dl < dh ? lo : dh < dl ? hi : (((lo >> 16) & 1) == 0 ? lo : hi);
    return static_cast<uint16_t>(pick >> 16);
}

// Floats that stress the conversions: both zeros, the limits of each
// format, halfway points and their neighbours, specials, plus random bits.
std::vector<float> sweep_values() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, -65504.0f, 65519.996f, 65520.0f,
                            65536.0f, 1e10f, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
                            std::ldexp(1.0f, -26), std::ldexp(1.5f, -24), std::ldexp(2.5f, -24), std::ldexp(1.0f, -14),
                            std::ldexp(1023.5f, -24), std::ldexp(1.0f, -15), INFINITY, -INFINITY};
    for (float base : {1.0f, 2048.0f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -20), 65504.0f}) {
        for (int d = -40; d <= 40; ++d) {
            const uint32_t b = bits(base);
            v.push_back(from_bits(b + static_cast<uint32_t>(d)));
            v.push_back(-from_bits(b + static_cast<uint32_t>(d)));
            v.push_back(from_bits(b + 0x1000u + static_cast<uint32_t>(d)));  // near a half's halfway point
            v.push_back(from_bits(b + 0x8000u + static_cast<uint32_t>(d)));  // near a bf16's halfway point
        }
    }
    // Every 101st float in the fp16 subnormal and low normal range.
    for (uint32_t b = 0x33000000u; b < 0x39000000u; b += 101) v.push_back(from_bits(b));
    std::mt19937 rng(12345);
    for (int i = 0; i < 200000; ++i) {
        const float f = from_bits(rng());
        if (!std::isnan(f)) v.push_back(f);
    }
    return v;
}

// Straight transcriptions of ggml's quantize_row_q8_0_ref / _q4_0_ref.
void ggml_q8_0(const float* x, BlockQ8_0* y, int64_t k) {
    for (int64_t i = 0; i < k / 32; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[i * 32 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(roundf(x[i * 32 + j] * id));
    }
}

void ggml_q4_0(const float* x, BlockQ4_0* y, int64_t k) {
    for (int64_t i = 0; i < k / 32; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            if (amax < std::fabs(v)) {
                amax = std::fabs(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
            const float x0 = x[i * 32 + 0 + j] * id;
            const float x1 = x[i * 32 + 16 + j] * id;
            const uint8_t xi0 = std::min<int8_t>(15, static_cast<int8_t>(x0 + 8.5f));
            const uint8_t xi1 = std::min<int8_t>(15, static_cast<int8_t>(x1 + 8.5f));
            y[i].qs[j] = xi0;
            y[i].qs[j] |= xi1 << 4;
        }
    }
}

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = dist(rng);
    return v;
}

}  // namespace

TEST_CASE("fp16: all 65536 halves convert to f32 and back unchanged (nan stays nan)", "[quant]") {
    const std::vector<double>& t = half_values();
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            REQUIRE(std::isnan(f));
            REQUIRE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
            continue;
        }
        if ((h & 0x7fff) < 0x7c00) REQUIRE(std::fabs(static_cast<double>(f)) == t[h & 0x7fff]);
        REQUIRE(fp32_to_fp16(f) == h);
    }
    CHECK(std::isinf(fp16_to_fp32(0x7c00)));
    CHECK(std::signbit(fp16_to_fp32(0x8000)));
}

TEST_CASE("fp16: f32 -> f16 rounds to nearest even, subnormals and overflow included, matching an exact reference", "[quant]") {
    CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(fp32_to_fp16(65519.996f) == 0x7bff);
    CHECK(fp32_to_fp16(65520.0f) == 0x7c00);                 // halfway to 65536: ties to even = inf
    CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
    CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);    // halfway to it: ties to even = 0
    CHECK(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(fp32_to_fp16(std::ldexp(1.5f, -24)) == 0x0002);    // 1.5 units: ties to even = 2
    CHECK(fp32_to_fp16(std::ldexp(2.5f, -24)) == 0x0002);    // 2.5 units: ties to even = 2
    CHECK(fp32_to_fp16(std::ldexp(1023.5f, -24)) == 0x0400); // rounds up into the smallest normal
    CHECK(fp32_to_fp16(-0.0f) == 0x8000);
    CHECK(fp32_to_fp16(INFINITY) == 0x7c00);
    CHECK(fp32_to_fp16(-INFINITY) == 0xfc00);
    const uint16_t qnan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    CHECK((qnan & 0x7c00) == 0x7c00);
    CHECK((qnan & 0x3ff) != 0);
    CHECK((fp32_to_fp16(from_bits(0x7f800001u)) & 0x3ff) != 0);  // signalling nan with a low payload stays nan

    size_t checked = 0;
    for (float f : sweep_values()) {
        INFO("f = " << f << " bits " << std::hex << bits(f));
        REQUIRE(fp32_to_fp16(f) == ref_fp32_to_fp16(f));
        ++checked;
    }
    CHECK(checked > 200000);
}

TEST_CASE("bf16: all 65536 values round-trip, and f32 -> bf16 rounds to nearest even like an exact reference", "[quant]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_fp32(static_cast<uint16_t>(h));
        REQUIRE(bits(f) == h << 16);
        if (std::isnan(f)) {
            REQUIRE(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
        } else {
            REQUIRE(fp32_to_bf16(f) == h);
        }
    }
    CHECK(fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(fp32_to_bf16(from_bits(0x3f808000u)) == 0x3f80);  // tie, even stays
    CHECK(fp32_to_bf16(from_bits(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
    CHECK(fp32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to inf
    CHECK(fp32_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(fp32_to_bf16(from_bits(0x00018000u)) == 0x0002);  // subnormal tie, odd rounds up
    CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7f800001u)))));  // low-payload nan stays nan
    for (float f : sweep_values()) {
        if (std::isnan(f)) continue;
        INFO("f = " << f << " bits " << std::hex << bits(f));
        REQUIRE(fp32_to_bf16(f) == ref_fp32_to_bf16(f));
    }
}

TEST_CASE("q8_0 and q4_0 quantisation is bit-identical to ggml's reference formulas", "[quant]") {
    std::mt19937 rng(7);
    for (int row = 0; row < 20; ++row) {
        const int64_t n = 32 * (1 + row % 9);
        std::vector<float> x = random_row(rng, n, row % 3 == 0 ? 1e-3f : row % 3 == 1 ? 1.0f : 300.0f);
        if (row == 5) std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block: d = 0
        if (row == 6) x[3] = -x[3] * 1000.0f;                       // a dominant negative value
        std::vector<BlockQ8_0> a8(static_cast<size_t>(n / 32)), b8(a8.size());
        std::vector<BlockQ4_0> a4(a8.size()), b4(a8.size());
        quantize_row(TensorType::Q8_0, x.data(), a8.data(), n);
        ggml_q8_0(x.data(), b8.data(), n);
        quantize_row(TensorType::Q4_0, x.data(), a4.data(), n);
        ggml_q4_0(x.data(), b4.data(), n);
        REQUIRE(std::memcmp(a8.data(), b8.data(), a8.size() * sizeof(BlockQ8_0)) == 0);
        REQUIRE(std::memcmp(a4.data(), b4.data(), a4.size() * sizeof(BlockQ4_0)) == 0);
    }
}

TEST_CASE("q8_0 and q4_0 give the hand-computed codes for a ramp, and q8_0 rounds halves away from zero", "[quant]") {
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // -16 .. 15
    BlockQ8_0 b8;
    quantize_row(TensorType::Q8_0, x, &b8, 32);
    CHECK(b8.d == fp32_to_fp16(16.0f / 127.0f));
    CHECK(b8.qs[0] == -127);
    CHECK(b8.qs[16] == 0);
    CHECK(b8.qs[17] == 8);    // round(7.9375)
    CHECK(b8.qs[18] == 16);   // round(15.875)
    CHECK(b8.qs[31] == 119);  // round(119.0625)
    BlockQ4_0 b4;
    quantize_row(TensorType::Q4_0, x, &b4, 32);
    CHECK(fp16_to_fp32(b4.d) == 2.0f);  // max = -16, d = -16 / -8
    CHECK((b4.qs[0] & 15) == 0);        // -16 / 2 + 8.5 = 0.5 -> 0
    CHECK((b4.qs[1] & 15) == 1);        // -7.5 + 8.5 = 1
    CHECK((b4.qs[2] & 15) == 1);        // -7 + 8.5 = 1.5 -> 1
    CHECK((b4.qs[15] >> 4) == 15);      // x = 15: 7.5 + 8.5 = 16 -> clamped to 15

    float h[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f};  // amax 127: d = 1, x*id = x
    BlockQ8_0 r;
    quantize_row(TensorType::Q8_0, h, &r, 32);
    CHECK(r.qs[1] == 3);
    CHECK(r.qs[2] == -3);
    CHECK(r.qs[3] == 1);
    CHECK(r.qs[4] == -1);
    CHECK(r.qs[5] == 2);
}

TEST_CASE("q8_0 and q4_0 quantise-dequantise errors stay within half a step (plus the fp16 rounding of d)", "[quant]") {
    std::mt19937 rng(99);
    for (int row = 0; row < 50; ++row) {
        const int64_t n = 256;
        const std::vector<float> x = random_row(rng, n, std::ldexp(1.0f, row % 20 - 10));
        std::vector<BlockQ8_0> q8(static_cast<size_t>(n / 32));
        std::vector<BlockQ4_0> q4(q8.size());
        std::vector<float> y8(static_cast<size_t>(n)), y4(static_cast<size_t>(n));
        quantize_row(TensorType::Q8_0, x.data(), q8.data(), n);
        dequantize_row(TensorType::Q8_0, q8.data(), y8.data(), n);
        quantize_row(TensorType::Q4_0, x.data(), q4.data(), n);
        dequantize_row(TensorType::Q4_0, q4.data(), y4.data(), n);
        for (int64_t b = 0; b < n / 32; ++b) {
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < 32; ++j) {
                const float v = x[static_cast<size_t>(b * 32 + j)];
                if (amax < std::fabs(v)) {
                    amax = std::fabs(v);
                    max = v;
                }
            }
            // The codes are chosen with the exact d; storing d as fp16 moves
            // each value by |q| * |d16 - d| more.
            const double d8 = amax / 127.0, d8h = fp16_to_fp32(q8[static_cast<size_t>(b)].d);
            const double d4 = max / -8.0, d4h = fp16_to_fp32(q4[static_cast<size_t>(b)].d);
            for (int j = 0; j < 32; ++j) {
                const size_t i = static_cast<size_t>(b * 32 + j);
                const double e8 = std::fabs(x[i] - static_cast<double>(y8[i]));
                REQUIRE(e8 <= d8 / 2 + 127 * std::fabs(d8h - d8) + 1e-6 * amax);
                // q4_0 has codes -8..7 times d: values beyond 7.5 steps on the
                // side opposite to max clamp to 7 and may miss by a whole step.
                const double steps = x[i] / d4;
                const double bound4 = (steps > 7.5 ? std::fabs(d4) : std::fabs(d4) / 2) + 8 * std::fabs(d4h - d4) + 1e-6 * amax;
                REQUIRE(std::fabs(x[i] - static_cast<double>(y4[i])) <= bound4);
            }
        }
    }
}

TEST_CASE("f16 and bf16 rows quantise and dequantise through the element conversions", "[quant]") {
    std::mt19937 rng(3);
    const std::vector<float> x = random_row(rng, 77, 10.0f);
    std::vector<uint16_t> h(77), b(77);
    std::vector<float> yh(77), yb(77), yf(77);
    quantize_row(TensorType::F16, x.data(), h.data(), 77);
    quantize_row(TensorType::BF16, x.data(), b.data(), 77);
    dequantize_row(TensorType::F16, h.data(), yh.data(), 77);
    dequantize_row(TensorType::BF16, b.data(), yb.data(), 77);
    quantize_row(TensorType::F32, x.data(), yf.data(), 77);
    for (size_t i = 0; i < 77; ++i) {
        CHECK(h[i] == fp32_to_fp16(x[i]));
        CHECK(b[i] == fp32_to_bf16(x[i]));
        CHECK(yh[i] == fp16_to_fp32(h[i]));
        CHECK(yb[i] == bf16_to_fp32(b[i]));
        CHECK(yf[i] == x[i]);
    }
}

TEST_CASE("tensor_row_bytes, block sizes and names, and non-multiples of the block size are refused", "[quant]") {
    CHECK(tensor_row_bytes(TensorType::F32, 7) == 28);
    CHECK(tensor_row_bytes(TensorType::F16, 3) == 6);
    CHECK(tensor_row_bytes(TensorType::BF16, 288) == 576);
    CHECK(tensor_row_bytes(TensorType::Q8_0, 288) == 9 * 34);
    CHECK(tensor_row_bytes(TensorType::Q4_0, 768) == 24 * 18);
    CHECK(tensor_row_bytes(TensorType::Q8_0, 0) == 0);
    CHECK_THROWS_AS(tensor_row_bytes(TensorType::Q8_0, 33), Error);
    CHECK_THROWS_WITH(tensor_row_bytes(TensorType::Q4_0, 100), Catch::Contains("not a multiple of 32"));
    CHECK_THROWS_AS(tensor_row_bytes(TensorType::F32, -1), Error);
    float x[40] = {};
    BlockQ8_0 out[2];
    CHECK_THROWS_AS(quantize_row(TensorType::Q8_0, x, out, 40), Error);
    CHECK_THROWS_AS(dequantize_row(TensorType::Q4_0, out, x, 20), Error);
    CHECK_THROWS_AS(tensor_type_block_bytes(static_cast<TensorType>(3)), Error);

    CHECK(tensor_type_block_elements(TensorType::Q4_0) == 32);
    CHECK(tensor_type_block_elements(TensorType::BF16) == 1);
    CHECK(tensor_type_block_bytes(TensorType::Q4_0) == 18);
    CHECK(tensor_type_block_bytes(TensorType::Q8_0) == 34);
    CHECK(tensor_type_block_bytes(TensorType::F16) == 2);
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q4_0, TensorType::Q8_0, TensorType::BF16}) {
        CHECK(tensor_type_supported(static_cast<uint32_t>(t)));
        CHECK(tensor_type_from_name(tensor_type_name(t)) == t);
    }
    CHECK(std::string(tensor_type_name(TensorType::Q8_0)) == "q8_0");
    CHECK(tensor_type_from_name("Q4_0") == TensorType::Q4_0);
    CHECK_FALSE(tensor_type_from_name("q4_1").has_value());
    CHECK_FALSE(tensor_type_from_name("q8_K").has_value());
    for (uint32_t raw : {3u, 9u, 15u, 16u, 29u, 31u}) CHECK_FALSE(tensor_type_supported(raw));
}
