// Drafting for many requests at once. With a draft model, each token
// position of all waiting requests is one batched draft forward (the
// draft's caches are rolled back to what the target accepted first); without
// one, the n-gram lookup proposes from each request's context. Plain class:
// the draft actor is a thin shell over it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/grammar_decode.h"
#include "engine/prefix_cache.h"
#include "engine/proposer.h"
#include "engine/sampler.h"

namespace specd {

struct DraftJob {
    uint64_t request = 0;
    uint64_t tag = 0;                  // returned with the outcome
    std::vector<int32_t> context;      // prompt + accepted tokens; the last one is the pending token
    int32_t k = 8;                     // most tokens to draft
    float p_min = 0.0f;                // stop a request's draft when the top probability falls below this
    SamplingParams sampling;           // the request's (a draft model samples with it; greedy stays greedy)
    RngState rng;
    bool cache_prompt = true;          // a new request's context may adopt the prefix cache's blocks (when enabled)
};

struct DraftOutcome {
    uint64_t request = 0;
    uint64_t tag = 0;
    Draft draft;                       // may be empty (no match, no room in the draft cache)
    RngState rng;
    double step_ms = 0.0;              // wall time of the batch that produced it
    int32_t batch_requests = 0;
};

// Incremental contexts (multi-node wire efficiency). A sender keeps what it
// last sent for a request; an update says how many of those tokens still
// hold (`keep`) and what follows them (`tail`).
struct ContextUpdate {
    int32_t keep = 0;                  // leading tokens of the previous context that still hold
    std::vector<int32_t> tail;         // (context - keep) tokens after them
};

// Sender side: the update that turns `sent` into `context`; `sent` becomes `context`.
ContextUpdate make_context_update(std::vector<int32_t>& sent, std::span<const int32_t> context);

// Receiver side: each request's context as rebuilt from its updates.
class ContextMirror {
public:
    // Applies an update and returns the request's whole context, or nullptr
    // when the update can't apply (unknown request with keep > 0, or keep
    // beyond what is held): the sender must send the context in full.
    const std::vector<int32_t>* apply(uint64_t request, int32_t keep, std::span<const int32_t> tail);
    void close(uint64_t request) { held_.erase(request); }
    size_t size() const { return held_.size(); }

private:
    std::unordered_map<uint64_t, std::vector<int32_t>> held_;
};

class BatchDrafter {
public:
    // With a draft model: `draft_fwd` runs it over `draft_kv` (one sequence
    // per request). Without (both null): n-gram lookup. `target_vocab`: the
    // target's n_vocab when it differs from the draft's (DraftVocabMap: the
    // draft proposes only ids below both, and is fed a substitute for a
    // context id it lacks); 0 = the draft's own.
    BatchDrafter(ForwardBackend* draft_fwd, PagedKvCache* draft_kv, int32_t ngram_min = 1, int32_t ngram_max = 4,
                 int32_t target_vocab = 0);

    // Frees the request's draft sequence (no-op when it has none); with the
    // prefix cache on, its blocks are recorded there first.
    void close(uint64_t request);
    // Prefix caching on the draft model's cache (engine/prefix_cache.h): a
    // request's first catch-up adopts the cached blocks its context starts
    // with, and a closing request records its own. No-op without a draft
    // model. `hasher` as for PrefixCache.
    void enable_prefix_cache(BlockHasher hasher = default_block_hash);
    const PrefixCache* prefix_cache() const { return cache_.get(); }
    int32_t open_requests() const { return static_cast<int32_t>(requests_.size()); }

    // Drafts for every job, batching the model's forwards across them, and
    // appends one outcome per job (in job order).
    void draft(std::span<const DraftJob> jobs, std::vector<DraftOutcome>& out);

    // Forward calls that brought back only the argmax per row (every
    // request in them greedy without penalty and without p_min).
    int64_t greedy_forwards() const { return greedy_forwards_; }

private:
    struct Request {
        int32_t seq = -1;
        std::vector<int32_t> cached;   // tokens in the draft sequence, in order (the context's own ids)
        // A constrained request's grammar, following its output: the draft
        // proposes from rows masked as the verifier's are, so it agrees
        // with the target more often (correctness does not depend on it).
        std::unique_ptr<GrammarTracker> grammar;
    };
    struct Active {
        size_t job;                    // index into the jobs
        size_t outcome;                // index into out
        Request* request;
        std::vector<int32_t> history;  // context + drafted as the draft sees them (vocab_.input): fed and penalised
        Rng rng;
        int32_t k;
        bool live = true;
        GrammarMatcher* grammar = nullptr;  // the request's grammar at its output's end (null: unmasked)
        std::unique_ptr<GrammarMatcher::Position> grammar_start;  // where to put it back after drafting
    };
    void model_draft(std::span<const DraftJob> jobs, std::vector<DraftOutcome>& out, size_t first_out);

    ForwardBackend* fwd_;
    PagedKvCache* kv_;
    DraftVocabMap vocab_;              // (a draft model only)
    NgramProposer ngram_;
    Sampler sampler_;
    std::unordered_map<uint64_t, Request> requests_;
    std::vector<Active> active_;
    std::vector<BatchItem> items_;
    std::vector<size_t> item_active_;
    std::vector<TokenProb> dist_;
    std::vector<int32_t> argmax_;      // (items_) argmax per row when an iteration ran forward_greedy
    int64_t greedy_forwards_ = 0;
    std::unique_ptr<TokenTrie> trie_;  // (constrained requests) the draft tokenizer's pieces
    std::unique_ptr<PrefixCache> cache_;  // null: prefix caching off (always without a draft model)
    std::vector<float> masked_;        // (n_vocab) one row after the grammar's mask
    std::vector<uint8_t> allowed_;     // (n_vocab) mask scratch
};

}  // namespace specd
