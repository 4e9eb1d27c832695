// The sampler: each filter alone and in llama.cpp's chain on 4-token
// vocabularies with expected probability tables (as llama.cpp's
// test-sampling), the repetition penalty, OpenAI's and llama-server's
// frequency and presence penalties, logit_bias, greedy, seeding, and that
// sample() draws exactly from distribution().
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <vector>

#include "engine/error.h"
#include "engine/sampler.h"

// Counts heap allocations so a test can prove the hot path makes none.
// (GCC mistakes the malloc/free pair of a replaced operator new/delete for a
// mismatch once it inlines them.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
// Every (unaligned) form is replaced so that each new pairs with its delete.
namespace {
std::atomic<long> g_allocations{0};
void* counted_malloc(std::size_t size) noexcept {
    ++g_allocations;
    return std::malloc(size ? size : 1);
}
void* counted_or_throw(std::size_t size) {
    if (void* p = counted_malloc(size)) return p;
    throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t size) { return counted_or_throw(size); }
void* operator new[](std::size_t size) { return counted_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using specd::Rng;
using specd::Sampler;
using specd::SamplingParams;
using specd::TokenProb;

namespace {

// Every filter off, temperature 1: the plain softmax.
SamplingParams plain() {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 42;
    return p;
}

std::vector<float> logits_of(const std::vector<float>& probs) {
    std::vector<float> logits;
    for (const float p : probs) logits.push_back(std::log(p));
    return logits;
}

// expected: id → p for the tokens that must remain; all others must be gone.
void check_distribution(const SamplingParams& params, const std::vector<float>& probs,
                        const std::map<int32_t, float>& expected, const std::vector<int32_t>& history = {}) {
    Sampler sampler(params, static_cast<int32_t>(probs.size()));
    std::vector<TokenProb> dist;
    const std::vector<float> logits = logits_of(probs);
    sampler.distribution(logits.data(), history, dist);
    std::map<int32_t, float> got;
    for (const TokenProb& t : dist) got[t.id] += t.p;
    // Below 1e-5 counts as absent, as llama.cpp's tables write such tokens as 0.
    for (auto it = got.begin(); it != got.end();) it = it->second < 1e-5f ? got.erase(it) : std::next(it);
    std::map<int32_t, float> want;
    for (const auto& [id, p] : expected) {
        if (p >= 1e-5f) want[id] = p;
    }
    REQUIRE(got.size() == want.size());
    for (const auto& [id, p] : want) {
        INFO("token " << id);
        REQUIRE(got.count(id) == 1);
        CHECK(got[id] == Approx(p).margin(1e-5));
    }
    for (size_t i = 1; i < dist.size(); ++i) CHECK(dist[i - 1].p >= dist[i].p);
}

const std::vector<float> kProbs = {0.1f, 0.2f, 0.3f, 0.4f};

}  // namespace

// ------------------------------------------------------ filters, one by one

TEST_CASE("temperature 1 keeps the distribution and temperature 0 is a point mass", "[sampler]") {
    SamplingParams p = plain();
    check_distribution(p, kProbs, {{0, 0.1f}, {1, 0.2f}, {2, 0.3f}, {3, 0.4f}});
    p.temperature = 0.0f;
    check_distribution(p, kProbs, {{3, 1.0f}});
    p.temperature = 0.5f;  // p^2 normalised
    check_distribution(p, kProbs, {{0, 0.01f / 0.3f}, {1, 0.04f / 0.3f}, {2, 0.09f / 0.3f}, {3, 0.16f / 0.3f}});
}

TEST_CASE("top-k keeps the k most likely tokens", "[sampler]") {
    SamplingParams p = plain();
    p.top_k = 1;
    check_distribution(p, kProbs, {{3, 1.0f}});
    p.top_k = 3;
    check_distribution(p, kProbs, {{3, 0.44444f}, {2, 0.33333f}, {1, 0.22222f}});
    p.top_k = 4;
    check_distribution(p, kProbs, {{3, 0.4f}, {2, 0.3f}, {1, 0.2f}, {0, 0.1f}});
    p.top_k = 0;
    check_distribution(p, kProbs, {{3, 0.4f}, {2, 0.3f}, {1, 0.2f}, {0, 0.1f}});
    p.top_k = 100;
    check_distribution(p, kProbs, {{3, 0.4f}, {2, 0.3f}, {1, 0.2f}, {0, 0.1f}});
}

TEST_CASE("top-p keeps the smallest prefix reaching p", "[sampler]") {
    SamplingParams p = plain();
    p.top_p = 0.0f;
    check_distribution(p, kProbs, {{3, 1.0f}});
    p.top_p = 0.7f;
    check_distribution(p, kProbs, {{3, 0.571429f}, {2, 0.428571f}});
    p.top_p = 0.8f;
    check_distribution(p, kProbs, {{3, 0.44444f}, {2, 0.33333f}, {1, 0.22222f}});
    p.top_p = 1.0f;
    check_distribution(p, kProbs, {{3, 0.4f}, {2, 0.3f}, {1, 0.2f}, {0, 0.1f}});
}

TEST_CASE("min-p drops tokens below min_p times the top probability", "[sampler]") {
    SamplingParams p = plain();
    const std::map<int32_t, float> all = {{0, 0.1f}, {1, 0.2f}, {2, 0.3f}, {3, 0.4f}};
    const std::map<int32_t, float> three = {{1, 0.2f / 0.9f}, {2, 0.3f / 0.9f}, {3, 0.4f / 0.9f}};
    const std::map<int32_t, float> two = {{2, 0.3f / 0.7f}, {3, 0.4f / 0.7f}};
    const std::map<int32_t, float> one = {{3, 1.0f}};
    p.min_p = 0.00f; check_distribution(p, kProbs, all);
    p.min_p = 0.24f; check_distribution(p, kProbs, all);
    p.min_p = 0.26f; check_distribution(p, kProbs, three);
    p.min_p = 0.49f; check_distribution(p, kProbs, three);
    p.min_p = 0.51f; check_distribution(p, kProbs, two);
    p.min_p = 0.74f; check_distribution(p, kProbs, two);
    p.min_p = 0.76f; check_distribution(p, kProbs, one);
    p.min_p = 1.00f; check_distribution(p, kProbs, one);
}

// ------------------------------------------------------------- the chain

TEST_CASE("the chain applies top-k, top-p, min-p, then temperature", "[sampler]") {
    SamplingParams p = plain();
    // top-k 3 → {.2,.3,.4}/.9; top-p .8 keeps all three (.444+.333 < .8);
    // min-p .6 drops .2 (< .6 * .4); temperature 2 → sqrt(p) normalised.
    p.top_k = 3;
    p.top_p = 0.8f;
    p.min_p = 0.6f;
    p.temperature = 2.0f;
    const float a = std::sqrt(0.3f), b = std::sqrt(0.4f);
    check_distribution(p, kProbs, {{2, a / (a + b)}, {3, b / (a + b)}});

    // top-k 3, top-p .7 → {.4,.3}; temperature .5 → p^2 normalised.
    p.top_p = 0.7f;
    p.min_p = 0.0f;
    p.temperature = 0.5f;
    check_distribution(p, kProbs, {{3, 0.16f / 0.25f}, {2, 0.09f / 0.25f}});
}

TEST_CASE("top-p is judged before the temperature sharpens the distribution", "[sampler]") {
    SamplingParams p = plain();
    p.top_p = 0.7f;
    p.temperature = 0.25f;
    // At temperature 1 top-p keeps {.4, .3}; then p^4 normalised. (Had the
    // temperature come first, .4^4 alone would pass .7 and keep one token.)
    const float a = std::pow(0.4f, 4.0f), b = std::pow(0.3f, 4.0f);
    check_distribution(p, kProbs, {{3, a / (a + b)}, {2, b / (a + b)}});
}

TEST_CASE("llama.cpp's defaults form the chain", "[sampler]") {
    const SamplingParams p;
    CHECK(p.temperature == 0.8f);
    CHECK(p.top_k == 40);
    CHECK(p.top_p == 0.95f);
    CHECK(p.min_p == 0.05f);
    CHECK(p.repeat_penalty == 1.0f);
    CHECK(p.repeat_last_n == 64);
    CHECK(p.seed == specd::kRandomSeed);
    CHECK_FALSE(p.greedy());
    p.validate();
}

// ------------------------------------------------------ repetition penalty

TEST_CASE("the repetition penalty matches llama.cpp's tables", "[sampler]") {
    SamplingParams p = plain();
    p.repeat_penalty = 50.0f;
    const std::vector<float> flat(5, 0.2f);
    check_distribution(p, flat, {{1, 0.25f}, {2, 0.25f}, {3, 0.25f}, {4, 0.25f}}, {0});
    check_distribution(p, flat, {{3, 0.5f}, {4, 0.5f}}, {0, 1, 2});
    check_distribution(p, flat, {{3, 0.5f}, {4, 0.5f}}, {0, 1, 2, 0, 0});
}

TEST_CASE("the penalty divides positive logits and multiplies the others, once per token", "[sampler]") {
    SamplingParams p = plain();
    p.repeat_penalty = 2.0f;
    Sampler sampler(p, 3);
    const std::vector<float> logits = {2.0f, 1.0f, -1.0f};
    std::vector<TokenProb> dist;
    // 2 → 1 and -1 → -2; token 0 appearing twice is penalised once.
    sampler.distribution(logits.data(), std::vector<int32_t>{0, 2, 0}, dist);
    const double z = 2.0 * std::exp(1.0) + std::exp(-2.0);
    std::map<int32_t, float> got;
    for (const TokenProb& t : dist) got[t.id] = t.p;
    CHECK(got[0] == Approx(std::exp(1.0) / z));
    CHECK(got[1] == Approx(std::exp(1.0) / z));
    CHECK(got[2] == Approx(std::exp(-2.0) / z));
}

TEST_CASE("the penalty looks only at the last repeat_last_n tokens", "[sampler]") {
    SamplingParams p = plain();
    p.repeat_penalty = 1e4f;
    p.temperature = 0.0f;
    const std::vector<float> logits = {4.0f, 3.0f, 2.0f, 1.0f};
    const std::vector<int32_t> history = {0, 1, 2};
    Rng rng(1);
    p.repeat_last_n = 1;  // only 2 penalised: 0 stays best
    CHECK(Sampler(p, 4).sample(logits.data(), history, rng) == 0);
    p.repeat_last_n = 3;
    CHECK(Sampler(p, 4).sample(logits.data(), history, rng) == 3);
    p.repeat_last_n = -1;  // the whole history
    CHECK(Sampler(p, 4).sample(logits.data(), history, rng) == 3);
    p.repeat_last_n = 0;   // off
    CHECK(Sampler(p, 4).sample(logits.data(), history, rng) == 0);
    p.repeat_last_n = 64;
    CHECK_THROWS_AS(Sampler(p, 4).sample(logits.data(), std::vector<int32_t>{7}, rng), specd::Error);
}

// ------------------------------------- frequency, presence and logit_bias

namespace {
// The distribution's log-probabilities relative to token `base`: the
// transformed logits' differences, which temperature 1 without filters keeps.
std::map<int32_t, double> log_ratios(Sampler& sampler, const std::vector<float>& logits, const std::vector<int32_t>& history,
                                     int32_t base) {
    std::vector<TokenProb> dist;
    sampler.distribution(logits.data(), history, dist);
    std::map<int32_t, double> p;
    for (const TokenProb& t : dist) p[t.id] = t.p;
    std::map<int32_t, double> out;
    for (const auto& [id, q] : p) out[id] = std::log(q / p.at(base));
    return out;
}
}  // namespace

TEST_CASE("OpenAI's penalties subtract count * frequency + presence for the output's tokens, not the prompt's", "[sampler]") {
    SamplingParams p = plain();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.n_prompt = 2;  // the prompt {3, 3} is not counted
    Sampler sampler(p, 4);
    const std::vector<float> flat(4, 0.0f);
    const auto r = log_ratios(sampler, flat, {3, 3, 0, 1, 1}, 2);
    CHECK(r.at(0) == Approx(-(1 * 0.25 + 0.5)));
    CHECK(r.at(1) == Approx(-(2 * 0.25 + 0.5)));
    CHECK(r.at(3) == Approx(0.0).margin(1e-6));
    // Negative values reward the tokens instead (OpenAI allows [-2, 2]).
    p.presence_penalty = -1.0f;
    p.frequency_penalty = 0.0f;
    sampler.set_params(p);
    const auto neg = log_ratios(sampler, flat, {3, 3, 0, 1, 1}, 2);
    CHECK(neg.at(0) == Approx(1.0));
    CHECK(neg.at(1) == Approx(1.0));
    // No output yet: nothing is counted, whatever the prompt holds.
    const auto none = log_ratios(sampler, flat, {3, 3}, 2);
    CHECK(none.at(3) == Approx(0.0).margin(1e-6));
}

TEST_CASE("llama-server's window: the penalties count the last repeat_last_n tokens of prompt + output, after the repetition penalty",
          "[sampler]") {
    SamplingParams p = plain();
    p.penalty_window = specd::PenaltyWindow::LastN;
    p.repeat_last_n = 4;
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.n_prompt = 2;  // not read in this window
    Sampler sampler(p, 4);
    const std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f};
    // The window is {3, 0, 1, 1}; token 2 (first in the history) is outside it.
    const auto r = log_ratios(sampler, logits, {2, 3, 3, 0, 1, 1}, 2);
    // llama.cpp: l / penalty (l > 0), then - (count * frequency + presence).
    CHECK(r.at(0) == Approx((2.0 / 2 - 0.75) - -1.0));
    CHECK(r.at(1) == Approx((1.0 / 2 - 1.0) - -1.0));
    CHECK(r.at(3) == Approx((0.5 / 2 - 0.75) - -1.0));
    // repeat_last_n 0 turns llama.cpp's whole penalties sampler off.
    p.repeat_last_n = 0;
    sampler.set_params(p);
    const auto off = log_ratios(sampler, logits, {2, 3, 3, 0, 1, 1}, 2);
    CHECK(off.at(0) == Approx(3.0));
    CHECK(off.at(3) == Approx(1.5));
}

TEST_CASE("logit_bias is added before the penalties, -inf removes a token, and ids past the sampler's vocabulary are skipped",
          "[sampler]") {
    SamplingParams p = plain();
    p.logit_bias = {{0, 1.0f}, {2, -INFINITY}, {3, 0.5f}, {3, 0.5f}, {9, 50.0f}};
    Sampler sampler(p, 4);
    const std::vector<float> flat(4, 1.0f);
    const auto r = log_ratios(sampler, flat, {}, 1);
    CHECK(r.size() == 3);  // token 2 can never be drawn
    CHECK(r.at(0) == Approx(1.0));
    CHECK(r.at(3) == Approx(1.0));  // repeated ids add up
    // Bias first, then the repetition penalty: (1 + 1) / 2 = 1, where the
    // other order would give 1 / 2 + 1 = 1.5.
    p.logit_bias = {{0, 1.0f}};
    p.repeat_penalty = 2.0f;
    sampler.set_params(p);
    const auto ordered = log_ratios(sampler, flat, {0}, 1);
    CHECK(ordered.at(0) == Approx(0.0).margin(1e-6));
}

TEST_CASE("greedy follows the transformed logits, and plain_argmax() is false whenever a transform is active", "[sampler]") {
    SamplingParams p = plain();
    p.temperature = 0.0f;
    CHECK(p.plain_argmax());
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    Rng rng(5);
    p.logit_bias = {{3, 3.5f}};
    CHECK_FALSE(p.plain_argmax());
    CHECK(Sampler(p, 4).sample(logits.data(), {}, rng) == 3);
    p.logit_bias = {{0, -INFINITY}};
    CHECK(Sampler(p, 4).sample(logits.data(), {}, rng) == 1);
    p.logit_bias.clear();
    p.frequency_penalty = 0.6f;
    CHECK_FALSE(p.plain_argmax());
    p.n_prompt = 1;
    // Token 0 twice in the output: 3 - 1.2 < 2.
    CHECK(Sampler(p, 4).sample(logits.data(), std::vector<int32_t>{2, 0, 0}, rng) == 1);
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 2.5f;
    CHECK_FALSE(p.plain_argmax());
    // 0 → 0.5 and 1 → -0.5 (output); 2 is the prompt's, not counted.
    CHECK(Sampler(p, 4).sample(logits.data(), std::vector<int32_t>{2, 0, 1}, rng) == 2);
    p.presence_penalty = 0.0f;
    p.repeat_penalty = 1.5f;
    CHECK_FALSE(p.plain_argmax());
    p.repeat_last_n = 0;  // a penalty over no tokens changes nothing
    CHECK(p.plain_argmax());
}

// ------------------------------------------------------------------ greedy

TEST_CASE("greedy picks the argmax of the penalised logits, lowest id on ties", "[sampler]") {
    SamplingParams p = plain();
    p.temperature = 0.0f;
    Sampler sampler(p, 4);
    Rng rng(7);
    const std::vector<float> tie = {1.0f, 3.0f, 3.0f, 2.0f};
    CHECK(sampler.sample(tie.data(), {}, rng) == 1);
    std::vector<TokenProb> dist;
    sampler.distribution(tie.data(), {}, dist);
    REQUIRE(dist.size() == 1);
    CHECK(dist[0].id == 1);
    CHECK(dist[0].p == 1.0f);

    p.temperature = -1.0f;  // any temperature <= 0 is greedy
    p.repeat_penalty = 2.0f;
    Sampler penalised(p, 4);
    CHECK(penalised.sample(tie.data(), std::vector<int32_t>{1, 2}, rng) == 3);

    // Greedy draws nothing from the rng.
    Rng fresh(7), used(7);
    sampler.sample(tie.data(), {}, used);
    CHECK(fresh.next_u64() == used.next_u64());
}

TEST_CASE("NaN logits never win and all-NaN logits are an error", "[sampler]") {
    SamplingParams p = plain();
    Sampler sampler(p, 3);
    const std::vector<float> some = {std::nanf(""), 1.0f, -INFINITY};
    std::vector<TokenProb> dist;
    sampler.distribution(some.data(), {}, dist);
    REQUIRE(dist.size() == 1);
    CHECK(dist[0].id == 1);
    const std::vector<float> none = {std::nanf(""), -INFINITY, std::nanf("")};
    Rng rng(1);
    CHECK_THROWS_AS(sampler.sample(none.data(), {}, rng), specd::Error);
    const std::vector<float> huge = {INFINITY, INFINITY, 0.0f};
    sampler.distribution(huge.data(), {}, dist);
    REQUIRE(dist.size() == 2);
    CHECK(dist[0].p == Approx(0.5f));
}

// ------------------------------------------------------------- randomness

TEST_CASE("the same seed gives the same draws, another seed others", "[sampler]") {
    Rng a(123), b(123), c(124);
    bool differs = false;
    for (int i = 0; i < 100; ++i) {
        const uint64_t x = a.next_u64();
        CHECK(x == b.next_u64());
        differs |= x != c.next_u64();
    }
    CHECK(differs);
    Rng u(5);
    for (int i = 0; i < 10000; ++i) {
        const double x = u.uniform();
        REQUIRE(x >= 0.0);
        REQUIRE(x < 1.0);
    }
    Rng r1(specd::kRandomSeed), r2(specd::kRandomSeed);
    CHECK(r1.next_u64() != r2.next_u64());

    SamplingParams p;  // the default chain
    p.seed = 99;
    std::vector<float> logits(1000);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 3.0);
    Sampler s1(p, 1000), s2(p, 1000);
    Rng g1(p.seed), g2(p.seed);
    for (int i = 0; i < 50; ++i) CHECK(s1.sample(logits.data(), {}, g1) == s2.sample(logits.data(), {}, g2));
}

