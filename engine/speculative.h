// Lossless speculative decoding for one sequence: a proposer drafts k
// tokens, one batched target forward over [pending, d1..dk] yields k+1
// distributions, and the acceptance rule (Leviathan et al. 2023, Chen et al.
// 2023) keeps the output exactly the target's: identical tokens under greedy
// sampling, the target's distribution under sampling. With k = 0 the same
// loop is plain decoding, so on/off compare like with like.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/proposer.h"
#include "engine/spec_stats.h"
#include "engine/speculative_params.h"
#include "engine/verify_draft.h"

namespace specd {

// Picks k each step to maximise expected tokens per unit time,
// E(k) / (k·c + v(k+1)) with E(k) = (1 - α^(k+1)) / (1 - α) (Leviathan's
// formula), from running estimates of the acceptance rate α, the draft cost
// c per token and the verify cost v(T) for T tokens. k = 0 (plain) wins when
// the draft is poor; it then probes with k = 1 now and then.
class DraftLengthController {
public:
    explicit DraftLengthController(const SpeculativeParams& params);
    int32_t next_k();
    // One verified step: k drafted, n accepted, and its costs.
    void record(int32_t k, int32_t n_accepted, double draft_ms, double verify_ms);
    double alpha() const { return alpha_; }
    const SpeculativeParams& params() const { return params_; }

private:
    double verify_cost(int32_t tokens) const;
    // Draft time of k tokens: fixed + k * per_token, fitted to the steps seen.
    double draft_cost(int32_t k) const;
    SpeculativeParams params_;
    double alpha_ = 0.8;           // prior: a decent draft
    // EMA moments of (k, draft ms) over drafting steps; draft_n_ = 0 unknown.
    double draft_n_ = 0.0, draft_mk_ = 0.0, draft_mkk_ = 0.0, draft_my_ = 0.0, draft_mky_ = 0.0;
    int32_t explore_countdown_ = 0;
    std::vector<double> verify_ms_;  // (draft_max + 2) EMA by token count; < 0 unknown
    int32_t plain_streak_ = 0;
};

struct SpeculativeResult : GenerationResult {
    SpecStats stats;
    std::vector<bool> from_draft;  // (tokens.size()) true where the token was a drafted token the target accepted
};

class SpeculativeDecoder {
public:
    // Called after every decode step once the caches are rolled back:
    // `accepted` is prompt + output so far (its last token is pending, not
    // cached). For tests that check the rollback invariants.
    using StepObserver = std::function<void(const PagedKvCache& kv, int32_t seq, std::span<const int32_t> accepted)>;

    // The target's forward pass and cache; the proposer drafts (may be null: plain).
    SpeculativeDecoder(ForwardBackend& target, PagedKvCache& kv, Proposer* proposer);

    SpeculativeResult generate(std::span<const int32_t> prompt, const GenerationParams& params,
                               const SpeculativeParams& spec, const TokenCallback& on_token = {});

    void set_step_observer(StepObserver observer) { observer_ = std::move(observer); }

private:
    ForwardBackend& fwd_;
    PagedKvCache& kv_;
    Proposer* proposer_;
    StepObserver observer_;
    DraftVerifier verifier_;
    std::vector<int32_t> history_;   // prompt + generated (capacity n_ctx)
    std::vector<int32_t> verify_in_; // (k+1) pending token + draft
    std::vector<int32_t> argmax_;    // (k+1) greedy verification: each row's argmax
    Draft draft_;
    // The draft-length controller outlives one generation: what a draft and
    // a verification cost is a property of the models and the machine, and
    // a 200-token generation is only ~25 steps, too few to learn it anew.
    // Replaced when the speculative parameters change.
    std::unique_ptr<DraftLengthController> controller_;
};

}  // namespace specd
