// Draft proposers for speculative decoding. Every proposer has one shape:
// given the accepted context it proposes up to k next tokens, optionally with
// the distribution each was drawn from; the verifier never knows which kind
// it is talking to (as vLLM's proposers and llama.cpp's common/speculative).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/thread_pool.h"

namespace specd {

struct Draft {
    std::vector<int32_t> tokens;                 // (k') proposed tokens, k' <= k
    bool has_probs = false;                      // false: verify each token as a point mass
    std::vector<std::vector<TokenProb>> probs;   // (k') the draft distribution each token was drawn from
    void clear() { tokens.clear(); has_probs = false; }
};

struct ProposeRequest {
    std::span<const int32_t> context;  // prompt + every accepted token so far
    int32_t k = 8;                     // most tokens to propose
    float p_min = 0.0f;                // stop early when the draft's top probability falls below this
    const SamplingParams* sampling = nullptr;  // the request's sampling (draft models sample with it)
    Rng* rng = nullptr;
};

class Proposer {
public:
    virtual ~Proposer() = default;
    virtual std::string name() const = 0;
    // A new request starts (the proposer may prefill the prompt).
    virtual void begin(std::span<const int32_t> prompt) = 0;
    // Proposes continuations of request.context into `out` (cleared first).
    virtual void propose(const ProposeRequest& request, Draft& out) = 0;
    // The verifier accepted a prefix; `context` is the new accepted context.
    // Proposers with state roll it back to the longest part still valid.
    virtual void accept(std::span<const int32_t> context) = 0;
    // The request ended; release per-request resources.
    virtual void end() = 0;
};

// n-gram prompt lookup: finds the most recent earlier occurrence of the
// longest suffix of the context (ngram_max down to ngram_min tokens) and
// proposes the tokens that followed it. No model, no probabilities.
class NgramProposer : public Proposer {
public:
    NgramProposer(int32_t ngram_min = 1, int32_t ngram_max = 4);  // 1 <= min <= max
    std::string name() const override { return "ngram"; }
    void begin(std::span<const int32_t>) override {}
    void propose(const ProposeRequest& request, Draft& out) override;
    void accept(std::span<const int32_t>) override {}
    void end() override {}

private:
    int32_t ngram_min_, ngram_max_;
};

// llama.cpp's limits on a draft's vocabulary (common/speculative.cpp), so
// that the pairs people run there run here: Qwen2.5-0.5B (151,936 rows)
// drafts for Qwen2.5-32B (152,064; the extra rows are padding).
inline constexpr int32_t kDraftVocabMaxSizeDifference = 128;  // SPEC_VOCAB_MAX_SIZE_DIFFERENCE
inline constexpr int32_t kDraftVocabCheckStartId = 5;         // SPEC_VOCAB_CHECK_START_TOKEN_ID

// Throws specd::Error, one line naming the first difference, when a draft
// model's vocabulary cannot stand in for the target's. llama.cpp's rule
// (common_speculative_are_compatible): the same vocabulary type, the same
// add_bos and, when set, the same BOS id; likewise add_eos/EOS; sizes within
// kDraftVocabMaxSizeDifference; identical token text for every id from
// kDraftVocabCheckStartId up to the shorter vocabulary's end.
void check_vocab_compatible(const LlamaModel& target, const LlamaModel& draft);

// How a draft's vocabulary lines up with its target's once
// check_vocab_compatible passed: the sizes may differ by a few rows.
// - The draft never proposes an id the target lacks: its logits are read
//   only below `limit` (a masked draft distribution is still a distribution,
//   so rejection sampling keeps the target's exactly).
// - A target id the draft lacks (the target may pick one of its extra rows)
//   is fed to the draft as `substitute`: the draft only predicts worse after
//   it; the target's verification keeps the output exact.
struct DraftVocabMap {
    int32_t draft_vocab = 0;  // the draft's logit row width (its n_vocab)
    int32_t limit = 0;        // min(draft, target) n_vocab: ids the draft may propose
    int32_t substitute = 0;   // the draft's UNK, else id 0
    DraftVocabMap() = default;
    // target_vocab 0: the draft's own size (nothing masked or substituted).
    DraftVocabMap(const LlamaModel& draft, int32_t target_vocab);
    bool masks() const { return limit < draft_vocab; }
    int32_t input(int32_t id) const { return id < draft_vocab ? id : substitute; }
    // out = ids with every id the draft lacks replaced (out cleared first).
    void map_inputs(std::span<const int32_t> ids, std::vector<int32_t>& out) const;
};

// A smaller (or quantised) model as the draft: it keeps its own KV sequence,
// decodes k tokens autoregressively (greedy, or sampling with the request's
// parameters and recording the distribution), and on accept() rolls its
// cache back to the accepted prefix.
class DraftModelProposer : public Proposer {
public:
    // `n_ctx`: the request's context size (the draft's cache holds one sequence of it).
    // `draft_head_tokens`: ForwardOptions::draft_head_tokens of the draft's
    // CPU pass (0 = full output head).
    DraftModelProposer(const LlamaModel& target, const LlamaModel& draft, ThreadPool& pool, int32_t n_ctx,
                       int32_t draft_head_tokens = 0);
    // The draft runs on `draft_backend` (any backend, e.g. a GPU one) whose
    // model() is the draft.
    DraftModelProposer(const LlamaModel& target, std::unique_ptr<ForwardBackend> draft_backend, int32_t n_ctx);
    std::string name() const override;
    void begin(std::span<const int32_t> prompt) override;
    void propose(const ProposeRequest& request, Draft& out) override;
    void accept(std::span<const int32_t> context) override;
    void end() override;

    const PagedKvCache& kv() const { return *kv_; }
    int32_t cached_tokens() const { return static_cast<int32_t>(cached_.size()); }
    int32_t sequence() const { return seq_; }

private:
    // Truncates the draft cache to the longest common prefix with `context`.
    void rollback_to(std::span<const int32_t> context);

    const LlamaModel& draft_;
    DraftVocabMap vocab_;
    std::unique_ptr<ForwardBackend> fwd_;
    std::unique_ptr<PagedKvCache> kv_;  // made by fwd_: one sequence of the request's context
    int32_t seq_ = -1;
    std::vector<int32_t> cached_;         // tokens in the draft KV sequence, in order
    std::vector<int32_t> history_;        // context + drafted tokens as the draft sees them (vocab_.input), fed and penalised
    std::vector<TokenProb> dist_;         // scratch distribution
    std::unique_ptr<Sampler> sampler_;    // same params as the target's, switched per proposal
};

}  // namespace specd