TEST_CASE("sample() is exactly draw(distribution()): same token, same rng use", "[sampler]") {
    Rng maker(2024);
    std::vector<SamplingParams> configs;
    configs.push_back(SamplingParams{});  // llama.cpp's defaults
    SamplingParams off = plain();
    configs.push_back(off);               // nothing filtered: the sorted walk goes deep
    off.temperature = 3.0f;
    configs.push_back(off);
    SamplingParams only_p = plain();
    only_p.top_p = 0.9f;
    configs.push_back(only_p);
    SamplingParams only_min = plain();
    only_min.min_p = 0.01f;
    only_min.repeat_penalty = 1.3f;
    configs.push_back(only_min);
    SamplingParams one = plain();
    one.top_k = 1;
    configs.push_back(one);
    SamplingParams counted;  // the default chain with OpenAI's penalties and a bias
    counted.presence_penalty = 0.4f;
    counted.frequency_penalty = -0.3f;
    counted.n_prompt = 50;
    counted.logit_bias = {{7, 2.0f}, {8, -INFINITY}, {9, -3.0f}};
    configs.push_back(counted);
    counted.penalty_window = specd::PenaltyWindow::LastN;
    counted.repeat_penalty = 1.2f;
    configs.push_back(counted);

    const int32_t n_vocab = 32000;
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    std::vector<int32_t> history;
    for (int i = 0; i < 100; ++i) history.push_back(static_cast<int32_t>(maker.next_u64() % n_vocab));
    std::vector<TokenProb> dist;
    for (const SamplingParams& params : configs) {
        Sampler sampler(params, n_vocab);
        for (int round = 0; round < 20; ++round) {
            const double scale = 0.5 + 4.0 * maker.uniform();
            for (float& l : logits) l = static_cast<float>((maker.uniform() - 0.5) * scale);
            const uint64_t seed = maker.next_u64();
            Rng a(seed), b(seed);
            const int32_t sampled = sampler.sample(logits.data(), history, a);
            sampler.distribution(logits.data(), history, dist);
            double total = 0.0;
            for (const TokenProb& t : dist) total += t.p;
            CHECK(total == Approx(1.0).epsilon(1e-4));
            CHECK(sampled == Sampler::draw(dist, b));
            CHECK(a.next_u64() == b.next_u64());
        }
    }
}

