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

namespace specd {

struct SpeculativeParams {
    int32_t draft_max = 8;      // MAX_DRAFT_TOKENS: most tokens drafted per step; 0 = plain decoding
    int32_t draft_min = 0;      // drafts shorter than this are not verified (decode plainly that step)
    float draft_p_min = 0.0f;   // a draft model stops when its top probability falls below this; 0 = off
    bool adaptive = true;       // choose k per step from measured acceptance and costs (else always draft_max)
    void validate() const;      // specd::Error naming the field, value and allowed range
    bool operator==(const SpeculativeParams&) const = default;
};

// Counters of one generation (or summed over many); formatting is elsewhere.
struct SpecStats {
    int64_t n_steps = 0;         // target forwards in the decode loop
    int64_t n_drafts = 0;        // steps that verified at least one drafted token
    int64_t n_drafted = 0;       // drafted tokens verified
    int64_t n_accepted = 0;      // of those, accepted
    std::vector<int64_t> drafted_per_position;   // (draft_max) drafts that reached position i
    std::vector<int64_t> accepted_per_position;  // (draft_max) drafts whose token i was accepted
    double draft_ms = 0.0;       // time in the proposer
    double verify_ms = 0.0;      // time in target forwards and the acceptance rule
    int64_t k_sum = 0;           // sum of the k chosen per step (mean k = k_sum / n_steps)
    int64_t n_load_capped = 0;   // steps whose k the load policy cut (runtime only)

    double acceptance_rate() const { return n_drafted ? static_cast<double>(n_accepted) / static_cast<double>(n_drafted) : 0.0; }
    // 1 + accepted per draft: tokens a verifying forward yields on average.
    double mean_accept_len() const { return n_drafts ? 1.0 + static_cast<double>(n_accepted) / static_cast<double>(n_drafts) : 1.0; }
    std::vector<double> accept_rate_per_position() const;
    void add(const SpecStats& other);
};

// The rule for one drafted token. q: the target's distribution at this
// position; p: the draft's (empty = a point mass on `token`, as for n-gram
// drafts). Accepts with probability min(1, q(x)/p(x)); on rejection draws
// the recovered token from normalize(max(0, q - p)). A point-mass q
// (greedy) decides without drawing.
class AcceptanceRule {
public:
    explicit AcceptanceRule(int32_t n_vocab);
    bool accept(std::span<const TokenProb> q, std::span<const TokenProb> p, int32_t token, Rng& rng,
                int32_t* recovered);
    // normalize(max(0, q - p)) as a sparse list (for tests), p empty = point mass on `token`.
    void residual(std::span<const TokenProb> q, std::span<const TokenProb> p, int32_t token, std::vector<TokenProb>& out);

private:
    std::vector<float> dense_;        // (n_vocab) scratch, all zero between calls
    std::vector<TokenProb> residual_; // scratch
};

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
    AcceptanceRule rule_;
    std::vector<int32_t> history_;   // prompt + generated (capacity n_ctx)
    std::vector<int32_t> verify_in_; // (k+1) pending token + draft
    std::vector<TokenProb> q_;       // target distribution scratch
    std::vector<int32_t> argmax_;    // (k+1) greedy verification: each row's argmax
    Draft draft_;
    // The draft-length controller outlives one generation: what a draft and
    // a verification cost is a property of the models and the machine, and
    // a 200-token generation is only ~25 steps, too few to learn it anew.
    // Replaced when the speculative parameters change.
    std::unique_ptr<DraftLengthController> controller_;
};

}  // namespace specd
