// Every message the runtime's actors exchange, in one CAF type-ID block.
// All of them are plain serialisable structs (they cross nodes unchanged in
// a multi-node deployment): no pointers, no in-process handles; bulky
// payloads (draft distributions) travel packed as bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "engine/sampler.h"
// A request's limits, checked by the session and, earlier, by a front end
// (net/api.cpp) that reports them in its own protocol's words: the bound
// of draft_max (kMaxDraftTokens) and of the stop list (kMaxStopSequences,
// kMaxStopSequenceBytes). Re-exported here with the request they bound.
#include "engine/speculative_params.h"
#include "engine/stop_matcher.h"
#include "engine/token_logprobs.h"

namespace specd {

// ------------------------------------------------------------- atoms ---
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using close_atom = caf::atom_constant<caf::atom("close")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;      // gateway → node: who are you, which actors
using join_atom = caf::atom_constant<caf::atom("join")>;        // node → gateway: add me to your list
using tick_atom = caf::atom_constant<caf::atom("tick")>;        // the gateway's health-check timer

// ------------------------------------------------- requests and events ---

// A generation request, as a client states it. Exactly one of prompt /
// prompt_tokens is used (tokens win when non-empty).
struct generate_request {
    std::string id;                       // the client's id, echoed in every event
    std::string model;                    // the model name; empty: the runtime's model
    std::string prompt;                   // text, tokenized with BOS
    std::vector<int32_t> prompt_tokens;   // or token ids (BOS included if wanted)
    bool parse_special = false;           // special-token texts in the prompt become those tokens (chat templates)
    int32_t max_tokens = 128;             // new tokens at most (>= 1)
    SamplingParams sampling;              // llama.cpp's defaults
    bool stop_at_eos = true;
    std::vector<std::string> stop;        // stop sequences: the text ends before the first one generated (<= kMaxStopSequences of <= kMaxStopSequenceBytes)
    int8_t speculative = -1;              // -1: the runtime's default; 0 off; 1 on
    int32_t draft_max = -1;               // -1: the runtime's MAX_DRAFT_TOKENS; else 0..kMaxDraftTokens
    int8_t adaptive = -1;                 // -1: the runtime's default; 0 fixed k; 1 adaptive
    int64_t timeout_ms = 0;               // 0: no deadline; else the request fails after this long
    bool cache_prompt = true;             // reuse the prefix cache's KV blocks the prompt starts with (when the runtime has one)
};

// Tokens the target accepted in one step, in order.
struct token_event {
    std::string id;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> from_draft;      // (tokens) 1: a drafted token the target accepted
    std::string text;                     // their UTF-8 text (a split character waits for its last byte)
    std::vector<uint32_t> text_ends;      // (tokens) where token i's bytes of text end (SessionCore::Emitted)
    TokenLogprobs logprobs;               // (tokens) when sampling.logprobs >= 0 (engine/token_logprobs.h); else empty
};

// The end of a generation.
struct done_event {
    std::string id;
    std::string finish_reason;            // "stop" (EOS or a stop sequence), "length", "context", "cancelled"
    std::string stop_word;                // the stop sequence that ended it ("" for EOS and every other end)
    int32_t prompt_tokens = 0;
    int32_t cached_prompt_tokens = 0;     // of the prompt, tokens whose keys and values came from the prefix cache
    int32_t completion_tokens = 0;
    double ttft_ms = 0.0;                 // submit → first token event
    double total_ms = 0.0;                // submit → done
    bool speculative = false;             // drafting was on for this request
    int64_t steps = 0;                    // target verify steps
    int64_t drafted = 0;                  // drafted tokens verified
    int64_t accepted = 0;                 // of those, accepted
    int64_t draft_steps = 0;              // steps that verified at least one drafted token
    int64_t load_capped = 0;              // steps whose k the load policy cut
    double draft_ms = 0.0;                // wall time of the draft steps this request was in (shared with their other requests)
    double verify_ms = 0.0;               // likewise, of its decode steps in the verifier (prefill not included)
    std::vector<int64_t> drafted_per_position;   // (draft_max)
    std::vector<int64_t> accepted_per_position;  // (draft_max)
};

// A request failed; no done_event follows.
struct error_event {
    std::string id;
    std::string code;                     // error_code_name(ErrorCode) (engine/error_code.h): "invalid_request", "context_exceeded", ...
    std::string message;                  // one line naming the problem
};

// ------------------------------------------------------ internal phases ---

// Session → verifier: prefill a prompt, or verify [pending, d1..dk].
// Run-ahead (a job that drafts nothing): the verifier may go on with up to
// `run_ahead` plain steps of its own, each on the token the last one
// sampled, and sends each of their results to the session as a
// verify_result message; `continued` on a result says another follows.
// It stops early at an end-of-generation token when `stop_at_eos`.
struct verify_msg {
    uint64_t request = 0;
    bool prefill = false;
    std::vector<int32_t> tokens;
    int32_t n_draft = 0;
    bool has_probs = false;
    std::string probs;                    // packed draft distributions (pack_probs)
    SamplingParams sampling;
    std::vector<uint64_t> rng;            // (4) the request's random state
    int32_t run_ahead = 0;                // plain steps the verifier may add (0: answer this one only)
    bool stop_at_eos = true;              // run-ahead stops after an end-of-generation token
    bool cache_prompt = true;             // prefill: look the prompt up in the prefix cache
};

struct verify_result {
    bool ok = true;
    bool kv_full = false;
    std::string error;
    int32_t n_accepted = 0;
    int32_t next = -1;                    // the new pending token
    std::vector<uint64_t> rng;            // (4)
    int32_t batch_requests = 0;           // requests in the step
    int32_t open_requests = 0;            // requests open on the verifier (the load signal)
    double step_ms = 0.0;
    bool continued = false;               // run-ahead: the verifier goes on; its next result follows as a message
    TokenLogprobs logprobs;               // (n_accepted + 1) when the job's sampling.logprobs >= 0; else empty
    int32_t cached_tokens = 0;            // prefill: prompt tokens taken from the prefix cache
};

// Session → draft: propose up to k tokens after the request's context.
// The context travels incrementally: the draft actor keeps each request's
// last context (until close), and a message says how many of those tokens
// still hold (`keep`: everything after them was rejected or is new) and
// appends `tail`. keep = 0 sends the whole context. A draft actor that does
// not hold `keep` tokens for the request answers `resync` and the session
// sends it again in full. In steady state one step costs a few tokens on
// the wire instead of the whole context.
struct draft_msg {
    uint64_t request = 0;
    int32_t keep = 0;                     // tokens of the previously sent context that still hold
    std::vector<int32_t> tail;            // (new tokens) appended after them; the last is the pending token
    int32_t k = 0;
    float p_min = 0.0f;
    SamplingParams sampling;
    std::vector<uint64_t> rng;            // (4)
    bool cache_prompt = true;             // a new request's context may adopt the draft's prefix cache blocks
};

struct draft_result {
    std::vector<int32_t> tokens;
    bool has_probs = false;
    std::string probs;                    // packed (pack_probs)
    std::vector<uint64_t> rng;            // (4)
    double step_ms = 0.0;
    bool resync = false;                  // the draft actor lacks this request's context: send it in full
};

// Session → KV manager: set aside blocks for the request's longest run.
struct kv_acquire {
    uint64_t request = 0;
    int32_t target_positions = 0;
    int32_t draft_positions = 0;
};

struct kv_grant {
    bool ok = false;
    std::string error;                    // when refused: why
};

// Counts for monitoring (KV manager → anyone asking).
struct runtime_stats {
    int32_t kv_target_blocks = 0;
    int32_t kv_target_free = 0;
    int32_t kv_draft_blocks = 0;
    int32_t kv_draft_free = 0;
    int32_t running = 0;                  // requests holding KV blocks
    int32_t waiting = 0;                  // requests queued for blocks
    int32_t kv_block_size = 0;
};

// Node → gateway, the answer to hello_atom: what a `specd node` process
// serves. Handles of roles the node doesn't have are invalid.
struct node_hello {
    std::string role;                     // node_role_name(NodeRole) (actors/node.h): "target" or "draft"
    std::string model;                    // the model's name (file stem or alias)
    int32_t n_vocab = 0;
    int32_t n_ctx = 0;                    // context per request
    caf::actor verifier;                  // target: its verifier_actor
    caf::actor kv;                        // target: its kv_manager_actor
    caf::actor drafter;                   // draft: its draft_actor
};

// ----------------------------------------------------------- inspect ---

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LogitBias& x) {
    return f(caf::meta::type_name("specd::LogitBias"), x.token, x.bias);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingParams& x) {
    return f(caf::meta::type_name("specd::SamplingParams"), x.temperature, x.top_k, x.top_p, x.min_p, x.repeat_penalty,
             x.repeat_last_n, x.presence_penalty, x.frequency_penalty, x.penalty_window, x.n_prompt, x.logit_bias, x.seed, x.coupled,
             x.logprobs, x.grammar);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenLogprobs& x) {
    return f(caf::meta::type_name("specd::TokenLogprobs"), x.n_top, x.logprob, x.top_ids, x.top_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generate_request& x) {
    return f(caf::meta::type_name("specd::generate_request"), x.id, x.model, x.prompt, x.prompt_tokens, x.parse_special, x.max_tokens, x.sampling,
             x.stop_at_eos, x.stop, x.speculative, x.draft_max, x.adaptive, x.timeout_ms, x.cache_prompt);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
    return f(caf::meta::type_name("specd::token_event"), x.id, x.tokens, x.from_draft, x.text, x.text_ends, x.logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, done_event& x) {
    return f(caf::meta::type_name("specd::done_event"), x.id, x.finish_reason, x.stop_word, x.prompt_tokens, x.cached_prompt_tokens, x.completion_tokens, x.ttft_ms,
             x.total_ms, x.speculative, x.steps, x.drafted, x.accepted, x.draft_steps, x.load_capped, x.draft_ms, x.verify_ms, x.drafted_per_position,
             x.accepted_per_position);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error_event& x) {
    return f(caf::meta::type_name("specd::error_event"), x.id, x.code, x.message);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verify_msg& x) {
    return f(caf::meta::type_name("specd::verify_msg"), x.request, x.prefill, x.tokens, x.n_draft, x.has_probs, x.probs, x.sampling,
             x.rng, x.run_ahead, x.stop_at_eos, x.cache_prompt);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, verify_result& x) {
    return f(caf::meta::type_name("specd::verify_result"), x.ok, x.kv_full, x.error, x.n_accepted, x.next, x.rng, x.batch_requests,
             x.open_requests, x.step_ms, x.continued, x.logprobs, x.cached_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_msg& x) {
    return f(caf::meta::type_name("specd::draft_msg"), x.request, x.keep, x.tail, x.k, x.p_min, x.sampling, x.rng, x.cache_prompt);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_result& x) {
    return f(caf::meta::type_name("specd::draft_result"), x.tokens, x.has_probs, x.probs, x.rng, x.step_ms, x.resync);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_acquire& x) {
    return f(caf::meta::type_name("specd::kv_acquire"), x.request, x.target_positions, x.draft_positions);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_grant& x) {
    return f(caf::meta::type_name("specd::kv_grant"), x.ok, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, runtime_stats& x) {
    return f(caf::meta::type_name("specd::runtime_stats"), x.kv_target_blocks, x.kv_target_free, x.kv_draft_blocks, x.kv_draft_free,
             x.running, x.waiting, x.kv_block_size);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_hello& x) {
    return f(caf::meta::type_name("specd::node_hello"), x.role, x.model, x.n_vocab, x.n_ctx, x.verifier, x.kv, x.drafter);
}

// Packs sparse distributions (one per drafted token) as bytes:
// per distribution a uint32 count, then count × (int32 id, float p).
std::string pack_probs(const std::vector<std::vector<TokenProb>>& probs);
// Throws specd::Error on a malformed buffer.
std::vector<std::vector<TokenProb>> unpack_probs(const std::string& bytes);
std::vector<uint64_t> rng_to_wire(const RngState& s);
RngState rng_from_wire(const std::vector<uint64_t>& v);  // throws specd::Error unless 4 words

}  // namespace specd

CAF_BEGIN_TYPE_ID_BLOCK(specd, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(specd, (specd::generate_request))
CAF_ADD_TYPE_ID(specd, (specd::token_event))
CAF_ADD_TYPE_ID(specd, (specd::done_event))
CAF_ADD_TYPE_ID(specd, (specd::error_event))
CAF_ADD_TYPE_ID(specd, (specd::verify_msg))
CAF_ADD_TYPE_ID(specd, (specd::verify_result))
CAF_ADD_TYPE_ID(specd, (specd::draft_msg))
CAF_ADD_TYPE_ID(specd, (specd::draft_result))
CAF_ADD_TYPE_ID(specd, (specd::kv_acquire))
CAF_ADD_TYPE_ID(specd, (specd::kv_grant))
CAF_ADD_TYPE_ID(specd, (specd::runtime_stats))
CAF_ADD_TYPE_ID(specd, (specd::SamplingParams))
CAF_ADD_TYPE_ID(specd, (specd::node_hello))
CAF_END_TYPE_ID_BLOCK(specd)