TEST_CASE("sample() frequencies match distribution() (chi-square)", "[sampler]") {
    SamplingParams p = plain();
    p.top_k = 6;
    p.min_p = 0.02f;
    p.temperature = 0.9f;
    p.repeat_penalty = 1.2f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    p.n_prompt = 1;
    p.logit_bias = {{0, 1.5f}, {4, -0.5f}};
    const std::vector<float> logits = {0.5f, 2.0f, 1.5f, -1.0f, 1.0f, 0.0f, 2.2f, -3.0f, 0.7f, 1.9f};
    const std::vector<int32_t> history = {1, 6, 6};
    Sampler sampler(p, static_cast<int32_t>(logits.size()));
    std::vector<TokenProb> dist;
    sampler.distribution(logits.data(), history, dist);
    REQUIRE(dist.size() == 6);

    Rng rng(31337);
    const int draws = 200000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits.data(), history, rng)];
    double chi2 = 0.0;
    for (const TokenProb& t : dist) {
        const double expected = t.p * draws;
        const double diff = counts[t.id] - expected;
        chi2 += diff * diff / expected;
        counts.erase(t.id);
    }
    CHECK(counts.empty());  // nothing outside the distribution was drawn
    // 5 degrees of freedom: P(chi2 > 20.52) = 0.001.
    CHECK(chi2 < 20.52);
}

