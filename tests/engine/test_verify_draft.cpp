// The verification core (engine/verify_draft.h): the acceptance rule on
// hand-built distributions, and one draft judged against hand-built target
// rows: exactly (greedy: all accepted gives the bonus token, the first
// mismatch the recovered one) and statistically (sampled: every output
// position follows the target's distribution, chi-square).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "engine/sampler.h"
#include "engine/verify_draft.h"
#include "support/tiny_model.h"

using namespace specd;

namespace {

std::vector<TokenProb> dist(std::initializer_list<TokenProb> l) { return l; }

}  // namespace

// ------------------------------------------------------ acceptance rule ---

TEST_CASE("acceptance rule: p equal to q accepts every drafted token", "[spec][rule]") {
    AcceptanceRule rule(8);
    Rng rng(1);
    const auto q = dist({{3, 0.5f}, {1, 0.3f}, {5, 0.2f}});
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
        const int32_t token = Sampler::draw(q, rng);
        int32_t rec = -1;
        accepted += rule.accept(q, q, token, rng, &rec);
    }
    CHECK(accepted == 3000);
}

TEST_CASE("acceptance rule: disjoint supports reject at once and recover from q", "[spec][rule]") {
    AcceptanceRule rule(8);
    Rng rng(2);
    const auto q = dist({{0, 0.75f}, {1, 0.25f}});
    const auto p = dist({{6, 0.6f}, {7, 0.4f}});
    std::map<int64_t, int64_t> counts;
    const int n = 8000;
    for (int i = 0; i < n; ++i) {
        int32_t rec = -1;
        REQUIRE_FALSE(rule.accept(q, p, i % 2 ? 6 : 7, rng, &rec));
        ++counts[rec];
    }
    const auto [stat, df] = test::chi_square(counts, {{0, 0.75}, {1, 0.25}}, n);
    CHECK(stat < test::chi_square_critical_001(df));
}

TEST_CASE("acceptance rule: the recovered token follows normalize(max(0, q - p))", "[spec][rule]") {
    AcceptanceRule rule(8);
    const auto q = dist({{0, 0.4f}, {1, 0.3f}, {2, 0.2f}, {3, 0.1f}});
    const auto p = dist({{0, 0.1f}, {1, 0.6f}, {2, 0.1f}, {3, 0.2f}});
    std::vector<TokenProb> r;
    rule.residual(q, p, 1, r);
    std::map<int32_t, float> res;
    for (const TokenProb& tp : r) res[tp.id] = tp.p;
    // max(0, q-p) = {0: .3, 2: .1}, normalised {0: .75, 2: .25}.
    REQUIRE(res.size() == 2);
    CHECK(res[0] == Approx(0.75f));
    CHECK(res[2] == Approx(0.25f));
    // And empirically, over drafts of token 1 (q/p = 0.5) and token 3 (0.5):
    Rng rng(3);
    std::map<int64_t, int64_t> counts;
    int64_t rejected = 0, tries = 0;
    for (int i = 0; i < 20000; ++i) {
        int32_t rec = -1;
        ++tries;
        if (!rule.accept(q, p, i % 2 ? 1 : 3, rng, &rec)) {
            ++rejected;
            ++counts[rec];
        }
    }
    CHECK(std::abs(static_cast<double>(rejected) / static_cast<double>(tries) - 0.5) < 0.02);
    // Rejections of token 3 recover from max(0, q-p) = {0: .3, 1: 0, 2: .1} too, the same residual.
    const auto [stat, df] = test::chi_square(counts, {{0, 0.75}, {2, 0.25}}, rejected);
    CHECK(stat < test::chi_square_critical_001(df));
}

TEST_CASE("acceptance rule: a point-mass q (greedy) accepts exactly its own token", "[spec][rule]") {
    AcceptanceRule rule(8);
    Rng rng(4);
    const auto q = dist({{5, 1.0f}});
    int32_t rec = -1;
    CHECK(rule.accept(q, {}, 5, rng, &rec));
    CHECK_FALSE(rule.accept(q, {}, 4, rng, &rec));
    CHECK(rec == 5);
}

// ------------------------------------------------------------ one draft ---

