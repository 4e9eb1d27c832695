#include "engine/session_core.h"

#include <algorithm>

#include "engine/grammar_decode.h"

namespace specd {

namespace {
SpeculativeParams effective_spec(SpeculativeParams spec, bool speculative) {
    spec.validate();
    if (!speculative) spec.draft_max = 0;
    spec.draft_min = std::min(spec.draft_min, spec.draft_max);
    return spec;
}
}  // namespace

SessionCore::SessionCore(const Tokenizer& tokenizer, std::vector<int32_t> prompt, const GenerationParams& params,
                         const SpeculativeParams& spec, bool speculative, int32_t n_ctx, LoadPolicy load)
    : tokenizer_(tokenizer),
      prompt_(std::move(prompt)),
      n_prompt_(static_cast<int32_t>(prompt_.size())),
      params_(params),
      spec_(effective_spec(spec, speculative)),
      n_ctx_(n_ctx),
      load_(load),
      controller_(spec_),
      rng_(Rng(params.sampling.seed).state()),
      draft_seed_(rng_.s[0] ^ (rng_.s[3] * 0x9E3779B97F4A7C15ull)),
      decoder_(tokenizer, DecodeAt::Continuation),
      stop_matcher_(params.stop) {
    params_.sampling.n_prompt = n_prompt_;  // every job carries it: the penalties' output window starts there
    // A coupled request without a seed races with a random one, fixed for
    // the whole request (drawn from the stream just seeded at random).
    if (params_.sampling.coupled && params_.sampling.seed == kRandomSeed) params_.sampling.seed = rng_.s[0] ^ rng_.s[2];
    params_.sampling.validate_for(tokenizer.n_vocab());
    if (params_.max_tokens < 1) throw Error("max_tokens must be >= 1, got " + std::to_string(params_.max_tokens));
    if (params_.stop.size() > kMaxStopSequences)
        throw Error("at most " + std::to_string(kMaxStopSequences) + " stop sequences, got " + std::to_string(params_.stop.size()));
    for (const std::string& s : params_.stop)
        if (s.size() > kMaxStopSequenceBytes)
            throw Error("a stop sequence is " + std::to_string(s.size()) + " bytes; at most " + std::to_string(kMaxStopSequenceBytes));
    check_prompt_fits(prompt_.size(), n_ctx_);
    if (!params_.sampling.grammar.empty()) grammar_ = std::make_unique<GrammarMatcher>(compile_request_grammar(params_.sampling.grammar));
    history_.reserve(static_cast<size_t>(n_ctx_) + 1);
    history_.assign(prompt_.begin(), prompt_.end());
    output_.reserve(static_cast<size_t>(std::min(params_.max_tokens, n_ctx_)));
    stats_ = SpecStats(spec_.draft_max);
}

int32_t SessionCore::max_positions() const {
    return std::min(n_ctx_, n_prompt_ + params_.max_tokens + spec_.draft_max);
}

VerifyJob SessionCore::prefill_job(uint64_t request, uint64_t tag) const {
    VerifyJob job;
    job.request = request;
    job.tag = tag;
    job.prefill = true;
    job.tokens = prompt_;
    job.sampling = params_.sampling;
    job.rng = rng_;
    job.cache_prompt = params_.cache_prompt;
    return job;
}

void SessionCore::stop(StopReason reason) {
    if (finished_) return;
    finished_ = true;
    stop_ = reason;
}

void SessionCore::emit(int32_t token, bool drafted, const TokenLogprobs* lp, size_t lp_index) {
    if (finished_) return;
    if (grammar_) {
        // The verifier drew every token from rows masked by the same
        // grammar; a token it refuses means the two disagree.
        if (!grammar_->accept_token(tokenizer_, token))
            throw Error("grammar: the verifier returned token " + std::to_string(token) + ", which the grammar does not allow here");
        // With a grammar, end-of-generation is allowed only where the text is
        // complete, and ends it whatever stop_at_eos says.
        if (tokenizer_.is_end_of_generation(token)) return stop(StopReason::Eos);
    }
    if (params_.stop_at_eos && tokenizer_.is_end_of_generation(token)) return stop(StopReason::Eos);
    output_.push_back(token);
    pending_emit_.tokens.push_back(token);
    pending_emit_.from_draft.push_back(drafted ? 1 : 0);
    if (params_.sampling.logprobs >= 0) {
        // A verifier that lost the figures (a malformed reply) would leave
        // tokens without them: fail loudly rather than misalign the run.
        if (!lp || lp_index >= lp->size()) throw Error("verifier reply lacks the log-probabilities of token " + std::to_string(token));
        pending_emit_.logprobs.append(*lp, lp_index);
    }
    if (stop_matcher_.active()) {
        decoded_.clear();
        decoder_.push(token, decoded_);
        const bool matched = stop_matcher_.feed(decoded_, pending_emit_.text);
        pending_emit_.text_ends.push_back(static_cast<uint32_t>(pending_emit_.text.size()));
        if (matched) return stop(StopReason::StopSequence);
    } else {
        decoder_.push(token, pending_emit_.text);
        pending_emit_.text_ends.push_back(static_cast<uint32_t>(pending_emit_.text.size()));
    }
    if (static_cast<int32_t>(output_.size()) >= params_.max_tokens) return stop(StopReason::Length);
    // The grammar is complete and admits nothing more: only an
    // end-of-generation token could follow, so the answer ends here.
    if (grammar_ && grammar_->must_end()) stop(StopReason::Eos);
}

void SessionCore::on_prefill(const VerifyOutcome& o) {
    if (!o.ok) throw Error(o.error);
    rng_ = o.rng;
    last_load_ = std::max({1, o.batch_requests, o.open_requests});
    n_cached_prompt_ = o.cached_tokens;
    history_.push_back(o.next);
    emit(o.next, false, &o.logprobs, 0);
    if (!finished_ && static_cast<int32_t>(history_.size()) > n_ctx_) stop(StopReason::ContextFull);
}

void SessionCore::seed_controller(const DraftLengthController& learned) {
    if (learned.params() == spec_) controller_ = learned;
}

int32_t SessionCore::next_k() {
    draft_.clear();
    draft_ms_ = 0.0;
    if (spec_.draft_max == 0) return 0;
    const int32_t cached = static_cast<int32_t>(history_.size()) - 1;
    const int32_t remaining = params_.max_tokens - static_cast<int32_t>(output_.size());
    const int32_t limit = std::max(0, std::min({spec_.draft_max, n_ctx_ - cached - 1, remaining - 1}));
    int32_t k = std::min(controller_.next_k(), limit);
    LoadPolicy::DraftCosts costs;
    costs.acceptance = controller_.alpha();
    if (stats_.n_drafted > 0) costs.draft_token_ms = stats_.draft_ms / static_cast<double>(stats_.n_drafted);
    const int32_t cap = load_.k_cap(last_load_, spec_.draft_max, costs);
    load_plain_ = cap == 0;
    k_chosen_ = true;
    if (cap < k) {
        k = cap;
        ++stats_.n_load_capped;
    }
    return k;
}

DraftJob SessionCore::draft_job(uint64_t request, uint64_t tag, int32_t k) const {
    DraftJob job;
    job.request = request;
    job.tag = tag;
    job.context = history_;
    job.k = k;
    job.p_min = spec_.draft_p_min;
    job.sampling = params_.sampling;
    job.rng = rng_;
    job.cache_prompt = params_.cache_prompt;
    return job;
}

void SessionCore::on_draft(const DraftOutcome& o) {
    rng_ = o.rng;
    draft_ = o.draft;
    draft_ms_ = o.step_ms;
    if (grammar_) {
        // A token the grammar forbids is rejected for sure (its row gives it
        // probability 0): cut the draft there, so nothing after it costs a
        // verification row. Exactly so when the draft is a point mass or
        // the target greedy: the recovered token is then a plain draw from
        // the target's row. A sampled draft's rejection draws from the
        // residual max(0, q - p) instead, so there the forbidden token stays,
        // last, for the verifier to reject by the rule.
        size_t keep = grammar_prefix(*grammar_, tokenizer_, draft_.tokens);
        if (keep < draft_.tokens.size() && draft_.has_probs && !params_.sampling.greedy()) ++keep;
        draft_.tokens.resize(keep);
        if (draft_.has_probs) draft_.probs.resize(keep);
    }
    if (static_cast<int32_t>(draft_.tokens.size()) < std::max(1, spec_.draft_min)) draft_.clear();
}

RngState SessionCore::draft_rng(uint64_t n) const {
    return Rng(draft_seed_ ^ (0xD1B54A32D192ED03ull * (n + 1))).state();
}

void SessionCore::disable_speculation() {
    spec_.draft_max = 0;
    draft_.clear();
}

VerifyJob SessionCore::verify_job(uint64_t request, uint64_t tag) const {
    VerifyJob job;
    job.request = request;
    job.tag = tag;
    job.tokens.reserve(draft_.tokens.size() + 1);
    job.tokens.push_back(history_.back());
    job.tokens.insert(job.tokens.end(), draft_.tokens.begin(), draft_.tokens.end());
    job.n_draft = static_cast<int32_t>(draft_.tokens.size());
    job.draft_has_probs = draft_.has_probs;
    if (draft_.has_probs) job.draft_probs = draft_.probs;
    job.sampling = params_.sampling;
    job.rng = rng_;
    return job;
}

void SessionCore::on_verify(const VerifyOutcome& o) {
    if (!o.ok) throw Error(o.error);
    rng_ = o.rng;
    last_load_ = std::max({1, o.batch_requests, o.open_requests});
    const int32_t n_draft = static_cast<int32_t>(draft_.tokens.size());
    const int32_t n_accepted = o.n_accepted;
    // A step a verifier ran ahead (no next_k() before it) is one the load
    // policy kept plain too.
    if (!k_chosen_ && load_plain_ && spec_.draft_max > 0) ++stats_.n_load_capped;
    k_chosen_ = false;
    stats_.record_step(n_draft, n_accepted, draft_ms_, o.step_ms);
    if (spec_.draft_max > 0) controller_.record(n_draft, n_accepted, draft_ms_, o.step_ms);
    for (int32_t i = 0; i < n_accepted; ++i) {
        const int32_t d = draft_.tokens[static_cast<size_t>(i)];
        history_.push_back(d);
        emit(d, true, &o.logprobs, static_cast<size_t>(i));
    }
    history_.push_back(o.next);
    emit(o.next, false, &o.logprobs, static_cast<size_t>(n_accepted));
    draft_.clear();
    // The pending token needs a cache slot on the next step.
    if (!finished_ && static_cast<int32_t>(history_.size()) > n_ctx_) stop(StopReason::ContextFull);
}

int32_t SessionCore::run_ahead_limit() const {
    if (finished_ || !draft_.tokens.empty()) return 0;
    // A speculative request runs ahead only while the load policy keeps it
    // plain: when its controller chose k = 0 it must decide again at the
    // next step (its cost estimates are young, and it probes the draft
    // every few plain steps).
    if (spec_.draft_max > 0 && !load_plain_) return 0;
    // The job in flight emits one token and grows the history by one; each
    // step after it needs that history to still fit (on_verify stops the
    // request once the history outgrows n_ctx).
    const int32_t history_after = static_cast<int32_t>(history_.size()) + 1;
    const int32_t emitted_after = static_cast<int32_t>(output_.size()) + 1;
    return std::max(0, std::min(params_.max_tokens - emitted_after, n_ctx_ - history_after));
}

void SessionCore::take_emitted(Emitted& out) {
    out.tokens.swap(pending_emit_.tokens);
    out.from_draft.swap(pending_emit_.from_draft);
    out.text.swap(pending_emit_.text);
    out.text_ends.swap(pending_emit_.text_ends);
    std::swap(out.logprobs, pending_emit_.logprobs);
    pending_emit_.logprobs.clear();
    pending_emit_.tokens.clear();
    pending_emit_.from_draft.clear();
    pending_emit_.text.clear();
    pending_emit_.text_ends.clear();
    if (!finished_) return;
    // The final flush (a held-back tail) belongs to the last token.
    if (!stop_matcher_.active()) {
        decoder_.flush(out.text);
    } else {
        decoded_.clear();
        decoder_.flush(decoded_);
        if (!stop_matcher_.feed(decoded_, out.text)) stop_matcher_.flush(out.text);
    }
    if (!out.text_ends.empty()) out.text_ends.back() = static_cast<uint32_t>(out.text.size());
}

}  // namespace specd
