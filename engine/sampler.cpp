#include "engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "engine/error.h"

namespace specd {

namespace {

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

[[noreturn]] void out_of_range(const char* field, const std::string& value, const std::string& allowed) {
    throw Error(std::string("sampling: ") + field + " = " + value + " is out of range; allowed: " + allowed);
}

// +inf (an overflowing logit, a tiny temperature) would turn the softmax into
// inf - inf = NaN; the largest float keeps the order and the arithmetic finite.
float finite_above(float x) { return x > FLT_MAX ? FLT_MAX : x; }

// NaN would break every comparison (and the sort's ordering): it never wins.
float sanitized(float logit) { return std::isnan(logit) ? -INFINITY : finite_above(logit); }

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

void SamplingParams::validate() const {
    if (!std::isfinite(temperature)) out_of_range("temperature", number(temperature), "a finite number (<= 0: greedy)");
    if (!(top_p >= 0.0f && top_p <= 1.0f)) out_of_range("top_p", number(top_p), "[0, 1] (1: off)");
    if (!(min_p >= 0.0f && min_p <= 1.0f)) out_of_range("min_p", number(min_p), "[0, 1] (0: off)");
    if (!(repeat_penalty > 0.0f && std::isfinite(repeat_penalty))) {
        out_of_range("repeat_penalty", number(repeat_penalty), "a finite number > 0 (1: off)");
    }
    if (repeat_last_n < -1) {
        out_of_range("repeat_last_n", std::to_string(repeat_last_n), ">= -1 (0: off, -1: the whole history)");
    }
    if (!std::isfinite(presence_penalty)) out_of_range("presence_penalty", number(presence_penalty), "a finite number (0: off)");
    if (!std::isfinite(frequency_penalty)) out_of_range("frequency_penalty", number(frequency_penalty), "a finite number (0: off)");
    if (penalty_window != PenaltyWindow::Output && penalty_window != PenaltyWindow::LastN) {
        out_of_range("penalty_window", std::to_string(static_cast<int>(penalty_window)), "0 (the output) or 1 (the last repeat_last_n tokens)");
    }
    if (logprobs < -1 || logprobs > kMaxTopLogprobs) {
        out_of_range("logprobs", std::to_string(logprobs), "-1 (none) to " + std::to_string(kMaxTopLogprobs) + " alternatives");
    }
    if (n_prompt < 0) out_of_range("n_prompt", std::to_string(n_prompt), ">= 0");
    if (logit_bias.size() > kMaxLogitBias) {
        out_of_range("logit_bias", std::to_string(logit_bias.size()) + " entries", "at most " + std::to_string(kMaxLogitBias) + " entries");
    }
    if (grammar.size() > kMaxGrammarBytes) {
        out_of_range("grammar", std::to_string(grammar.size()) + " bytes", "at most " + std::to_string(kMaxGrammarBytes) + " bytes");
    }
    for (const LogitBias& b : logit_bias) {
        if (b.token < 0) out_of_range("logit_bias", "token " + std::to_string(b.token), "token ids >= 0");
        if (!(b.bias >= -100.0f && b.bias <= 100.0f) && b.bias != -INFINITY) {
            out_of_range("logit_bias", "bias " + number(b.bias) + " for token " + std::to_string(b.token), "[-100, 100], or -inf (never)");
        }
    }
}

void SamplingParams::validate_for(int32_t n_vocab) const {
    validate();
    for (const LogitBias& b : logit_bias) {
        if (b.token >= n_vocab) {
            out_of_range("logit_bias", "token " + std::to_string(b.token),
                         "token ids of this vocabulary (0 to " + std::to_string(n_vocab - 1) + ")");
        }
    }
}

// ------------------------------------------------------------------ Rng ---

Rng::Rng(uint64_t seed) {
    if (seed == kRandomSeed) {
        std::random_device device;
        seed = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
    uint64_t x = seed;
    for (uint64_t& s : state_) s = splitmix64(x);
}

Rng::Rng(const RngState& state) {
    for (int i = 0; i < 4; ++i) state_[i] = state.s[i];
}

RngState Rng::state() const {
    RngState out;
    for (int i = 0; i < 4; ++i) out.s[i] = state_[i];
    return out;
}

uint64_t Rng::next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

// -------------------------------------------------------------- Sampler ---

namespace {

template <typename C>
bool by_logit(const C& a, const C& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

template <typename C>
bool by_p(const C& a, const C& b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
}

// Sorted prefixes grow geometrically from this many: most draws and top-p
// cuts end in the first one, and the rest never costs more than a full sort.
constexpr size_t kFirstSortedChunk = 64;

size_t next_chunk_end(size_t sorted, size_t n) { return std::min(n, std::max(2 * sorted, kFirstSortedChunk)); }

}  // namespace

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab) : params_(params), n_vocab_(n_vocab) {
    params_.validate();
    if (n_vocab <= 0) throw Error("sampler: n_vocab must be > 0, got " + std::to_string(n_vocab));
    candidates_.resize(static_cast<size_t>(n_vocab));
    transformed_.resize(static_cast<size_t>(n_vocab));
    seen_mark_.assign(static_cast<size_t>(n_vocab), 0);
    counts_.assign(static_cast<size_t>(n_vocab), 0);
    counted_.reserve(static_cast<size_t>(n_vocab));
}

void Sampler::set_params(const SamplingParams& params) {
    params.validate();
    params_ = params;
}

void Sampler::check_history_token(int32_t token) const {
    if (token < 0 || token >= n_vocab_) {
        throw Error("sampler: history token " + std::to_string(token) + " is out of range (n_vocab " + std::to_string(n_vocab_) + ")");
    }
}

// In llama.cpp's order: the logit_bias sampler comes first in its chain,
// then one penalties sampler that divides (or multiplies) by repeat_penalty
// and then subtracts count * frequency + presence, token by token.
bool Sampler::apply_transforms(const float* logits, std::span<const int32_t> history) {
    const SamplingParams& p = params_;
    // llama.cpp: repeat_last_n 0 turns its whole penalties sampler off, so
    // it also empties the LastN window of the counted penalties.
    std::span<const int32_t> last_n = history;
    if (p.repeat_last_n == 0) {
        last_n = {};
    } else if (p.repeat_last_n > 0 && history.size() > static_cast<size_t>(p.repeat_last_n)) {
        last_n = history.last(static_cast<size_t>(p.repeat_last_n));
    }
    const bool repeat = p.repeat_penalty != 1.0f && !last_n.empty();
    const bool counting = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    std::span<const int32_t> counted;
    if (counting) {
        counted = p.penalty_window == PenaltyWindow::LastN
                      ? last_n
                      : history.subspan(std::min(history.size(), static_cast<size_t>(std::max(p.n_prompt, 0))));
    }
    if (!repeat && counted.empty() && p.logit_bias.empty()) return false;

    std::copy(logits, logits + n_vocab_, transformed_.begin());
    for (const LogitBias& b : p.logit_bias) {
        // Ids past this sampler's vocabulary belong to a wider target's (a
        // draft's sampler reads only the ids it has); a request's ids were
        // checked against the target's by validate_for.
        if (b.token >= n_vocab_) continue;
        float& logit = transformed_[static_cast<size_t>(b.token)];
        logit = finite_above(sanitized(logit) + b.bias);
    }
    if (repeat) {
        if (++mark_ == 0) {  // wrapped: old marks could collide
            std::fill(seen_mark_.begin(), seen_mark_.end(), 0);
            mark_ = 1;
        }
        const float penalty = p.repeat_penalty;
        for (const int32_t token : last_n) {
            check_history_token(token);
            uint32_t& seen = seen_mark_[static_cast<size_t>(token)];
            if (seen == mark_) continue;  // once per distinct token, however often it occurred
            seen = mark_;
            float& logit = transformed_[static_cast<size_t>(token)];
            logit = sanitized(logit);
            logit = finite_above(logit > 0.0f ? logit / penalty : logit * penalty);
        }
    }
    if (!counted.empty()) {
        for (const int32_t token : counted) {
            check_history_token(token);
            if (counts_[static_cast<size_t>(token)]++ == 0) counted_.push_back(token);
        }
        for (const int32_t token : counted_) {
            uint32_t& count = counts_[static_cast<size_t>(token)];
            float& logit = transformed_[static_cast<size_t>(token)];
            logit = finite_above(sanitized(logit) - (static_cast<float>(count) * p.frequency_penalty + p.presence_penalty));
            count = 0;
        }
        counted_.clear();
    }
    return true;
}

// Keeps the smallest prefix, by decreasing logit, whose softmax mass at
// temperature 1 reaches top_p (llama.cpp: cumulative float sum >= p).
size_t Sampler::top_p_filter(size_t n) {
    Candidate* c = candidates_.data();
    float max_logit = -INFINITY;
    for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, c[i].logit);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(c[i].logit) - max_logit);
    float cumulative = 0.0f;
    for (size_t sorted = 0; sorted < n;) {
        const size_t end = next_chunk_end(sorted, n);
        std::partial_sort(c + sorted, c + end, c + n, by_logit<Candidate>);
        for (size_t i = sorted; i < end; ++i) {
            cumulative += static_cast<float>(std::exp(static_cast<double>(c[i].logit) - max_logit) / sum);
            if (cumulative >= params_.top_p) return i + 1;
        }
        sorted = end;
    }
    return n;
}

size_t Sampler::prepare(const float* logits, std::span<const int32_t> history) {
    const float* source = apply_transforms(logits, history) ? transformed_.data() : logits;
    Candidate* c = candidates_.data();
    const auto n_vocab = static_cast<size_t>(n_vocab_);
    const auto no_valid_logit = [] { return Error("sampler: every logit is -inf or NaN"); };

    if (params_.greedy()) {
        size_t best = 0;
        float best_logit = sanitized(source[0]);
        for (size_t i = 1; i < n_vocab; ++i) {
            const float logit = sanitized(source[i]);
            if (logit > best_logit) {
                best = i;
                best_logit = logit;
            }
        }
        if (best_logit == -INFINITY) throw no_valid_logit();
        c[0] = {static_cast<int32_t>(best), best_logit, 1.0f};
        return 1;
    }

    size_t n = n_vocab;
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n_vocab) {
        // One pass with a heap of the k best so far (its top is the worst of
        // them): most tokens are rejected by a single comparison.
        n = static_cast<size_t>(params_.top_k);
        for (size_t i = 0; i < n; ++i) c[i] = {static_cast<int32_t>(i), sanitized(source[i]), 0.0f};
        std::make_heap(c, c + n, by_logit<Candidate>);
        for (size_t i = n; i < n_vocab; ++i) {
            const float logit = sanitized(source[i]);
            if (logit < c[0].logit) continue;
            const Candidate candidate{static_cast<int32_t>(i), logit, 0.0f};
            if (!by_logit(candidate, c[0])) continue;
            std::pop_heap(c, c + n, by_logit<Candidate>);
            c[n - 1] = candidate;
            std::push_heap(c, c + n, by_logit<Candidate>);
        }
    } else {
        for (size_t i = 0; i < n_vocab; ++i) c[i] = {static_cast<int32_t>(i), sanitized(source[i]), 0.0f};
    }
    float best_logit = -INFINITY;
    for (size_t i = 0; i < n; ++i) best_logit = std::max(best_logit, c[i].logit);
    if (best_logit == -INFINITY) throw no_valid_logit();

