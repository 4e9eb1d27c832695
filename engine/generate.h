// Plain (non-speculative) generation for one sequence over the batched
// forward pass: chunked prefill, then one token per step. It is the baseline
// that speculative decoding must match token for token under greedy sampling.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"

namespace specd {

struct GenerationParams {
    int32_t max_tokens = 128;    // new tokens at most; generation also stops at EOS and at a full context
    SamplingParams sampling;     // llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)
    bool stop_at_eos = true;
    std::vector<std::string> stop;  // stop sequences (SessionCore: engine/stop_matcher.h); empty: none
    bool cache_prompt = true;    // the batched runtime: reuse cached KV blocks the prompt starts with (engine/prefix_cache.h)
};

enum class StopReason { Eos, Length, ContextFull, Cancelled, StopSequence };
// "eos", "length", "context", "cancelled", "stop_sequence"
const char* stop_reason_name(StopReason reason);

struct GenerationResult {
    std::vector<int32_t> tokens;  // generated tokens (prompt excluded)
    int32_t n_prompt = 0;
    double prompt_ms = 0.0;       // prefill wall time
    double gen_ms = 0.0;          // wall time from the first generated token's forward to the last
    StopReason stop = StopReason::Length;
    double tokens_per_s() const { return gen_ms > 0 ? 1000.0 * static_cast<double>(tokens.size()) / gen_ms : 0.0; }
};

// Called for each generated token; return false to stop (StopReason::Cancelled).
using TokenCallback = std::function<bool(int32_t token)>;

// Prefills `prompt` into sequence `seq` (which must be empty) in chunks of
// at most the forward pass's batch size; returns the logits of the last
// prompt token (n_vocab). Throws specd::Error if the prompt is empty or does
// not fit the context (leaving one position to generate into).
std::span<const float> prefill(ForwardBackend& fwd, PagedKvCache& kv, int32_t seq, std::span<const int32_t> prompt);

// Validates a tokenized prompt against a context size: non-empty and at
// most n_ctx - 1 tokens. The message names both numbers.
void check_prompt_fits(size_t n_prompt_tokens, int32_t n_ctx);

// With SamplingParams::grammar, each row is masked by the grammar before
// the sampler's transforms, and the text ends (StopReason::Eos) at an
// end-of-generation token or once the grammar admits nothing more.
class PlainDecoder {
public:
    // The decoder uses one KV sequence of `kv` for each call to generate().
    PlainDecoder(ForwardBackend& fwd, PagedKvCache& kv);

    GenerationResult generate(std::span<const int32_t> prompt, const GenerationParams& params,
                              const TokenCallback& on_token = {});

private:
    ForwardBackend& fwd_;
    PagedKvCache& kv_;
    std::vector<int32_t> history_;  // prompt + generated, capacity n_ctx
};

// Milliseconds on a monotonic clock.
double now_ms();

}  // namespace specd
