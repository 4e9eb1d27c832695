// Continuous batching on the target model: every pending prefill and
// speculative verification of many requests runs in one forward pass per
// step; requests join and leave between steps, and long prompts are
// prefilled in chunks so they don't stall the others' decoding. The
// acceptance rule runs here (it needs the target's distributions), with the
// request's own sampling parameters and random state, which travel with
// each job. Plain class: the verifier actor is a thin shell over it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/grammar.h"
#include "engine/prefix_cache.h"
#include "engine/proposer.h"
#include "engine/sampler.h"
#include "engine/token_logprobs.h"
#include "engine/token_trie.h"
#include "engine/verify_draft.h"

namespace specd {

struct BatchVerifierOptions {
    int32_t max_step_tokens = 512;     // most tokens in one forward (all jobs together)
    int32_t prefill_chunk_tokens = 128;  // most prompt tokens per step, so decoding requests keep moving
};

// One unit of work for a request (identified by `request`, a caller-chosen key).
struct VerifyJob {
    uint64_t request = 0;
    uint64_t tag = 0;                 // returned with the outcome (the caller's reply handle)
    bool prefill = false;             // tokens = the whole prompt (first job of a request)
    std::vector<int32_t> tokens;      // prefill: the prompt; verify: [pending, d1..dk]
    int32_t n_draft = 0;              // verify: drafted tokens at the end of `tokens`
    bool draft_has_probs = false;     // the draft's distributions are in draft_probs
    std::vector<std::vector<TokenProb>> draft_probs;  // (n_draft) sparse draft distributions
    SamplingParams sampling;
    RngState rng;
    // prefill: look the prompt up in the prefix cache (when enabled); false
    // computes every position (llama-server's cache_prompt: false).
    bool cache_prompt = true;
};

struct VerifyOutcome {
    uint64_t request = 0;
    uint64_t tag = 0;
    bool ok = true;
    std::string error;            // when !ok: why (one line)
    bool kv_full = false;         // when !ok: the KV pool had no room
    int32_t n_accepted = 0;       // drafted tokens accepted
    int32_t next = -1;            // the target's token after them (recovered or bonus); the new pending token
    int32_t cached_tokens = 0;    // prefill: prompt tokens whose keys and values came from the prefix cache
    RngState rng;                 // the request's random state after this job
    TokenLogprobs logprobs;       // (n_accepted + 1) when sampling.logprobs >= 0: the accepted tokens', then next's; else empty
    int32_t batch_requests = 0;   // requests in the step that ran this job
    int32_t open_requests = 0;    // requests holding a sequence here (the load signal)
    int32_t batch_tokens = 0;     // tokens in that step
    double step_ms = 0.0;         // wall time of that step
};

// How the cost of a verifier step grows with its rows, from the steps that
// verify without a prompt chunk: T(1), a plain step of one request, and the
// cost per extra row from the steps of >= kMinRows rows (one request's
// verification, or many requests' steps together, so the slope is learned
// at the sizes the load brings). Written by the verifier's thread, read by
// sessions on any thread (LoadPolicy).
//
// The cost does not grow in a straight line: on a memory-bound target rows
// are nearly free until the arithmetic catches up with the weight stream,
// then each costs more (the 1.1B q8_0 construct on 2 Zen 4 cores: 8 rows
// 1.1x one row, 16 rows 2x, 32 rows 3.9x). So the probe also keeps, per
// power-of-two range of rows, the mean rows and ms of the steps it saw,
// and step_ms() reads the curve through those points.
class StepCostProbe {
public:
    static constexpr int32_t kMinRows = 4;  // a step of fewer rows tells too little of the slope
    static constexpr double kDecay = 0.05;  // EMA weight of a new step
    void record(int32_t rows, double ms);
    // The cost of a step of `rows` rows: linear between the measured ranges'
    // points, beyond the last one along its last segment (or the straight
    // fit when only T(1) is known); < 0 while T(1) or the slope is unmeasured.
    double step_ms(double rows) const;
    // Rows at which one step costs as much as two single-row steps; 0 while
    // T(1) or the slope is unmeasured, kMaxRows when extra rows cost nothing.
    int32_t doubling_rows() const;
    static constexpr int32_t kMaxRows = 1024;
    // The fit's two terms; < 0 while unmeasured.
    double single_row_ms() const { return t1_ms_.load(std::memory_order_relaxed); }
    double per_row_ms() const { return per_row_ms_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> t1_ms_{-1.0};       // EMA of single-row step ms (-1: none yet)
    std::atomic<double> per_row_ms_{-1.0};  // EMA of (T(rows) - T(1)) / (rows - 1) (-1: none yet)
    // Range b holds steps of [2^b, 2^(b+1)) rows (b = 0: single rows; the last
    // range everything above): EMAs of their rows and ms, -1 while none.
    static constexpr int kRanges = 12;
    std::atomic<double> range_rows_[kRanges] = {-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0};
    std::atomic<double> range_ms_[kRanges] = {-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0};
};

class BatchVerifier {
public:
    // `kv` holds the target's sequences (one per open request).
    BatchVerifier(ForwardBackend& target, PagedKvCache& kv, BatchVerifierOptions options = {});

