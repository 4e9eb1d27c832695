// How far the load caps a request's draft length (LoadPolicy), in a header
// of its own so that config/runtime_config.h (which sets its budget) need
// not include the session's.
#pragma once

#include <cstdint>

namespace specd {

class StepCostProbe;  // engine/batch_verifier.h

// Under load a verify step stops being memory-bound and drafted tokens stop
// being nearly free (vLLM and SGLang users report speculation losing
// throughput at large batch sizes). The policy keeps the tokens one verify
// step would carry if every running request joined it near a budget: with B
// requests running (B >= 2), k is capped at budget / B - 1, so k shrinks as
// the load grows, and speculation turns off by itself (k = 0) once that cap
// falls below kMinUsefulDraft; a request alone is never capped. The default
// 10 (measured with stories15M on 2 cores, docs/BENCHMARKS.md: k = 3 for
// three sessions ran at 0.75x of plain) allows k = 4 for two requests and
// turns speculation off from three.
// Steps it capped are counted in SpecStats::n_load_capped.
//
// The budget is raised where the verifier measured extra rows to be cheap:
// to the rows at which one step costs two single-row steps
// (StepCostProbe::doubling_rows), up to kMaxMeasuredBudget. On 2 cores with
// stories15M that is ~7 rows while a step is compute-bound (the budget
// stays 10) and ~50 while it is bound by memory (capped to 24), where four
// sessions drafting k = 5 ran at 1.5-1.7x of plain against 0.9-1.2x with
// the budget of 10.
struct LoadPolicy {
    int32_t verify_token_budget = 10;  // tokens per verify step the policy aims at; <= 0: no cap
    const StepCostProbe* probe = nullptr;  // not owned; null: the budget is fixed
    static constexpr int32_t kMinUsefulDraft = 3;  // a cap below this turns speculation off
    // The most a measured budget may be: the fit is linear in rows, and a
    // step's cost bends upward once its rows stop being nearly free.
    static constexpr int32_t kMaxMeasuredBudget = 24;
    int32_t budget() const;
    int32_t k_cap(int32_t batch_requests, int32_t draft_max) const;
};

}  // namespace specd
