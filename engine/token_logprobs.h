// The log-probabilities a response reports per emitted token (OpenAI's
// `logprobs` / `top_logprobs`), read from the target's logit row that chose
// the token, so a token accepted from a draft gets the same figures as the
// one plain decoding would have sampled there.
//
// Which distribution: the target's after the logit transforms (logit_bias,
// then the penalties, with the drafted tokens before it in the history) and
// the temperature, over the whole vocabulary:
//
//   logprob(t) = z_t - log(sum_v exp(z_v)),   z = transformed logits / T
//
// with T = the request's temperature, or 1 when greedy (temperature 0 has no
// distribution; OpenAI then reports the model's own). The filters (top_k,
// top_p, min_p) are NOT applied: as OpenAI, the figures are the model's
// distribution, not the truncated one the token was drawn from (llama-
// server's post_sampling_probs would be the other reading). A token whose
// logit is -inf (logit_bias false) reads kLogprobFloor, which JSON can hold.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels.h"
#include "engine/sampler.h"

namespace specd {

// OpenAI's floor for a token the model cannot produce.
inline constexpr float kLogprobFloor = -9999.0f;

// The figures of a run of tokens, flat so that they travel in messages as
// they are. Empty (size() 0) when the request asked for none.
struct TokenLogprobs {
    int32_t n_top = 0;                 // alternatives per token (SamplingParams::logprobs)
    std::vector<float> logprob;        // (tokens) the chosen token's
    std::vector<int32_t> top_ids;      // (tokens, n_top) most likely first (lower id first on ties)
    std::vector<float> top_logprobs;   // (tokens, n_top)
    size_t size() const { return logprob.size(); }
    bool empty() const { return logprob.empty(); }
    void clear() {
        logprob.clear();
        top_ids.clear();
        top_logprobs.clear();
    }
    // Appends token i of `from` (whose n_top must equal this one's, or this
    // one be empty: it takes from's n_top).
    void append(const TokenLogprobs& from, size_t i);
};

// Reads the figures from logit rows; its scratch is sized once.
class LogprobReader {
public:
    explicit LogprobReader(int32_t n_vocab);
    // Appends `token`'s logprob and the sampler's params().logprobs most
    // likely alternatives (all of a smaller vocabulary), from `logits` (n_vocab) with `history` (the
    // tokens before this position, for the penalties). `sampler` holds the
    // request's parameters; its scratch is reused.
    void read(Sampler& sampler, const float* logits, std::span<const int32_t> history, int32_t token, TokenLogprobs& out);

private:
    struct Entry {
        int32_t id;
        float logit;  // transformed, NaN as -inf
    };
    int32_t n_vocab_;
    Isa isa_;                   // the kernels' exp (engine/kernels.h)
    std::vector<float> shifted_;  // (n_vocab) scratch: (logit - max) / T, then its exp
    std::vector<Entry> top_;    // (<= kMaxTopLogprobs) heap of the best so far
};

}  // namespace specd
