// The verification core of speculative decoding, shared by the
// single-sequence decoder (engine/speculative.h) and the batch verifier
// (engine/batch_verifier.h). One target forward over [pending, d1..dk]
// gives k+1 rows; row i judges drafted token d(i+1), in order, until the
// first rejection. The step's output is, as vLLM's rejection sampler puts
// it, accepted + recovered + bonus tokens:
//
//   accepted   d1..dn, a prefix of the draft (n <= k);
//   recovered  when d(n+1) was rejected: drawn from row n's residual;
//   bonus      when all k were accepted: sampled from the last row.
//
// The rule (Leviathan et al. 2023, Chen et al. 2023) keeps the output the
// target's: under greedy sampling the same tokens as plain decoding, under
// sampling the target's distribution. Written once so that both callers
// draw the same random numbers in the same order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace specd {

// The rule for one drafted token. q: the target's distribution at this
// position; p: the draft's (empty = a point mass on `token`, as for n-gram
// drafts). Accepts with probability min(1, q(x)/p(x)); on rejection draws
// the recovered token from normalize(max(0, q - p)). A point-mass q
// (greedy) decides without drawing. A draft whose vocabulary is narrower
// than the target's has p = 0 beyond its width (its sparse list has no
// entry there), so the residual keeps q's mass on those ids.
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

// The target's rows for one verification: its logits, or (greedy without a
// penalty, ForwardBackend::forward_greedy) only each row's argmax.
struct TargetRows {
    const float* logits = nullptr;    // (n_draft + 1, n_vocab) logits of [pending, d1..dk]; null: use argmax
    const int32_t* argmax = nullptr;  // (n_draft + 1) each row's argmax, ids checked by check_argmax
};

// The draft being verified.
struct DraftToVerify {
    std::span<const int32_t> tokens;                   // (n_draft) d1..dk
    std::span<const std::vector<TokenProb>> probs;     // (n_draft) the distribution each was drawn from; empty: point masses
};

struct DraftVerdict {
    int32_t n_accepted = 0;  // draft tokens [0, n_accepted) accepted; token n_accepted (when < n_draft) was rejected
    int32_t next = -1;       // recovered (after a rejection) or bonus (all accepted) token: the new pending token
};

// The rule's scratch, sized once for a vocabulary: verify_draft allocates nothing.
class DraftVerifier {
public:
    explicit DraftVerifier(int32_t n_vocab);

    // Judges `draft` against `rows`. `sampler` carries the request's
    // sampling parameters and `rng` its random stream (both ignored on the
    // argmax path, which draws nothing); `history` is the tokens the target
    // has seen (prompt + output, for the repetition penalty) and gains the
    // accepted tokens, not `next`.
    DraftVerdict verify(const TargetRows& rows, const DraftToVerify& draft, Sampler& sampler, Rng& rng,
                        std::vector<int32_t>& history);

private:
    int32_t n_vocab_;
    AcceptanceRule rule_;
    std::vector<TokenProb> q_;  // (<= n_vocab) the target's distribution at one row
};

// A row without any ordered logit (all NaN) has no argmax: a backend then
// reports an id outside the vocabulary. specd::Error naming it, as the host
// sampler fails on such a row.
void check_argmax(std::span<const int32_t> argmax, int32_t n_vocab);

}  // namespace specd
