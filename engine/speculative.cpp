#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

#include "engine/coupled_sampling.h"

namespace specd {

// ------------------------------------------------------- k controller ---

namespace {
constexpr double kEma = 0.1;           // weight of the newest observation
constexpr int32_t kProbeEvery = 16;    // plain steps between probes of the draft
// A probe drafts this many tokens (within draft-min..draft-max): with one,
// a draft whose cost is mostly per-step (not per-token) looks k times too
// dear per token, and the controller would never draft again.
constexpr int32_t kProbeTokens = 3;
// A draft step cheaper than this share of the fit's prediction restarts the
// fit (normal steps vary by less than 2x; a cold or preempted one by 10x).
constexpr double kRefitBelow = 0.25;
constexpr int32_t kExploreEvery = 16;  // drafting steps between tries of a longer draft
// Weight of one verified draft position in the acceptance estimate: a step
// that reached 16 positions moves it 30% at most, and a few early
// rejections in a row don't turn a good draft off.
constexpr double kAlphaEmaPerPosition = 0.04;
}  // namespace

DraftLengthController::DraftLengthController(const SpeculativeParams& params)
    : params_(params), verify_ms_(static_cast<size_t>(params.draft_max) + 2, -1.0) {}

double DraftLengthController::verify_cost(int32_t tokens) const {
    if (verify_ms_[static_cast<size_t>(tokens)] > 0) return verify_ms_[static_cast<size_t>(tokens)];
    // Unmeasured sizes: interpolate from the nearest measured smaller size,
    // assuming each extra token costs 5% of a single-token step.
    for (int32_t t = tokens - 1; t >= 1; --t) {
        if (verify_ms_[static_cast<size_t>(t)] > 0) {
            const double one = verify_ms_[1] > 0 ? verify_ms_[1] : verify_ms_[static_cast<size_t>(t)];
            return verify_ms_[static_cast<size_t>(t)] + 0.05 * one * (tokens - t);
        }
    }
    return 1.0 + 0.05 * (tokens - 1);
}

double DraftLengthController::draft_cost(int32_t k) const {
    if (draft_n_ <= 0) return k * 0.25 * verify_cost(1);  // unmeasured: a draft a quarter of the target
    // Least squares of draft_ms = fixed + k * per_token over the EMA moments.
    // The fixed part is real (the first drafted token feeds the tokens the
    // target added and finds the draft's weights evicted by the target's
    // pass: stories15M q8_0, 2 threads: ~2.3 ms fixed + 0.55 ms per token);
    // with too little spread in k it falls back to a cost proportional to k.
    const double mean_k = draft_mk_ / draft_n_, mean_y = draft_my_ / draft_n_;
    const double var = draft_mkk_ / draft_n_ - mean_k * mean_k;
    const double proportional = mean_y / std::max(mean_k, 1e-9);
    double per_token = proportional, fixed = 0.0;
    if (var > 0.5) {
        per_token = std::clamp((draft_mky_ / draft_n_ - mean_k * mean_y) / var, 0.1 * proportional, proportional);
        fixed = std::max(0.0, mean_y - per_token * mean_k);
    }
    return fixed + k * per_token;
}

int32_t DraftLengthController::next_k() {
    if (!params_.adaptive || params_.draft_max == 0) return params_.draft_max;
    const double a = std::clamp(alpha_, 0.0, 0.999);
    int32_t best_k = 0;
    double best_rate = 1.0 / verify_cost(1);
    double a_pow = a;  // a^(k+1) for k = 0 -> a
    for (int32_t k = 1; k <= params_.draft_max; ++k) {
        a_pow *= a;
        if (k < params_.draft_min) continue;
        const double expected = (1.0 - a_pow) / (1.0 - a);
        const double rate = expected / (draft_cost(k) + verify_cost(k + 1));
        if (rate > best_rate) {
            best_rate = rate;
            best_k = k;
        }
    }
    if (best_k == 0) {
        if (++plain_streak_ >= kProbeEvery) {
            plain_streak_ = 0;
            return std::clamp<int32_t>(kProbeTokens, std::max<int32_t>(1, params_.draft_min), params_.draft_max);
        }
        return 0;
    }
    plain_streak_ = 0;
    // Now and then draft longer than the model says: the only way to learn
    // the fixed and per-token parts of the draft cost apart, and what a
    // longer draft costs to verify.
    if (++explore_countdown_ >= kExploreEvery && best_k < params_.draft_max) {
        explore_countdown_ = 0;
        return std::min(params_.draft_max, 2 * best_k);
    }
    return best_k;
}

void DraftLengthController::record(int32_t k, int32_t n_accepted, double draft_ms, double verify_ms) {
    const size_t t = static_cast<size_t>(k) + 1;
    if (t < verify_ms_.size()) {
        verify_ms_[t] = verify_ms_[t] > 0 ? (1 - kEma) * verify_ms_[t] + kEma * verify_ms : verify_ms;
    }
    if (k <= 0) return;
    // A draft far cheaper than the fit predicts means the fit was learned
    // from slow steps (the first one, with the draft's weights still cold,
    // or a preempted one): start it again from this step. Slower-than-fit
    // steps only move the averages (a stall must not stop drafting).
    if (draft_n_ > 0 && draft_ms < kRefitBelow * draft_cost(k)) draft_n_ = draft_mk_ = draft_mkk_ = draft_my_ = draft_mky_ = 0.0;
    // EMA of the moments (weights sum to draft_n_, which tends to 1).
    const double kk = k;
    draft_n_ = (1 - kEma) * draft_n_ + kEma;
    draft_mk_ = (1 - kEma) * draft_mk_ + kEma * kk;
    draft_mkk_ = (1 - kEma) * draft_mkk_ + kEma * kk * kk;
    draft_my_ = (1 - kEma) * draft_my_ + kEma * draft_ms;
    draft_mky_ = (1 - kEma) * draft_mky_ + kEma * kk * draft_ms;
    // Positions reached: the accepted ones plus the first rejected one.
    const int32_t reached = n_accepted + (n_accepted < k ? 1 : 0);
    const double observed = static_cast<double>(n_accepted) / reached;
    const double w = std::min(kAlphaEmaPerPosition * reached, 0.3);
    alpha_ = (1 - w) * alpha_ + w * observed;
}

// ---------------------------------------------------------------- decoder ---

SpeculativeDecoder::SpeculativeDecoder(ForwardBackend& target, PagedKvCache& kv, Proposer* proposer)
    : fwd_(target), kv_(kv), proposer_(proposer), verifier_(target.n_vocab()) {
    history_.reserve(static_cast<size_t>(kv.shape().max_seq_len));
}

SpeculativeResult SpeculativeDecoder::generate(std::span<const int32_t> prompt, const GenerationParams& params,
                                               const SpeculativeParams& spec_in, const TokenCallback& on_token) {
    // The penalties' output window starts after the prompt; logit_bias ids must be the target's.
    SamplingParams sampling = params.sampling;
    sampling.n_prompt = static_cast<int32_t>(prompt.size());
    sampling.validate_for(fwd_.n_vocab());
    // Grammars run on the server's path (SessionCore with BatchVerifier) and
    // in PlainDecoder; refused here rather than ignored.
    if (!sampling.grammar.empty()) throw Error("grammar: not supported by the single-sequence speculative decoder (use the server or plain decoding)");
    spec_in.validate();
    if (params.max_tokens < 0) throw Error("max_tokens must be >= 0, got " + std::to_string(params.max_tokens));
    const int32_t n_ctx = kv_.shape().max_seq_len;
    check_prompt_fits(prompt.size(), n_ctx);
    SpeculativeParams spec = spec_in;
    if (!proposer_) spec.draft_max = 0;
    spec.draft_min = std::min(spec.draft_min, spec.draft_max);

    SpeculativeResult result;
    result.n_prompt = static_cast<int32_t>(prompt.size());
    result.tokens.reserve(static_cast<size_t>(params.max_tokens));
    result.stats = SpecStats(spec.draft_max);
    history_.assign(prompt.begin(), prompt.end());
    verify_in_.reserve(static_cast<size_t>(spec.draft_max) + 1);

    const int32_t seq = kv_.create_sequence();
    struct Guard {
        PagedKvCache& kv;
        int32_t seq;
        Proposer* proposer;
        ~Guard() {
            kv.free_sequence(seq);
            if (proposer) proposer->end();
        }
    } guard{kv_, seq, spec.draft_max > 0 ? proposer_ : nullptr};

    Sampler sampler(sampling, fwd_.n_vocab());
    Rng rng(params.sampling.seed);
    if (!controller_ || controller_->params() != spec) controller_ = std::make_unique<DraftLengthController>(spec);
    DraftLengthController& controller = *controller_;
    const Tokenizer& tok = fwd_.model().tokenizer();

    const double t0 = now_ms();
    std::span<const float> logits = prefill(fwd_, kv_, seq, prompt);
    if (guard.proposer) guard.proposer->begin(prompt);
    const double t1 = now_ms();
    result.prompt_ms = t1 - t0;

    // Appends one token to the output; false when generation must stop.
    auto emit = [&](int32_t token, bool drafted) {
        if (params.stop_at_eos && tok.is_end_of_generation(token)) {
            result.stop = StopReason::Eos;
            return false;
        }
        result.tokens.push_back(token);
        result.from_draft.push_back(drafted);
        if (on_token && !on_token(token)) {
            result.stop = StopReason::Cancelled;
            return false;
        }
        if (static_cast<int32_t>(result.tokens.size()) >= params.max_tokens) {
            result.stop = StopReason::Length;
            return false;
        }
        return true;
    };

    if (params.max_tokens == 0) {
        result.stop = StopReason::Length;
        return result;
    }
    std::vector<TokenProb> dist;  // (<= n_vocab) a coupled pick's distribution
    int32_t pending = sampling.coupled ? coupled_sample(sampler, logits.data(), history_, dist) : sampler.sample(logits.data(), history_, rng);
    history_.push_back(pending);
    bool running = emit(pending, false);
    const int32_t V = fwd_.n_vocab();

    while (running) {
        const int32_t cached = kv_.length(seq);  // == history_.size() - 1: pending is not cached yet
        if (cached >= n_ctx) {
            result.stop = StopReason::ContextFull;
            break;
        }
        const int32_t remaining = params.max_tokens - static_cast<int32_t>(result.tokens.size());
        const int32_t k_limit = std::max(0, std::min({spec.draft_max, n_ctx - cached - 1, remaining - 1}));
        const int32_t k = std::min(controller.next_k(), k_limit);

        // Draft.
        const double td0 = now_ms();
        draft_.clear();
        if (k > 0) {
            ProposeRequest req;
            req.context = history_;
            req.k = k;
            req.p_min = spec.draft_p_min;
            req.sampling = &sampling;
            req.rng = &rng;
            proposer_->propose(req, draft_);
            if (static_cast<int32_t>(draft_.tokens.size()) < std::max(1, spec.draft_min)) draft_.clear();
        }
        const int32_t n_draft = static_cast<int32_t>(draft_.tokens.size());
        const double td1 = now_ms();

        // Verify: one target forward over [pending, d1..dk].
        verify_in_.assign(1, pending);
        verify_in_.insert(verify_in_.end(), draft_.tokens.begin(), draft_.tokens.end());
        BatchItem item;
        item.seq = seq;
        item.tokens = verify_in_;
        item.all_logits = true;
        // Greedy without a logit transform needs only each row's argmax, which a
        // backend may hand over without the logits (argmax_: (k+1)).
        bool greedy = false;
        if (sampling.plain_argmax()) {
            argmax_.resize(verify_in_.size());
            greedy = fwd_.forward_greedy(kv_, std::span<const BatchItem>(&item, 1), argmax_);
        }
        if (!greedy) logits = fwd_.forward(kv_, std::span<const BatchItem>(&item, 1));

        TargetRows rows;
        if (greedy) {
            check_argmax(argmax_, V);
            rows.argmax = argmax_.data();
        } else {
            rows.logits = logits.data();
        }
        DraftToVerify to_verify{draft_.tokens, {}};
        if (draft_.has_probs) to_verify.probs = draft_.probs;
        const DraftVerdict verdict = verifier_.verify(rows, to_verify, sampler, rng, history_);
        const int32_t n_accepted = verdict.n_accepted;
        const int32_t next = verdict.next;
        kv_.truncate(seq, cached + 1 + n_accepted);
        const double td2 = now_ms();

        result.stats.record_step(n_draft, n_accepted, td1 - td0, td2 - td1);
        controller.record(n_draft, n_accepted, td1 - td0, td2 - td1);

        // Emit the accepted draft tokens, then the target's own token.
        const size_t first_new = history_.size() - static_cast<size_t>(n_accepted);
        for (int32_t i = 0; i < n_accepted && running; ++i) running = emit(history_[first_new + static_cast<size_t>(i)], true);
        history_.push_back(next);
        pending = next;
        if (running) running = emit(next, false);
        if (running && guard.proposer) guard.proposer->accept(history_);
        if (observer_) observer_(kv_, seq, history_);
    }
    result.gen_ms = now_ms() - t1;
    return result;
}

}  // namespace specd