TEST_CASE("draw() inverts the CDF and needs no randomness for a point mass", "[sampler]") {
    const std::vector<TokenProb> dist = {{7, 0.5f}, {3, 0.3f}, {9, 0.2f}};
    Rng rng(11);
    std::map<int32_t, int> counts;
    for (int i = 0; i < 10000; ++i) ++counts[Sampler::draw(dist, rng)];
    CHECK(counts.size() == 3);
    CHECK(counts[7] > counts[3]);
    CHECK(counts[3] > counts[9]);
    Rng fresh(11), used(11);
    CHECK(Sampler::draw(std::vector<TokenProb>{{4, 1.0f}}, used) == 4);
    CHECK(fresh.next_u64() == used.next_u64());
    CHECK_THROWS_AS(Sampler::draw(std::vector<TokenProb>{}, rng), specd::Error);
}

TEST_CASE("sample() and distribution() allocate nothing once warm", "[sampler]") {
    SamplingParams p;
    p.repeat_penalty = 1.1f;
    p.seed = 3;
    const int32_t n_vocab = 32000;
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::cos(i * 0.011) * 5.0);
    const std::vector<int32_t> history = {5, 6, 7, 8};
    Sampler sampler(p, n_vocab);
    Rng rng(p.seed);
    std::vector<TokenProb> dist;
    dist.reserve(static_cast<size_t>(n_vocab));
    SamplingParams transforms = p;
    transforms.presence_penalty = 0.5f;
    transforms.frequency_penalty = 0.5f;
    transforms.n_prompt = 1;
    transforms.logit_bias = {{5, 3.0f}, {6, -INFINITY}};
    Sampler transforming(transforms, n_vocab);
    const long before = g_allocations.load();
    for (int i = 0; i < 10; ++i) {
        sampler.sample(logits.data(), history, rng);
        sampler.distribution(logits.data(), history, dist);
        transforming.sample(logits.data(), history, rng);
        transforming.distribution(logits.data(), history, dist);
    }
    CHECK(g_allocations.load() == before);
}

