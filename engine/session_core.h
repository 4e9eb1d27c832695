// One request's decoding state as a plain state machine, so the session
// actor is a thin shell and a test can drive many of them against a
// BatchVerifier and a BatchDrafter by hand:
//
//   prefill job → on_prefill → { next_k → [draft job → on_draft] →
//   verify job → on_verify }* → finished
//
// It owns the sampling state and the random stream (which travel in the
// jobs), the stop rules (EOS, max_tokens, full context, cancel, deadline),
// the draft-length controller and the statistics. With a grammar
// (SamplingParams::grammar) it also cuts each draft at its first token the
// grammar forbids, and ends the generation ("stop") once the grammar is
// complete and admits nothing more; the verifier masks the rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/generate.h"
#include "engine/grammar.h"
#include "engine/load_policy.h"
#include "engine/speculative.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer.h"

namespace specd {

class SessionCore {
public:
    // `spec.draft_max` 0 (or speculative false) decodes plainly through the
    // same path. With params.sampling.coupled and the random seed
    // (kRandomSeed), a seed is drawn here, so that every job of the request
    // races with the same noise. Throws specd::Error for invalid parameters or a prompt that
    // does not fit `n_ctx`.
    SessionCore(const Tokenizer& tokenizer, std::vector<int32_t> prompt, const GenerationParams& params,
                const SpeculativeParams& spec, bool speculative, int32_t n_ctx, LoadPolicy load = {});

    // The first job: the prompt.
    VerifyJob prefill_job(uint64_t request, uint64_t tag) const;
    void on_prefill(const VerifyOutcome& outcome);

    // How many tokens to draft next (0: verify the pending token alone).
    // Applies the controller, the room left and the load policy.
    int32_t next_k();
    DraftJob draft_job(uint64_t request, uint64_t tag, int32_t k) const;
    void on_draft(const DraftOutcome& outcome);
    // The draft phase failed (draft actor down): go on without speculation.
    void disable_speculation();
    VerifyJob verify_job(uint64_t request, uint64_t tag) const;
    void on_verify(const VerifyOutcome& outcome);

    // Run-ahead: after a job that drafts nothing (the prefill, or a verify
    // job with k = 0), how many more plain steps a verifier may run for this
    // request on its own, each feeding back the token it sampled, before the
    // session must speak again. Each of those steps' outcomes still goes to
    // on_verify in order, so the output is the same as step by step; the
    // limit keeps them within max_tokens and the context, so none is wasted
    // unless the request stops early (EOS, cancel). A speculative request
    // runs ahead only while the load policy keeps it plain (0 otherwise).
    // Call it with the job made but its outcome not yet in.
    int32_t run_ahead_limit() const;

    // The request's random state (the acceptance test's stream).
    const RngState& rng_state() const { return rng_; }
    // A draft random state for the `n`-th draft job, independent of the
    // acceptance stream. Pipelined drafting (a draft asked for before the
    // previous verdict) must not share uniforms with the verifier, or the
    // output would no longer follow the target's distribution; a stream per
    // job also makes discarding a draft free.
    RngState draft_rng(uint64_t n) const;

    void cancel() { stop(StopReason::Cancelled); }
    bool finished() const { return finished_; }
    StopReason stop_reason() const { return stop_; }
    // The stop sequence that ended the generation ("" for any other end).
    const std::string& stop_word() const { return stop_matcher_.matched(); }

    // Tokens emitted since the last take (text decoded as a continuation
    // of the prompt; a split UTF-8 character waits for its last byte, and
    // text that may still begin a stop sequence waits until it cannot; the
    // final take after finishing flushes). A stop sequence ends the
    // generation (StopReason::StopSequence) and the text before it: the
    // tokens that formed it are in `tokens`, their text is not.
    struct Emitted {
        std::vector<int32_t> tokens;
        std::vector<uint8_t> from_draft;  // (tokens) 1 where the token was an accepted draft token
        std::string text;
        // (tokens) byte offset in text where token i's text ends: token i
        // wrote text[text_ends[i-1], text_ends[i]) (the token completing a
        // split character carries all its bytes; the final flush goes to
        // the last token), so a client can mark each token's own text.
        std::vector<uint32_t> text_ends;
        // (tokens) each token's log-probabilities (engine/token_logprobs.h)
        // when the request asked (sampling.logprobs >= 0); else empty.
        TokenLogprobs logprobs;
    };
    void take_emitted(Emitted& out);

    const std::vector<int32_t>& prompt() const { return prompt_; }
    const std::vector<int32_t>& output() const { return output_; }
    const SpecStats& stats() const { return stats_; }
    // The draft-length controller, for a runtime to carry what it learned
    // (costs, acceptance) from finished sessions to new ones: a 128-token
    // request is only ~20 steps, too few to learn them anew.
    const DraftLengthController& controller() const { return controller_; }
    // Starts from `learned` when it was made for the same speculative
    // parameters (else keeps the fresh controller).
    void seed_controller(const DraftLengthController& learned);
    const GenerationParams& params() const { return params_; }
    bool speculative() const { return spec_.draft_max > 0; }
    int32_t n_prompt() const { return n_prompt_; }
    // Prompt tokens the verifier took from its prefix cache instead of computing.
    int32_t n_cached_prompt() const { return n_cached_prompt_; }
    // Positions this request can occupy at most (prompt + output + a draft), for KV admission.
    int32_t max_positions() const;

private:
    // `lp`: the outcome's figures, of which token `lp_index` is this one's (null: none asked).
    void emit(int32_t token, bool drafted, const TokenLogprobs* lp = nullptr, size_t lp_index = 0);
    void stop(StopReason reason);
    const Tokenizer& tokenizer_;
    std::vector<int32_t> prompt_;
    int32_t n_prompt_;
    int32_t n_cached_prompt_ = 0;
    GenerationParams params_;
    SpeculativeParams spec_;
    int32_t n_ctx_;
    LoadPolicy load_;
    DraftLengthController controller_;
    RngState rng_;
    uint64_t draft_seed_ = 0;        // from the request's seed: the draft streams' base
    std::vector<int32_t> history_;   // prompt + output; the last is the pending token
    std::vector<int32_t> output_;
    Draft draft_;                    // the current step's draft
    double draft_ms_ = 0.0;
    int32_t last_load_ = 1;          // requests open on the verifier at the last step
    bool load_plain_ = false;        // the load policy allowed no draft at the last next_k()
    bool k_chosen_ = false;          // next_k() ran since the last on_verify() (not a run-ahead step)
    SpecStats stats_;
    bool finished_ = false;
    StopReason stop_ = StopReason::Length;
    // The grammar at the position after history_ (prompt excluded: it
    // constrains the output); null without one.
    std::unique_ptr<GrammarMatcher> grammar_;
    Tokenizer::StreamDecoder decoder_;
    StopMatcher stop_matcher_;       // params_.stop
    std::string decoded_;            // one token's decoded text on its way through stop_matcher_ (reused)
    Emitted pending_emit_;
};

}  // namespace specd