    // A request starts / ends: creates / frees its KV sequence. close() of an
    // unknown request is a no-op (it may never have reached the verifier);
    // its queued jobs are dropped.
    void open(uint64_t request);
    void close(uint64_t request);
    bool is_open(uint64_t request) const { return requests_.count(request) != 0; }
    int32_t open_requests() const { return static_cast<int32_t>(requests_.size()); }

    // Queues a job (the request is opened on its prefill job). Invalid jobs
    // (unknown request, a second job while one is queued, tokens out of
    // range, a prompt that does not fit) come back as failed outcomes from
    // the next step().
    void submit(VerifyJob job);
    bool has_work() const { return !queue_.empty() || !rejected_.empty(); }

    // Runs one batched forward over the queued jobs that fit (verifications
    // first, then prefill chunks) and appends the outcomes of jobs that
    // finished (a prefill finishes with its last chunk).
    void step(std::vector<VerifyOutcome>& out);

    // Prefix caching (engine/prefix_cache.h): a prompt starting with the
    // tokens of an earlier prompt or output adopts their KV blocks and
    // prefills only the rest. A request's prompt blocks are recorded when
    // its prefill ends (so requests running beside it share them), the rest
    // of its sequence when it closes; the cache gives blocks back, least
    // recently used first, when a step finds the pool full. Off until
    // called; `hasher`: default_block_hash unless a test forces collisions.
    void enable_prefix_cache(BlockHasher hasher = default_block_hash);
    const PrefixCache* prefix_cache() const { return cache_.get(); }

    const PagedKvCache& kv() const { return kv_; }
    const LlamaModel& model() const { return fwd_.model(); }
    // Steps of one request report their rows and time here (null: none).
    void set_cost_probe(StepCostProbe* probe) { probe_ = probe; }
    // Steps whose forward brought back only the argmax per row
    // (ForwardBackend::forward_greedy): every job in them was greedy.
    int64_t greedy_steps() const { return greedy_steps_; }

    // Whether a job's next tokens are the plain argmax of the target's
    // logits: greedy sampling without a logit transform (a penalty, a
    // logit_bias or a grammar moves the argmax, and only the host sees the
    // whole row), and no log-probabilities to read from the rows.
    static bool argmax_suffices(const SamplingParams& sampling) { return sampling.plain_argmax() && sampling.logprobs < 0; }

private:
    struct Request {
        int32_t seq = -1;
        std::vector<int32_t> history;  // tokens in the KV sequence, then the pending one
        bool busy = false;             // a job is queued
        // The request's grammar (SamplingParams::grammar, parsed from its
        // prefill job), at the position after `history`: each verification
        // row is masked with it advanced over the drafted tokens before it
        // (engine/grammar_decode.h). Null: unconstrained.
        std::unique_ptr<GrammarMatcher> grammar;
    };
    struct Queued {
        VerifyJob job;
        int32_t prefilled = 0;         // prompt tokens already in the cache
        int32_t from_prefix_cache = 0; // prompt tokens adopted from the prefix cache
    };
    StepCostProbe* probe_ = nullptr;
    VerifyOutcome fail(const VerifyJob& job, std::string why, bool kv_full = false) const;
    // A verify job's verdict (engine/verify_draft.h) from its rows: logits,
    // or each row's argmax when the step ran forward_greedy.
    void finish_verify(Queued& q, Request& r, const TargetRows& rows, VerifyOutcome& o);
    // The target tokenizer's pieces as a trie, built on the first
    // constrained request.
    const TokenTrie& trie();

    ForwardBackend& fwd_;
    PagedKvCache& kv_;
    BatchVerifierOptions options_;
    DraftVerifier verifier_;           // the acceptance rule and its scratch
    Sampler sampler_;                  // parameters switched per job
    LogprobReader logprob_reader_;     // a job's logprobs, when asked
    std::vector<TokenProb> dist_;      // (<= n_vocab) scratch: a coupled pick's distribution
    std::unordered_map<uint64_t, Request> requests_;
    std::vector<Queued> queue_;        // in arrival order
    std::vector<VerifyOutcome> rejected_;
    // Per step.
    std::vector<BatchItem> items_;
    std::vector<size_t> item_job_;     // (items) index into queue_
    std::vector<int32_t> item_row_;    // (items) first logit row
    std::vector<int32_t> item_len_;    // (items) tokens
    std::vector<size_t> failed_;       // (queue) scratch: jobs whose blocks could not be reserved
    std::vector<char> done_;           // (queue) scratch: jobs finished this step
    std::vector<int32_t> argmax_;      // (rows of the step) argmax per logit row when the step ran forward_greedy
    int64_t greedy_steps_ = 0;
    std::unique_ptr<TokenTrie> trie_;  // (constrained requests) the target's pieces
    std::unique_ptr<PrefixCache> cache_;  // null: prefix caching off
    std::vector<float> masked_;        // (n_draft + 1, n_vocab) a constrained job's rows after the grammar's mask
    std::vector<uint8_t> allowed_;     // (n_vocab) scratch of the mask
};

}  // namespace specd