// -------------------------------------------------------------- validation

TEST_CASE("validate() names the field, the value and the allowed range", "[sampler]") {
    const auto fails = [](auto change, const char* field, const char* value) {
        SamplingParams p;
        change(p);
        INFO(field);
        CHECK_THROWS_AS(p.validate(), specd::Error);
        CHECK_THROWS_WITH(p.validate(), Catch::Contains(field) && Catch::Contains(value) &&
                                            Catch::Contains("allowed"));
        CHECK_THROWS_AS(Sampler(p, 10), specd::Error);
    };
    fails([](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature", "nan");
    fails([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p", "1.5");
    fails([](SamplingParams& p) { p.top_p = -0.1f; }, "top_p", "-0.1");
    fails([](SamplingParams& p) { p.min_p = 2.0f; }, "min_p", "2");
    fails([](SamplingParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty", "0");
    fails([](SamplingParams& p) { p.repeat_penalty = -1.0f; }, "repeat_penalty", "-1");
    fails([](SamplingParams& p) { p.repeat_last_n = -2; }, "repeat_last_n", "-2");
    fails([](SamplingParams& p) { p.presence_penalty = INFINITY; }, "presence_penalty", "inf");
    fails([](SamplingParams& p) { p.frequency_penalty = std::nanf(""); }, "frequency_penalty", "nan");
    fails([](SamplingParams& p) { p.logit_bias = {{1, 101.0f}}; }, "logit_bias", "101");
    fails([](SamplingParams& p) { p.logit_bias = {{1, std::nanf("")}}; }, "logit_bias", "nan");
    fails([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias", "-1");
    fails([](SamplingParams& p) { p.logit_bias.assign(specd::kMaxLogitBias + 1, {1, 1.0f}); }, "logit_bias", "301");
    {
        SamplingParams in_range;
        in_range.logit_bias = {{9, -100.0f}, {0, 100.0f}, {5, -INFINITY}};
        in_range.validate_for(10);
        in_range.logit_bias.push_back({10, 1.0f});
        in_range.validate();  // no vocabulary: only validate_for knows it
        CHECK_THROWS_WITH(in_range.validate_for(10), Catch::Contains("logit_bias") && Catch::Contains("10") && Catch::Contains("0 to 9"));
    }

    SamplingParams ok;
    ok.temperature = -1.0f;
    ok.top_k = -5;
    ok.repeat_last_n = -1;
    ok.validate();
    CHECK_THROWS_AS(Sampler(SamplingParams{}, 0), specd::Error);
}