    if (params_.top_p < 1.0f) n = top_p_filter(n);
    if (params_.min_p > 0.0f) {
        // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p)
        float top = -INFINITY;
        for (size_t i = 0; i < n; ++i) top = std::max(top, c[i].logit);
        const float threshold = top + std::log(params_.min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; ++i) {
            if (c[i].logit >= threshold) c[kept++] = c[i];
        }
        n = kept;
    }

    const float temperature = params_.temperature;
    float top = -INFINITY;
    for (size_t i = 0; i < n; ++i) {
        c[i].logit = finite_above(c[i].logit / temperature);
        top = std::max(top, c[i].logit);
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        c[i].p = static_cast<float>(std::exp(static_cast<double>(c[i].logit) - top));
        sum += c[i].p;
    }
    // Tokens whose probability underflows to 0 can never be drawn: drop them.
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
        c[i].p = static_cast<float>(c[i].p / sum);
        if (c[i].p > 0.0f) c[kept++] = c[i];
    }
    return kept;
}

void Sampler::distribution(const float* logits, std::span<const int32_t> history, std::vector<TokenProb>& out) {
    const size_t n = prepare(logits, history);
    Candidate* c = candidates_.data();
    std::sort(c, c + n, by_p<Candidate>);
    out.clear();
    for (size_t i = 0; i < n; ++i) out.push_back({c[i].id, c[i].p});
}

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history, Rng& rng) {
    const size_t n = prepare(logits, history);
    Candidate* c = candidates_.data();
    if (n == 1) return c[0].id;
    // draw() over the sorted distribution, sorting only as far as the draw reaches.
    const double u = rng.uniform();
    double cumulative = 0.0;
    for (size_t sorted = 0; sorted < n;) {
        const size_t end = next_chunk_end(sorted, n);
        std::partial_sort(c + sorted, c + end, c + n, by_p<Candidate>);
        for (size_t i = sorted; i < end; ++i) {
            cumulative += c[i].p;
            if (u < cumulative) return c[i].id;
        }
        sorted = end;
    }
    return c[n - 1].id;  // rounding left u above the total: the last, as draw()
}

int32_t Sampler::draw(std::span<const TokenProb> dist, Rng& rng) {
    if (dist.empty()) throw Error("sampler: cannot draw from an empty distribution");
    if (dist.size() == 1) return dist[0].id;
    const double u = rng.uniform();
    double cumulative = 0.0;
    for (const TokenProb& t : dist) {
        cumulative += t.p;
        if (u < cumulative) return t.id;
    }
    return dist.back().id;
}

}  // namespace specd
