#include "engine/verify_draft.h"

#include <string>

#include "engine/coupled_sampling.h"
#include "engine/error.h"

namespace specd {

// -------------------------------------------------------- acceptance rule ---

AcceptanceRule::AcceptanceRule(int32_t n_vocab) : dense_(static_cast<size_t>(n_vocab), 0.0f) {}

namespace {
float prob_of(std::span<const TokenProb> dist, int32_t token) {
    for (const TokenProb& tp : dist) {
        if (tp.id == token) return tp.p;
    }
    return 0.0f;
}
}  // namespace

void AcceptanceRule::residual(std::span<const TokenProb> q, std::span<const TokenProb> p, int32_t token,
                              std::vector<TokenProb>& out) {
    out.clear();
    for (const TokenProb& tp : q) dense_[static_cast<size_t>(tp.id)] = tp.p;
    // A draft's distribution is zero beyond its own vocabulary (a shorter
    // draft's sparse list has no entry there); entries at ids the target
    // lacks (a draft vocabulary longer than the target's, if any slipped
    // through the mask) have q = 0, where max(0, q - p) is 0: skipped.
    const size_t n = dense_.size();
    if (p.empty()) {
        if (static_cast<size_t>(token) < n) dense_[static_cast<size_t>(token)] -= 1.0f;
    } else {
        for (const TokenProb& tp : p) {
            if (static_cast<size_t>(tp.id) < n) dense_[static_cast<size_t>(tp.id)] -= tp.p;
        }
    }
    double sum = 0.0;
    // Only q's support can stay positive.
    for (const TokenProb& tp : q) {
        const float r = dense_[static_cast<size_t>(tp.id)];
        if (r > 0.0f) {
            out.push_back({tp.id, r});
            sum += r;
        }
    }
    for (const TokenProb& tp : q) dense_[static_cast<size_t>(tp.id)] = 0.0f;
    if (p.empty()) {
        if (static_cast<size_t>(token) < n) dense_[static_cast<size_t>(token)] = 0.0f;
    } else {
        for (const TokenProb& tp : p) {
            if (static_cast<size_t>(tp.id) < n) dense_[static_cast<size_t>(tp.id)] = 0.0f;
        }
    }
    if (sum <= 0.0) {
        // q <= p everywhere only if q == p, where rejection has probability 0;
        // reached through rounding alone: fall back to q itself.
        out.assign(q.begin(), q.end());
        return;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (TokenProb& tp : out) tp.p *= inv;
}

bool AcceptanceRule::accept(std::span<const TokenProb> q, std::span<const TokenProb> p, int32_t token, Rng& rng,
                            int32_t* recovered) {
    if (q.size() == 1) {  // greedy target: accept iff the draft picked its token
        if (q[0].id == token) return true;
        *recovered = q[0].id;
        return false;
    }
    const float qx = prob_of(q, token);
    const float px = p.empty() ? 1.0f : prob_of(p, token);
    if (qx >= px && qx > 0.0f) return true;
    if (qx > 0.0f && rng.uniform() * static_cast<double>(px) < static_cast<double>(qx)) return true;
    residual(q, p, token, residual_);
    *recovered = Sampler::draw(residual_, rng);
    return false;
}

// ------------------------------------------------------------ one draft ---

DraftVerifier::DraftVerifier(int32_t n_vocab) : n_vocab_(n_vocab), rule_(n_vocab) {
    q_.reserve(static_cast<size_t>(n_vocab));
}

DraftVerdict DraftVerifier::verify(const TargetRows& rows, const DraftToVerify& draft, Sampler& sampler, Rng& rng,
                                   std::vector<int32_t>& history) {
    const int32_t n_draft = static_cast<int32_t>(draft.tokens.size());
    const size_t V = static_cast<size_t>(n_vocab_);
    DraftVerdict v;
    for (; v.n_accepted < n_draft; ++v.n_accepted) {
        const size_t i = static_cast<size_t>(v.n_accepted);
        const int32_t d = draft.tokens[i];
        if (!rows.logits) {
            // A point-mass target: the rule accepts d iff it is the argmax,
            // and the argmax is the recovered token; no randomness.
            if (d != rows.argmax[i]) {
                v.next = rows.argmax[i];
                return v;
            }
        } else if (sampler.params().coupled) {
            // Coupled noise: d stands iff it is the target's own pick at
            // this position; otherwise that pick is the next token.
            sampler.distribution(rows.logits + i * V, history, q_);
            const int32_t pick = coupled_pick(q_, sampler.params().seed, static_cast<int64_t>(history.size()));
            if (d != pick) {
                v.next = pick;
                return v;
            }
        } else {
            sampler.distribution(rows.logits + i * V, history, q_);
            const std::span<const TokenProb> p = draft.probs.empty() ? std::span<const TokenProb>() : std::span<const TokenProb>(draft.probs[i]);
            if (!rule_.accept(q_, p, d, rng, &v.next)) return v;
        }
        history.push_back(d);
    }
    // Every drafted token accepted: the bonus token from the last row.
    const size_t last = static_cast<size_t>(n_draft);
    if (!rows.logits) {
        v.next = rows.argmax[last];
    } else if (sampler.params().coupled) {
        v.next = coupled_sample(sampler, rows.logits + last * V, history, q_);
    } else {
        v.next = sampler.sample(rows.logits + last * V, history, rng);
    }
    return v;
}

void check_argmax(std::span<const int32_t> argmax, int32_t n_vocab) {
    for (const int32_t t : argmax) {
        if (t < 0 || t >= n_vocab) throw Error("forward_greedy: a logit row has no argmax (every logit NaN?): got " + std::to_string(t));
    }
}

}  // namespace specd
