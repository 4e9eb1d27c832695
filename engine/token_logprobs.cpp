#include "engine/token_logprobs.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "engine/kernels.h"

namespace specd {

void TokenLogprobs::append(const TokenLogprobs& from, size_t i) {
    if (empty()) n_top = from.n_top;
    if (from.n_top != n_top) throw Error("logprobs: runs with different numbers of alternatives");
    logprob.push_back(from.logprob.at(i));
    const auto k = static_cast<size_t>(n_top);
    top_ids.insert(top_ids.end(), from.top_ids.begin() + static_cast<std::ptrdiff_t>(i * k),
                   from.top_ids.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
    top_logprobs.insert(top_logprobs.end(), from.top_logprobs.begin() + static_cast<std::ptrdiff_t>(i * k),
                        from.top_logprobs.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
}

LogprobReader::LogprobReader(int32_t n_vocab) : n_vocab_(n_vocab), isa_(best_isa()) {
    if (n_vocab <= 0) throw Error("logprobs: n_vocab must be > 0");
    shifted_.resize(static_cast<size_t>(n_vocab));
    top_.reserve(static_cast<size_t>(kMaxTopLogprobs));
}

namespace {
// NaN never wins (as the sampler reads it); +inf is the largest finite.
float ordered(float logit) {
    if (std::isnan(logit)) return -INFINITY;
    return logit > FLT_MAX ? FLT_MAX : logit;
}
// Heap order: the top of the heap is the worst kept entry.
struct Better {
    template <class E>
    bool operator()(const E& a, const E& b) const {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
};
float clamp_floor(double lp) { return lp < kLogprobFloor || std::isnan(lp) ? kLogprobFloor : static_cast<float>(lp); }
}  // namespace

void LogprobReader::read(Sampler& sampler, const float* logits, std::span<const int32_t> history, int32_t token, TokenLogprobs& out) {
    const SamplingParams& p = sampler.params();
    const auto V = static_cast<size_t>(std::min(n_vocab_, sampler.n_vocab()));
    // (a vocabulary smaller than the request's count, only in tests, gives all of it)
    const int32_t n_top = static_cast<int32_t>(std::min(static_cast<size_t>(std::max(0, p.logprobs)), V));
    if (out.empty()) out.n_top = n_top;
    if (out.n_top != n_top) throw Error("logprobs: runs with different numbers of alternatives");
    if (token < 0 || static_cast<size_t>(token) >= V) throw Error("logprobs: token " + std::to_string(token) + " is outside the vocabulary");
    const float* x = sampler.transformed_logits(logits, history);
    const double inv_t = p.greedy() ? 1.0 : 1.0 / static_cast<double>(p.temperature);
    // log-sum-exp shifted by the largest logit: every shifted value is <= 0,
    // where the kernels' polynomial exp holds (relative error < 4e-7); the
    // chosen token's and the alternatives' own differences are taken in double.
    float top = -INFINITY;
    for (size_t v = 0; v < V; ++v) top = std::max(top, ordered(x[v]));
    if (top == -INFINITY) throw Error("logprobs: every logit is -inf or NaN");
    const auto inv_tf = static_cast<float>(inv_t);
    for (size_t v = 0; v < V; ++v) shifted_[v] = (ordered(x[v]) - top) * inv_tf;
    const double log_sum = std::log(static_cast<double>(exp_shift_sum_f32(isa_, shifted_.data(), static_cast<int64_t>(V), 0.0f)));
    const auto logprob_of = [&](float logit) { return (static_cast<double>(logit) - static_cast<double>(top)) * inv_t - log_sum; };
    out.logprob.push_back(clamp_floor(logprob_of(ordered(x[static_cast<size_t>(token)]))));
    if (n_top == 0) return;
    // The n_top best by one pass with a heap (most tokens lose one
    // comparison); the temperature keeps the order, so raw logits rank them.
    top_.clear();
    const auto k = static_cast<size_t>(n_top);
    for (size_t v = 0; v < V; ++v) {
        const Entry e{static_cast<int32_t>(v), ordered(x[v])};
        if (top_.size() < k) {
            top_.push_back(e);
            std::push_heap(top_.begin(), top_.end(), Better{});
        } else if (e.logit >= top_.front().logit && Better{}(e, top_.front())) {
            std::pop_heap(top_.begin(), top_.end(), Better{});
            top_.back() = e;
            std::push_heap(top_.begin(), top_.end(), Better{});
        }
    }
    std::sort_heap(top_.begin(), top_.end(), Better{});  // best first
    for (const Entry& e : top_) {
        out.top_ids.push_back(e.id);
        out.top_logprobs.push_back(clamp_floor(logprob_of(e.logit)));
    }
}

}  // namespace specd
