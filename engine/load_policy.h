// How far the load caps a request's draft length (LoadPolicy), in a header
// of its own so that config/runtime_config.h (which sets its budget) need
// not include the session's.
#pragma once

#include <cstdint>

namespace specd {

class StepCostProbe;  // engine/batch_verifier.h

// Under load a verify step stops being memory-bound and drafted tokens stop
// being nearly free (vLLM and SGLang users report speculation losing
// throughput at large batch sizes). A request alone is never capped.
//
// Without a measured step cost the policy keeps the tokens one verify step
// would carry if every running request joined it near a budget: with B
// requests running (B >= 2), k is capped at budget / B - 1, so k shrinks as
// the load grows, and speculation turns off by itself (k = 0) once that cap
// falls below kMinUsefulDraft. The default 10 (measured with stories15M on 2
// cores, docs/BENCHMARKS.md: k = 3 for three sessions ran at 0.75x of plain)
// allows k = 4 for two requests and turns speculation off from three.
//
// Once the verifier has measured how a step's cost grows with its rows
// (StepCostProbe: T(r) = T(1) + (r - 1) * per_row), the cap is the k that
// maximises the tokens per millisecond of B requests each drafting k:
//   B * E(k) / (T(B * (k + 1)) + k * d)   against plain's   B / T(B),
// with E(k) = 1 + a + ... + a^k the tokens a step emits at per-position
// acceptance a, and d the wall time of one draft token (its drafting round
// runs before the verification, on the same cores). Speculation stays on
// only where that promises kMinGain over plain: on a memory-bound target
// (extra rows nearly free) it keeps drafting at 16 requests, on a
// compute-bound one (stories15M on 2 cores, a draft as costly as a third of
// the target) it turns off from two or three, as the fixed budget did.
// Steps it capped are counted in SpecStats::n_load_capped.
struct LoadPolicy {
    int32_t verify_token_budget = 10;  // tokens per verify step the policy aims at; <= 0: no cap at all
    const StepCostProbe* probe = nullptr;  // not owned; null: the budget rule only
    static constexpr int32_t kMinUsefulDraft = 3;  // budget rule: a cap below this turns speculation off
    // Measured rule: the throughput speculation must promise over plain
    // decoding; the margin covers the error of a linear fit and the
    // drafting rounds' overhead beyond their measured time.
    static constexpr double kMinGain = 1.1;
    // What a request assumes before it has drafted: the draft-length
    // controller's prior acceptance, and a draft token costing a tenth of a
    // single-row target step (the usual pairing of a draft ~10x smaller).
    static constexpr double kPriorAcceptance = 0.8;
    static constexpr double kPriorDraftShare = 0.1;

    // What one request knows of its own drafting; acceptance < 0 and
    // draft_token_ms < 0 mean not yet measured (the priors above apply).
    struct DraftCosts {
        double acceptance = -1.0;      // per-position acceptance, 0..1
        double draft_token_ms = -1.0;  // wall ms per drafted token
    };

    // The longest draft a request may make with `batch_requests` running;
    // 0: decode plainly.
    int32_t k_cap(int32_t batch_requests, int32_t draft_max, DraftCosts costs) const;
    int32_t k_cap(int32_t batch_requests, int32_t draft_max) const;  // the priors
};

}  // namespace specd
