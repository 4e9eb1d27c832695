#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/kv_cache.h"

#include <cmath>

using namespace specd;

namespace {
KvCacheShape small_shape() {
    KvCacheShape s;
    s.n_layers = 2;
    s.kv_dim = 8;
    s.block_size = 4;
    s.n_blocks = 6;
    s.max_seq_len = 16;
    s.max_sequences = 3;
    return s;
}
}  // namespace

TEST_CASE("kv cache: reserve attaches whole blocks and free returns them all", "[kv]") {
    PagedKvCache kv(small_shape());
    const int32_t a = kv.create_sequence();
    REQUIRE(kv.reserve(a, 5));
    CHECK(kv.used_blocks() == 2);
    REQUIRE(kv.reserve(a, 8));
    CHECK(kv.used_blocks() == 2);
    kv.set_length(a, 8);
    CHECK(kv.length(a) == 8);
    kv.free_sequence(a);
    CHECK(kv.used_blocks() == 0);
    CHECK(kv.active_sequences() == 0);
}

TEST_CASE("kv cache: truncate keeps the prefix's data and releases blocks past it", "[kv]") {
    PagedKvCache kv(small_shape());
    const int32_t a = kv.create_sequence();
    REQUIRE(kv.reserve(a, 10));
    for (int32_t p = 0; p < 10; ++p) {
        for (int32_t l = 0; l < 2; ++l) {
            float k[8] = {}, v[8] = {};
            k[0] = static_cast<float>(100 * l + p);  // integers below 2048: exact in f16
            v[7] = static_cast<float>(-100 * l - p);
            kv.write(a, l, p, k, v);
        }
    }
    kv.set_length(a, 10);
    CHECK(kv.used_blocks() == 3);
    kv.truncate(a, 3);
    CHECK(kv.length(a) == 3);
    CHECK(kv.used_blocks() == 1);
    for (int32_t p = 0; p < 3; ++p) {
        float k[8], v[8];
        kv.read_key(a, 1, p, k);
        kv.read_value(a, 1, p, v);
        CHECK(k[0] == static_cast<float>(100 + p));
        CHECK(v[7] == static_cast<float>(-100 - p));
    }
    kv.truncate(a, 0);
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("kv cache: an exhausted pool refuses a reservation and changes nothing", "[kv]") {
    PagedKvCache kv(small_shape());
    const int32_t a = kv.create_sequence(), b = kv.create_sequence();
    REQUIRE(kv.reserve(a, 16));  // 4 blocks
    CHECK_FALSE(kv.reserve(b, 12));  // needs 3, 2 free
    CHECK(kv.free_blocks() == 2);
    CHECK(kv.reserve(b, 8));
    CHECK(kv.free_blocks() == 0);
    kv.free_sequence(a);
    CHECK(kv.free_blocks() == 4);
}

TEST_CASE("kv cache: misuse raises specd::Error naming the problem", "[kv]") {
    PagedKvCache kv(small_shape());
    const int32_t a = kv.create_sequence();
    CHECK_THROWS_WITH(kv.reserve(a, 17), Catch::Contains("exceed the context size 16"));
    CHECK_THROWS_WITH(kv.set_length(a, 1), Catch::Contains("beyond the reserved blocks"));
    CHECK_THROWS_WITH(kv.free_sequence(7), Catch::Contains("unknown sequence 7"));
    kv.create_sequence();
    kv.create_sequence();
    CHECK_THROWS_WITH(kv.create_sequence(), Catch::Contains("sequence slots are in use"));
    KvCacheShape bad = small_shape();
    bad.n_blocks = 0;
    CHECK_THROWS_AS(PagedKvCache(bad), Error);
}

TEST_CASE("kv cache: freed sequence ids are reused and start empty", "[kv]") {
    PagedKvCache kv(small_shape());
    const int32_t a = kv.create_sequence();
    REQUIRE(kv.reserve(a, 4));
    kv.set_length(a, 4);
    kv.free_sequence(a);
    const int32_t b = kv.create_sequence();
    CHECK(b == a);
    CHECK(kv.length(b) == 0);
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("kv cache: f16 pools take half the bytes of f32 and store keys rounded to nearest even, f32 exactly", "[kv]") {
    KvCacheShape s16 = small_shape(), s32 = small_shape();
    CHECK(s16.type == TensorType::F16);  // the default, as llama.cpp's
    s32.type = TensorType::F32;
    CHECK(PagedKvCache::pool_bytes(s16) * 2 == PagedKvCache::pool_bytes(s32));
    CHECK(PagedKvCache::block_bytes(s32) == 2u * 2 * 4 * 8 * sizeof(float));
    // 1 + 2^-11 is halfway between two f16 values: it rounds to the even one (1.0);
    // 1 + 3 * 2^-11 rounds up to 1 + 2^-9; 70000 overflows f16 to infinity.
    const float in[8] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -2.5f, 0.1f, 70000.0f, 0.0f, -0.0f, 65504.0f};
    for (const KvCacheShape& shape : {s16, s32}) {
        PagedKvCache kv(shape);
        const int32_t a = kv.create_sequence();
        REQUIRE(kv.reserve(a, 1));
        kv.write(a, 1, 0, in, in);
        float k[8], v[8];
        kv.read_key(a, 1, 0, k);
        kv.read_value(a, 1, 0, v);
        for (int i = 0; i < 8; ++i) {
            const float expect = shape.type == TensorType::F16 ? fp16_to_fp32(fp32_to_fp16(in[i])) : in[i];
            CHECK(k[i] == expect);
            CHECK(v[i] == expect);
        }
        if (shape.type == TensorType::F16) {
            CHECK(k[0] == 1.0f);
            CHECK(k[1] == 1.0f + 0x1p-9f);
            CHECK(k[3] != 0.1f);
            CHECK(std::isinf(k[4]));
        }
    }
}

TEST_CASE("kv cache: a type other than f16 or f32 is refused with a clear error", "[kv]") {
    KvCacheShape bad = small_shape();
    bad.type = TensorType::Q8_0;
    CHECK_THROWS_WITH(PagedKvCache(bad), Catch::Contains("f32 or f16, not q8_0"));
}