namespace {

constexpr int32_t kVocab = 8;

// Target logits whose softmax is `probs` (a row of kVocab; zeros get -inf's stand-in).
std::vector<float> logits_of(const std::vector<std::vector<double>>& probs) {
    std::vector<float> rows;  // (probs.size(), kVocab)
    for (const auto& row : probs) {
        REQUIRE(row.size() == kVocab);
        for (double p : row) rows.push_back(p > 0 ? static_cast<float>(std::log(p)) : -1e30f);
    }
    return rows;
}

// Plain softmax sampling: no top-k, top-p, min-p or penalty, so the
// distribution the sampler draws from is the row's softmax.
SamplingParams plain_sampling() {
    SamplingParams s;
    s.temperature = 1.0f;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.seed = 7;
    return s;
}

// A row as a draft's sparse distribution (ids of p > 0).
std::vector<TokenProb> sparse(const std::vector<double>& p) {
    std::vector<TokenProb> out;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] > 0) out.push_back({static_cast<int32_t>(i), static_cast<float>(p[i])});
    return out;
}

// A row as chi_square's expected probabilities (in double).
std::map<int64_t, double> as_expected(const std::vector<double>& p) {
    std::map<int64_t, double> m;
    for (const TokenProb& tp : sparse(p)) m[tp.id] = p[static_cast<size_t>(tp.id)];
    return m;
}

}  // namespace

TEST_CASE("verify_draft greedy: all accepted gives the bonus token, the first mismatch the recovered one", "[verify][greedy]") {
    DraftVerifier verifier(kVocab);
    Sampler sampler(plain_sampling(), kVocab);  // unused on the argmax path
    const std::vector<int32_t> argmax = {4, 2, 7, 5};  // (k + 1) rows
    const RngState before = Rng(3).state();
    Rng rng(before);
    struct Case {
        const char* what;
        std::vector<int32_t> draft;
        int32_t n_accepted;
        int32_t next;
    };
    for (const Case& c : {Case{"every drafted token is the argmax: the last row's argmax is the bonus", {4, 2, 7}, 3, 5},
                          Case{"the second differs: one accepted, the second row's argmax recovers", {4, 6, 7}, 1, 2},
                          Case{"the first differs: none accepted", {0, 2, 7}, 0, 4},
                          Case{"nothing drafted: the first row's argmax", {}, 0, 4}}) {
        INFO(c.what);
        std::vector<int32_t> history = {1, 3};
        const DraftVerdict v = verifier.verify(TargetRows{nullptr, argmax.data()}, DraftToVerify{c.draft, {}}, sampler, rng, history);
        CHECK(v.n_accepted == c.n_accepted);
        CHECK(v.next == c.next);
        // The history gains the accepted tokens, not the next one.
        std::vector<int32_t> want = {1, 3};
        want.insert(want.end(), c.draft.begin(), c.draft.begin() + c.n_accepted);
        CHECK(history == want);
    }
    // Greedy draws nothing: the request's random stream is as it was.
    const RngState after = rng.state();
    CHECK(std::equal(std::begin(after.s), std::end(after.s), std::begin(before.s)));
}

TEST_CASE("verify_draft greedy on logits: the same verdicts as from the argmax, without drawing", "[verify][greedy]") {
    DraftVerifier verifier(kVocab);
    SamplingParams greedy = plain_sampling();
    greedy.temperature = 0.0f;
    Sampler sampler(greedy, kVocab);
    // Rows whose argmax is 4, 2, 7, 5 (as above), with mass elsewhere too.
    const std::vector<float> rows = logits_of({{.05, .05, .05, .05, .5, .1, .1, .1},
                                                {.1, .1, .4, .1, .1, .1, .05, .05},
                                                {.05, .05, .05, .05, .05, .05, .1, .6},
                                                {.1, .05, .05, .05, .05, .6, .05, .05}});
    const std::vector<int32_t> argmax = {4, 2, 7, 5};
    for (const std::vector<int32_t>& draft : {std::vector<int32_t>{4, 2, 7}, {4, 6, 7}, {0, 2, 7}, {4, 2, 1}}) {
        std::vector<int32_t> h1 = {1}, h2 = {1};
        Rng r1(5), r2(5);
        const DraftVerdict a = verifier.verify(TargetRows{rows.data(), nullptr}, DraftToVerify{draft, {}}, sampler, r1, h1);
        const DraftVerdict b = verifier.verify(TargetRows{nullptr, argmax.data()}, DraftToVerify{draft, {}}, sampler, r2, h2);
        INFO("draft " << draft[0] << " " << draft[1] << " " << draft[2]);
        CHECK(a.n_accepted == b.n_accepted);
        CHECK(a.next == b.next);
        CHECK(h1 == h2);
        CHECK(r1.next_u64() == Rng(5).next_u64());
    }
}

