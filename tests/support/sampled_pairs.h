// The statistical check of sampled speculation, shared by the tests of
// every draft path: on a tiny model (tiny_model.h), the exact joint
// distribution of the first two tokens plain sampling generates, by
// enumeration, against the pairs a speculative path generated, by
// chi-square. Pairs are keyed first * n_vocab + second.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "support/tiny_model.h"

namespace specd::test {

// P(first, second) under plain sampling with `sampling` after `prompt`:
// the target's two distributions through the sampler's filters, on
// sequences of `kv` that are freed again.
inline std::map<int64_t, double> two_token_distribution(ForwardBackend& fwd, PagedKvCache& kv, const std::vector<int32_t>& prompt,
                                                        const SamplingParams& sampling) {
    const int64_t V = fwd.n_vocab();
    Sampler sampler(sampling, fwd.n_vocab());
    std::vector<TokenProb> d1, d2;
    std::map<int64_t, double> expected;
    {
        const int32_t s = kv.create_sequence();
        auto logits = prefill(fwd, kv, s, prompt);
        std::vector<float> l1(logits.begin(), logits.end());
        sampler.distribution(l1.data(), prompt, d1);
        kv.free_sequence(s);
    }
    for (const TokenProb& a : d1) {
        std::vector<int32_t> c2 = prompt;
        c2.push_back(a.id);
        const int32_t s = kv.create_sequence();
        auto logits = prefill(fwd, kv, s, c2);
        std::vector<float> l2(logits.begin(), logits.end());
        sampler.distribution(l2.data(), c2, d2);
        kv.free_sequence(s);
        for (const TokenProb& b : d2) expected[a.id * V + b.id] += static_cast<double>(a.p) * b.p;
    }
    return expected;
}

// P(second, third) under plain sampling, the first token summed out: the
// third token is the first a speculative step can verify on a row whose
// history holds a drafted token (row 1), where the penalties must count it.
inline std::map<int64_t, double> second_third_distribution(ForwardBackend& fwd, PagedKvCache& kv, const std::vector<int32_t>& prompt,
                                                           const SamplingParams& sampling) {
    const int64_t V = fwd.n_vocab();
    Sampler sampler(sampling, fwd.n_vocab());
    const auto dist_after = [&](const std::vector<int32_t>& context, std::vector<TokenProb>& out) {
        const int32_t s = kv.create_sequence();
        auto logits = prefill(fwd, kv, s, context);
        std::vector<float> l(logits.begin(), logits.end());
        sampler.distribution(l.data(), context, out);
        kv.free_sequence(s);
    };
    std::vector<TokenProb> d1, d2, d3;
    std::map<int64_t, double> expected;
    dist_after(prompt, d1);
    for (const TokenProb& a : d1) {
        std::vector<int32_t> c2 = prompt;
        c2.push_back(a.id);
        dist_after(c2, d2);
        const std::vector<TokenProb> second = d2;
        for (const TokenProb& b : second) {
            std::vector<int32_t> c3 = c2;
            c3.push_back(b.id);
            dist_after(c3, d3);
            for (const TokenProb& c : d3) expected[b.id * V + c.id] += static_cast<double>(a.p) * b.p * c.p;
        }
    }
    return expected;
}

// One generation a pair comes from: 4 tokens, EOS not stopping, and a
// fixed draft length (k must not depend on timing).
inline GenerationParams pair_generation(const SamplingParams& sampling, uint64_t seed) {
    GenerationParams gp{.max_tokens = 4, .sampling = sampling, .stop_at_eos = false, .stop = {}};
    gp.sampling.seed = seed;
    return gp;
}
inline SpeculativeParams fixed_draft(int32_t draft_max) { return SpeculativeParams{.draft_max = draft_max, .adaptive = false}; }

// First-two-token pairs of `n` generations and the tokens drafted in them.
struct SampledPairs {
    std::map<int64_t, int64_t> observed;
    int64_t n = 0;
    int64_t drafted = 0;
};

// `n` generations of 4 tokens by `spec` with `sampling` (seeds seed0,
// seed0 + 1, ...), drafting `draft_max` tokens a step (fixed k); the pair
// is tokens [first, first + 1] of each.
inline SampledPairs sample_pairs(SpeculativeDecoder& spec, int32_t n_vocab, const std::vector<int32_t>& prompt,
                                 const SamplingParams& sampling, int64_t n, uint64_t seed0, int32_t draft_max = 3, size_t first = 0) {
    SampledPairs out;
    out.n = n;
    for (int64_t i = 0; i < n; ++i) {
        const SpeculativeResult r = spec.generate(prompt, pair_generation(sampling, seed0 + static_cast<uint64_t>(i)), fixed_draft(draft_max));
        REQUIRE(r.tokens.size() == 4);
        ++out.observed[r.tokens[first] * static_cast<int64_t>(n_vocab) + r.tokens[first + 1]];
        out.drafted += r.stats.n_drafted;
    }
    return out;
}

// Speculation really happened (drafts in at least 1 of 20 runs' worth of
// tokens) and the pairs follow `expected` at p = 0.001.
inline void check_follows(const SampledPairs& got, const std::map<int64_t, double>& expected, const std::string& what) {
    CHECK(got.drafted > got.n / 20);  // speculation really happened
    const auto [stat, df] = chi_square(got.observed, expected, got.n);
    REQUIRE(df >= 3);
    INFO(what << ": chi2 " << stat << " df " << df);
    CHECK(stat < chi_square_critical_001(df));
}

}  // namespace specd::test
