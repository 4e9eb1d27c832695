// CapacityPlan: the thread pools' widths, pool sharing, pinning offsets and
// KV pool sizing a process derives from its config and machine, checked
// branch by branch without models or threads.
#include <catch2/catch.hpp>

#include <string>

#include "actors/capacity_plan.h"
#include "engine/error.h"

using namespace specd;

namespace {

RuntimeConfig config_with(int32_t threads_target, int32_t threads_draft) {
    RuntimeConfig c;
    c.threads_target = threads_target;
    c.threads_draft = threads_draft;
    return c;
}

KvPoolInputs kv_inputs() {
    KvPoolInputs in;
    in.budget_bytes = 1000 * 1000;
    in.ratio = 0.5;
    in.block_bytes = 1000;  // 500,000 bytes for the pools: 500 blocks
    in.shape_blocks = 10000;
    in.block_size = 16;
    in.n_ctx = 256;         // 16 blocks a context
    return in;
}

}  // namespace

TEST_CASE("capacity plan: the draft gets a pool of its own when both fit the machine, else shares the target's", "[capacity_plan]") {
    const CapacityPlan plan(config_with(0, 0), true, true, 8);
    CHECK(plan.target_threads() == 8);
    CHECK(plan.draft_threads() == 8);
    // 8 + 8 > 8 hardware threads with threads_draft unset: they share.
    CHECK(plan.share_pool());
    const CapacityPlan wide(config_with(4, 0), true, true, 8);
    CHECK(wide.target_threads() == 4);
    CHECK(wide.draft_threads() == 4);
    CHECK_FALSE(wide.share_pool());
    CHECK(wide.compute_threads() == 8);
    CHECK(wide.target_first_cpu() == 0);
    CHECK(wide.draft_first_cpu() == 4);
}

TEST_CASE("capacity plan: an explicit draft width never shares, even oversubscribed", "[capacity_plan]") {
    const CapacityPlan plan(config_with(2, 1), true, true, 2);
    CHECK(plan.target_threads() == 2);
    CHECK(plan.draft_threads() == 1);
    CHECK_FALSE(plan.share_pool());
    CHECK(plan.compute_threads() == 3);
    CHECK(plan.draft_first_cpu() == 2);
}

TEST_CASE("capacity plan: a shared pool counts its threads once", "[capacity_plan]") {
    const CapacityPlan plan(config_with(2, 0), true, true, 2);
    CHECK(plan.share_pool());
    CHECK(plan.compute_threads() == 2);
}

TEST_CASE("capacity plan: one model alone", "[capacity_plan]") {
    SECTION("target only (no draft model, or a target node)") {
        const CapacityPlan plan(config_with(0, 0), true, false, 4);
        CHECK(plan.target_threads() == 4);
        CHECK_FALSE(plan.share_pool());
        CHECK(plan.compute_threads() == 4);
    }
    SECTION("a draft node: its pool starts at the first CPU") {
        const CapacityPlan plan(config_with(3, 0), false, true, 4);
        CHECK(plan.draft_threads() == 3);
        CHECK_FALSE(plan.share_pool());
        CHECK(plan.compute_threads() == 3);
        CHECK(plan.draft_first_cpu() == 0);
    }
}

TEST_CASE("capacity plan: pinning follows the config, except a shared pool with pipelined drafts", "[capacity_plan]") {
    RuntimeConfig c = config_with(2, 0);
    c.cpu_affinity = "auto";
    c.pipeline_drafts = "on";
    CHECK(CapacityPlan(c, true, true, 2).affinity() == "off");  // shared and pipelined: both threads may run at once
    CHECK(CapacityPlan(c, true, true, 4).affinity() == "auto");  // two pools: each pins to its own CPUs
    c.pipeline_drafts = "auto";
    CHECK(CapacityPlan(c, true, true, 2).affinity() == "auto");
    c.cpu_affinity = "on";
    CHECK(CapacityPlan(c, true, false, 2).affinity() == "on");
}

TEST_CASE("capacity plan: KV blocks are the ratio of the budget, at most the shape's", "[capacity_plan]") {
    KvPoolInputs in = kv_inputs();
    CHECK(CapacityPlan::kv_blocks(in) == 500);
    in.shape_blocks = 40;  // max_sequences full contexts need only 40
    CHECK(CapacityPlan::kv_blocks(in) == 40);
    in = kv_inputs();
    in.ratio = 0.85;
    CHECK(CapacityPlan::kv_blocks(in) == 850);
}

TEST_CASE("capacity plan: a budget below one context is an error naming the figures", "[capacity_plan]") {
    KvPoolInputs in = kv_inputs();
    in.budget_bytes = 30000;  // 15,000 bytes: 15 blocks, one context needs 16
    try {
        (void)CapacityPlan::kv_blocks(in);
        FAIL("expected specd::Error");
    } catch (const Error& e) {
        const std::string what = e.what();
        CHECK(what.find("KV cache budget too small") != std::string::npos);
        CHECK(what.find("15000 bytes") != std::string::npos);
        CHECK(what.find("hold 15 blocks") != std::string::npos);
        CHECK(what.find("needs 16") != std::string::npos);
    }
    in.budget_bytes = 32000;  // exactly one context
    CHECK(CapacityPlan::kv_blocks(in) == 16);
    in.n_ctx = 257;  // a partial block counts: 17 a context
    CHECK_THROWS_AS(CapacityPlan::kv_blocks(in), Error);
}

TEST_CASE("capacity plan: the machine's available memory is read", "[capacity_plan]") {
    CHECK(CapacityPlan::available_ram_bytes() > 0);
}

TEST_CASE("capacity plan: a front end's network threads, as configured or one per 8 hardware threads, 1 to 4", "[capacity_plan]") {
    CHECK(CapacityPlan::io_threads(3, 64) == 3);   // configured wins
    CHECK(CapacityPlan::io_threads(0, 2) == 1);    // never none
    CHECK(CapacityPlan::io_threads(0, 16) == 2);
    CHECK(CapacityPlan::io_threads(0, 256) == 4);  // never more than 4
}
