// The context a runtime serves: ctx_size kept (capped to the trained
// length); the default is the trained length capped by what KV_CACHE_RATIO
// of the budget holds for max_sequences full sequences, never below
// kMinDefaultContext (or the trained length when shorter).
#include <catch2/catch.hpp>

#include <string>

#include "engine/context_plan.h"
#include "engine/error.h"
#include "support/models.h"

using namespace specd;

namespace {

// Llama-3.1-8B's KV at f16 (32 layers, 8 KV heads of 128): 128 KiB a token,
// plus a Llama-3.2-1B draft (16 layers, 8 of 64): 32 KiB.
constexpr int64_t kPairBytes = (128 + 32) * 1024;
constexpr int64_t kGiB = int64_t{1} << 30;

ContextInputs inputs(int32_t requested, int32_t train, int64_t budget, int32_t sequences) {
    ContextInputs in;
    in.requested = requested;
    in.n_ctx_train = train;
    in.kv_cache_ratio = 0.85;
    in.budget_bytes = budget;
    in.kv_bytes_per_token = kPairBytes;
    in.max_sequences = sequences;
    return in;
}

}  // namespace

TEST_CASE("context plan: an explicit ctx_size is kept, capped to the trained length", "[context]") {
    const ContextPlan a = plan_context(inputs(2048, 131072, 1 * kGiB, 64));
    CHECK(a.n_ctx == 2048);  // even where the budget would not hold 64 of them: the pool admits fewer
    CHECK(a.reason == "ctx_size 2048 as set (trained 131072)");
    const ContextPlan b = plan_context(inputs(8192, 256, 64 * kGiB, 4));
    CHECK(b.n_ctx == 256);
    CHECK(b.reason == "ctx_size 8192 capped to the trained 256");
}

TEST_CASE("context plan: the default is the trained length when the budget holds it for every sequence", "[context]") {
    // stories15M (trained 256, 6 layers x 288 at f16: 6912 bytes a token), 64 sequences, 8 GiB.
    ContextInputs in = inputs(0, 256, 8 * kGiB, 64);
    in.kv_bytes_per_token = 6912;
    const ContextPlan p = plan_context(in);
    CHECK(p.n_ctx == 256);
    INFO(p.reason);
    CHECK(p.reason.rfind("the trained 256 (KV_CACHE_RATIO 0.85 of 8.0 GiB holds ", 0) == 0);
    CHECK(p.reason.find("for each of 64 sequences (6.8 KiB per token, f16)") != std::string::npos);
}

TEST_CASE("context plan: a long trained context is capped to what KV_CACHE_RATIO of the budget holds", "[context]") {
    // Llama-3.1-8B + 3.2-1B, trained 131072, 64 GiB, 8 sequences:
    // 0.85 * 64 GiB / (8 * 160 KiB) = 44564 tokens, 44560 in whole blocks of 16.
    const ContextPlan p = plan_context(inputs(0, 131072, 64 * kGiB, 8));
    CHECK(p.n_ctx == 44560);
    CHECK(p.n_ctx % 16 == 0);
    CHECK(p.reason == "trained 131072, capped to 44560: KV_CACHE_RATIO 0.85 of 64.0 GiB holds 44560 tokens for each of 8 "
                      "sequences (160.0 KiB per token, f16)");
    // More sequences, shorter contexts; the product stays within the budget.
    const ContextPlan q = plan_context(inputs(0, 131072, 64 * kGiB, 32));
    CHECK(q.n_ctx == 11136);
    CHECK(static_cast<double>(q.n_ctx) * 32 * kPairBytes <= 0.85 * 64 * kGiB);
}

TEST_CASE("context plan: never below the minimum (or the trained length when shorter)", "[context]") {
    // 4 GiB for 64 sequences of the 8B pair: 336 tokens each (whole blocks); the minimum wins.
    const ContextPlan p = plan_context(inputs(0, 131072, 4 * kGiB, 64));
    CHECK(p.n_ctx == kMinDefaultContext);
    CHECK(p.reason.find("capped to the minimum 4096") != std::string::npos);
    CHECK(p.reason.find("holds 336 tokens for each of 64 sequences") != std::string::npos);
    CHECK(p.reason.find("fewer sequences decode at once") != std::string::npos);
    const ContextPlan q = plan_context(inputs(0, 2048, 1 * kGiB, 64));
    CHECK(q.n_ctx == 2048);
}

TEST_CASE("context plan: nonsense inputs are refused by name", "[context]") {
    CHECK_THROWS_WITH(plan_context(inputs(0, 0, kGiB, 1)), Catch::Contains("trained context"));
    CHECK_THROWS_WITH(plan_context(inputs(0, 256, kGiB, 0)), Catch::Contains("max_sequences"));
    ContextInputs in = inputs(0, 256, kGiB, 1);
    in.kv_bytes_per_token = 0;
    CHECK_THROWS_WITH(plan_context(in), Catch::Contains("KV bytes per token"));
}

TEST_CASE("context plan: KV bytes per token of a real model (stories15M, f16 and f32)", "[context]") {
    auto model = test::load("stories15M-f32.gguf");
    CHECK(kv_bytes_per_token(*model, TensorType::F16) == 2 * 6 * 288 * 2);
    CHECK(kv_bytes_per_token(*model, TensorType::F32) == 2 * 6 * 288 * 4);
    CHECK(format_bytes(6912) == "6.8 KiB");
    CHECK(available_memory_bytes() > 0);
}
