// LoadPolicy: how far the load caps a request's draft length, with a fixed
// budget and with one measured by the verifier's StepCostProbe.
#include <catch2/catch.hpp>

#include "engine/batch_verifier.h"
#include "engine/load_policy.h"

using namespace specd;

TEST_CASE("load policy: k shrinks as the load grows and speculation turns off once the cap is too short to pay", "[batch]") {
    LoadPolicy p;  // default budget 10
    CHECK(p.k_cap(1, 8) == 8);   // alone: never capped
    CHECK(p.k_cap(2, 8) == 4);
    CHECK(p.k_cap(3, 8) == 0);   // cap 2 < kMinUsefulDraft
    CHECK(p.k_cap(64, 8) == 0);
    p.verify_token_budget = 16;
    CHECK(p.k_cap(2, 8) == 7);
    CHECK(p.k_cap(2, 4) == 4);   // never above draft-max
    CHECK(p.k_cap(4, 8) == 3);
    CHECK(p.k_cap(5, 8) == 0);
    p.verify_token_budget = 0;
    CHECK(p.k_cap(100, 8) == 8);
}

TEST_CASE("load policy: with a measured step cost, speculation stays on at 16 requests where rows are nearly free and turns off where they are not",
          "[batch]") {
    // The inflated 1.1B q8_0 target on 2 cores (docs/BENCHMARKS.md):
    // T(1) 70 ms, ~3.6 ms per extra row; a stories15M q4_0 draft token ~1 ms.
    StepCostProbe memory_bound;
    memory_bound.record(1, 70.0);
    memory_bound.record(16, 70.0 + 15 * 3.6);
    LoadPolicy p;
    p.probe = &memory_bound;
    LoadPolicy::DraftCosts good{0.7, 1.0};
    CHECK(p.k_cap(1, 8) == 8);  // alone: never capped
    CHECK(p.k_cap(4, 8, good) >= 3);
    const int32_t k16 = p.k_cap(16, 8, good);
    CHECK(k16 >= 1);
    // The chosen k promises at least kMinGain over plain decoding at 16:
    const double t16 = 70.0 + 15 * 3.6, tk = 70.0 + (16 * (k16 + 1) - 1) * 3.6 + k16 * 1.0;
    double e = 0, term = 1;
    for (int i = 0; i <= k16; ++i, term *= 0.7) e += term;
    CHECK((16 * e / tk) / (16 / t16) >= LoadPolicy::kMinGain);
    // A poor draft is not worth its rows at that load, nor at 64.
    CHECK(p.k_cap(16, 8, {0.2, 1.0}) == 0);
    CHECK(p.k_cap(64, 8, good) <= k16);
    // Never above draft-max; no budget, no cap.
    CHECK(p.k_cap(4, 2, good) <= 2);
    p.verify_token_budget = 0;
    CHECK(p.k_cap(100, 8, {0.0, 100.0}) == 8);

    // stories15M f32 target, stories15M q8_0 draft on 2 cores: 9 rows cost
    // 2.3 single-row steps and a draft token a third of a target step; the
    // fixed budget's measurement (k = 3 for three sessions ran at 0.75x of
    // plain) says speculation must be off from three.
    StepCostProbe compute_bound;
    compute_bound.record(1, 0.84);
    compute_bound.record(9, 1.9);
    LoadPolicy q;
    q.probe = &compute_bound;
    const LoadPolicy::DraftCosts costly_draft{0.75, 0.3};
    CHECK(q.k_cap(3, 8, costly_draft) == 0);
    CHECK(q.k_cap(16, 8, costly_draft) == 0);
    // Before the request has drafted, the priors decide (a tenth-size draft, 0.8 acceptance).
    CHECK(q.k_cap(2, 8) == q.k_cap(2, 8, {LoadPolicy::kPriorAcceptance, LoadPolicy::kPriorDraftShare * 0.84}));
}

TEST_CASE("load policy: a step cost that bends past 16 rows is read from the measured steps, not a straight line, so 16 requests decode plainly once 32-row steps were seen",
          "[batch]") {
    // The 1.1B q8_0 construct on 2 Zen 4 cores, packed weights
    // (docs/BENCHMARKS.md): 1 row 33 ms, 8 rows 35, 16 rows 66, 32 rows 147.
    StepCostProbe probe;
    probe.record(1, 33.0);
    probe.record(16, 66.0);
    LoadPolicy p;
    p.probe = &probe;
    const LoadPolicy::DraftCosts good{0.87, 1.0};
    // Through T(1) and the 16-row point a line: 32 rows would cost 101 ms,
    // and k = 1 at 16 requests looks worth it (16 x 1.87 tokens per 102 ms
    // against 16 per 66).
    CHECK(probe.step_ms(32) == Approx(66.0 + 16 * 33.0 / 15.0));
    CHECK(p.k_cap(16, 8, good) >= 1);
    // Seen: a 32-row step costs more than two plain 16-row steps, so every
    // k loses at 16 requests.
    probe.record(32, 147.0);
    CHECK(probe.step_ms(32) == Approx(147.0));
    CHECK(probe.step_ms(24) == Approx((66.0 + 147.0) / 2));
    CHECK(probe.step_ms(64) == Approx(147.0 + 32 * 81.0 / 16.0));  // past the last point: its segment's slope
    CHECK(p.k_cap(16, 8, good) == 0);
    // Four requests still speculate: 4 x 4 rows cost 66 ms against ~40 for 4 plain.
    CHECK(p.k_cap(4, 8, good) >= 2);
    // And a point between: the 8-row steps cost what one row does, so at
    // four requests k = 1 (8 rows, nearly free) is the best buy.
    probe.record(8, 35.0);
    CHECK(probe.step_ms(12) == Approx(35.0 + 4 * 31.0 / 8.0));
    CHECK(p.k_cap(4, 8, good) >= 1);
    CHECK(p.k_cap(16, 8, good) == 0);
}