TEST_CASE("verify_draft sampled: every output position follows the target's distribution (chi-square)", "[verify][stats]") {
    // Three target rows (k = 2) and a draft that differs from them: the
    // first output token must follow row 0 whatever the draft; the second,
    // where the first was an accepted draft token, row 1; the bonus row 2.
    const std::vector<std::vector<double>> q = {{.30, .05, .20, .10, .15, .05, .10, .05},
                                                {.05, .40, .05, .05, .15, .10, .10, .10},
                                                {.10, .10, .10, .30, .05, .05, .20, .10}};
    // The draft's own rows: one of the full vocabulary, and one only six ids
    // wide (a draft vocabulary narrower than the target's: zero on 6 and 7).
    const std::vector<std::vector<double>> p_full = {{.10, .30, .10, .10, .10, .10, .10, .10},
                                                     {.20, .20, .20, .05, .05, .10, .10, .10}};
    const std::vector<std::vector<double>> p_narrow = {{.40, .10, .10, .20, .10, .10, 0, 0},
                                                       {.10, .50, .10, .10, .10, .10, 0, 0}};
    const std::vector<float> rows = logits_of(q);
    Sampler sampler(plain_sampling(), kVocab);
    DraftVerifier verifier(kVocab);
    struct Case {
        const char* what;
        const std::vector<std::vector<double>>* p;  // null: point masses on fixed tokens (an n-gram draft)
    };
    for (const Case& c : {Case{"full-width draft", &p_full}, Case{"six-id draft", &p_narrow}, Case{"point-mass draft", nullptr}}) {
        Rng draft_rng(11), target_rng(12);
        const int64_t n = 20000;
        std::map<int64_t, int64_t> first, second, bonus;
        int64_t n_second = 0, n_bonus = 0;
        std::vector<std::vector<TokenProb>> probs;
        if (c.p) probs = {sparse((*c.p)[0]), sparse((*c.p)[1])};
        for (int64_t i = 0; i < n; ++i) {
            std::vector<int32_t> draft;
            if (c.p) {
                draft = {Sampler::draw(probs[0], draft_rng), Sampler::draw(probs[1], draft_rng)};
            } else {
                draft = {i % 2 ? 0 : 1, 1};  // a likely and an unlikely first token
            }
            std::vector<int32_t> history = {2};
            DraftToVerify d{draft, {}};
            if (c.p) d.probs = probs;
            const DraftVerdict v = verifier.verify(TargetRows{rows.data(), nullptr}, d, sampler, target_rng, history);
            REQUIRE(v.next >= 0);
            REQUIRE(history.size() == 1 + static_cast<size_t>(v.n_accepted));
            const int32_t out0 = v.n_accepted >= 1 ? draft[0] : v.next;
            ++first[out0];
            if (v.n_accepted >= 1) {
                ++second[v.n_accepted >= 2 ? draft[1] : v.next];
                ++n_second;
            }
            if (v.n_accepted == 2) {
                ++bonus[v.next];
                ++n_bonus;
            }
        }
        INFO(c.what << ": " << n_second << " second tokens, " << n_bonus << " bonus tokens");
        REQUIRE(n_second > 2000);
        REQUIRE(n_bonus > 500);
        for (const auto& [name, observed, expected, count] :
             {std::tuple{"first", &first, &q[0], n}, std::tuple{"second", &second, &q[1], n_second}, std::tuple{"bonus", &bonus, &q[2], n_bonus}}) {
            const auto [stat, df] = test::chi_square(*observed, as_expected(*expected), count);
            INFO(name << ": chi2 " << stat << " df " << df);
            CHECK(stat < test::chi_square_critical_001(df));
        }
        // The test has power: the first tokens do not follow the draft's row.
        if (c.p) {
            const auto [stat, df] = test::chi_square(first, as_expected((*c.p)[0]), n);
            CHECK(stat > test::chi_square_critical_001(df));
        }
    }
}

TEST_CASE("check_argmax: an id outside the vocabulary (an all-NaN row) is one line naming it", "[verify]") {
    const std::vector<int32_t> ok = {0, 7}, bad = {3, -1};
    CHECK_NOTHROW(check_argmax(ok, kVocab));
    CHECK_THROWS_WITH(check_argmax(bad, kVocab), Catch::Contains("no argmax") && Catch::Contains("got -1"));
}
