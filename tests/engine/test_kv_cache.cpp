#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/kv_cache.h"

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
            kv.key(a, l, p)[0] = static_cast<float>(100 * l + p);
            kv.value(a, l, p)[7] = static_cast<float>(-100 * l - p);
        }
    }
    kv.set_length(a, 10);
    CHECK(kv.used_blocks() == 3);
    kv.truncate(a, 3);
    CHECK(kv.length(a) == 3);
    CHECK(kv.used_blocks() == 1);
    for (int32_t p = 0; p < 3; ++p) {
        CHECK(kv.key(a, 1, p)[0] == static_cast<float>(100 + p));
        CHECK(kv.value(a, 1, p)[7] == static_cast<float>(-100 - p));
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
