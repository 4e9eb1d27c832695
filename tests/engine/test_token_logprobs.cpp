// LogprobReader and the figures SessionCore emits: which distribution they
// are read from (the transforms and the temperature, not the filters), the
// top alternatives' order, and that a token accepted from a draft gets
// the figures plain decoding gives it (greedy and seeded, k 4 and 8).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <memory>
#include <numeric>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/session_core.h"
#include "engine/token_logprobs.h"
#include "support/models.h"
#include "support/session_driver.h"

using namespace specd;
using test::Driven;
using test::drive;
using test::load;

namespace {

// log_softmax(x / t) by the textbook formula, in long double.
std::vector<double> log_softmax(const std::vector<float>& x, double t) {
    long double top = -INFINITY;
    for (float v : x) top = std::max<long double>(top, v / t);
    long double sum = 0;
    for (float v : x) sum += std::exp(static_cast<long double>(v) / t - top);
    std::vector<double> out;
    for (float v : x) out.push_back(static_cast<double>(static_cast<long double>(v) / t - top - std::log(sum)));
    return out;
}

}  // namespace

TEST_CASE("logprobs: the transformed logits at the temperature, over the whole vocabulary, filters not applied", "[logprobs]") {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f, 0.5f, 2.5f};
    SamplingParams p;
    p.temperature = 0.5f;
    p.top_k = 2;           // would keep ids 1 and 5 only
    p.min_p = 0.5f;
    p.logit_bias = {{3, 2.0f}};
    p.logprobs = 3;
    Sampler sampler(p, 6);
    LogprobReader reader(6);
    TokenLogprobs out;
    reader.read(sampler, logits.data(), {}, 3, out);   // id 3: cut by top_k, still reported
    std::vector<float> biased = logits;
    biased[3] += 2.0f;
    const std::vector<double> want = log_softmax(biased, 0.5);
    REQUIRE(out.size() == 1);
    CHECK(out.n_top == 3);
    CHECK(out.logprob[0] == Approx(want[3]).margin(1e-5));
    // The three likeliest, best first: ids 1 (3.0), 5 (2.5), then 2 (2.0).
    REQUIRE(out.top_ids == std::vector<int32_t>{1, 5, 2});
    for (size_t j = 0; j < 3; ++j) CHECK(out.top_logprobs[j] == Approx(want[static_cast<size_t>(out.top_ids[j])]).margin(1e-5));

    // Greedy reads the model's own distribution (temperature 1); a penalty applies.
    p.temperature = 0.0f;
    p.presence_penalty = 1.5f;
    p.n_prompt = 1;
    p.logprobs = 0;
    sampler.set_params(p);
    const std::vector<int32_t> history = {0, 1};  // the prompt is {0}; id 1 was generated
    TokenLogprobs greedy;
    reader.read(sampler, logits.data(), history, 2, greedy);
    std::vector<float> penalised = biased;
    penalised[1] -= 1.5f;
    CHECK(greedy.n_top == 0);
    CHECK(greedy.top_ids.empty());
    CHECK(greedy.logprob[0] == Approx(log_softmax(penalised, 1.0)[2]).margin(1e-5));
    CHECK_THROWS_WITH(reader.read(sampler, logits.data(), history, 2, out), Catch::Contains("alternatives"));  // n_top 0 into a run of 3

    // A token logit_bias forbids reads OpenAI's floor, not -inf.
    p.logit_bias = {{4, -INFINITY}};
    p.logprobs = 3;
    sampler.set_params(p);
    TokenLogprobs floor;
    reader.read(sampler, logits.data(), {}, 4, floor);
    CHECK(floor.logprob[0] == kLogprobFloor);
    CHECK(std::isfinite(floor.top_logprobs[2]));
}

TEST_CASE("logprobs: top alternatives on stories15M are sorted, the chosen token among them when greedy, and their mass at most 1",
          "[logprobs]") {
    auto target = load("stories15M-q8_0.gguf");
    const Tokenizer& tok = target->tokenizer();
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(256, 1));
    BatchVerifier verifier(fwd, kv);
    for (const float temp : {0.0f, 1.3f}) {
        GenerationParams gp;
        gp.max_tokens = 24;
        gp.sampling.temperature = temp;
        gp.sampling.seed = 11;
        gp.sampling.logprobs = kMaxTopLogprobs;
        SpeculativeParams sp;
        std::vector<Driven> sessions(1);
        sessions[0].core = std::make_unique<SessionCore>(tok, tok.encode("Once upon a time", true), gp, sp, false, 256);
        drive(sessions, verifier, nullptr);
        SessionCore::Emitted e;
        sessions[0].core->take_emitted(e);
        INFO("temperature " << temp);
        REQUIRE(e.logprobs.size() == e.tokens.size());
        REQUIRE(e.logprobs.n_top == kMaxTopLogprobs);
        for (size_t i = 0; i < e.tokens.size(); ++i) {
            const auto top = std::span<const float>(e.logprobs.top_logprobs).subspan(i * kMaxTopLogprobs, kMaxTopLogprobs);
            const auto ids = std::span<const int32_t>(e.logprobs.top_ids).subspan(i * kMaxTopLogprobs, kMaxTopLogprobs);
            CHECK(std::is_sorted(top.begin(), top.end(), std::greater<float>()));
            double mass = 0;
            for (float lp : top) mass += std::exp(static_cast<double>(lp));
            CHECK(mass <= 1.0 + 1e-5);
            CHECK(e.logprobs.logprob[i] <= 0.0f);
            CHECK(e.logprobs.logprob[i] <= top[0] + 1e-6f);
            if (temp == 0.0f) {
                CHECK(ids[0] == e.tokens[i]);  // greedy took the likeliest
                CHECK(e.logprobs.logprob[i] == top[0]);
            }
        }
    }
    CHECK(verifier.greedy_steps() == 0);  // logprobs need the rows: no argmax-only forward
    // Greedy requests that ask for none keep the argmax-only path.
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    CHECK(BatchVerifier::argmax_suffices(greedy));
    greedy.logprobs = 0;
    CHECK_FALSE(BatchVerifier::argmax_suffices(greedy));
    greedy.logprobs = kMaxTopLogprobs + 1;
    CHECK_THROWS_WITH(greedy.validate(), Catch::Contains("logprobs"));
}

TEST_CASE("logprobs of tokens accepted from a draft equal plain decoding's (greedy, seeded, penalised, at k 4 and 8, q4_0 draft)",
          "[logprobs][batch]") {
    auto target = load("stories15M-q8_0.gguf");
    auto draft = load("stories15M-q4_0.gguf");
    const Tokenizer& tok = target->tokenizer();
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool), dfwd(*draft, pool);
    const int32_t n_ctx = 256;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 4)), dkv(dfwd.kv_shape(n_ctx, 4));
    const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park."};

    for (int kind = 0; kind < 3; ++kind) {  // 0 greedy, 1 seeded at 0.8, 2 greedy with penalties
        for (size_t pi = 0; pi < prompts.size(); ++pi) {
            GenerationParams gp;
            gp.max_tokens = 48;
            gp.sampling.logprobs = 5;
            gp.sampling.temperature = kind == 1 ? 0.8f : 0.0f;
            if (kind == 1) {
                gp.sampling.coupled = true;
                gp.sampling.seed = 99 + pi;
            }
            if (kind == 2) {
                gp.sampling.presence_penalty = 0.5f;
                gp.sampling.frequency_penalty = 0.3f;
            }
            const auto ids = tok.encode(prompts[pi], true);
            auto run = [&](int32_t k) {
                BatchVerifier verifier(fwd, kv);
                BatchDrafter drafter(&dfwd, &dkv);
                SpeculativeParams sp;
                sp.draft_max = k;
                sp.adaptive = false;
                std::vector<Driven> sessions(1);
                sessions[0].core = std::make_unique<SessionCore>(tok, ids, gp, sp, k > 0, n_ctx);
                drive(sessions, verifier, &drafter);
                SessionCore::Emitted e;
                sessions[0].core->take_emitted(e);
                return e;
            };
            const SessionCore::Emitted plain = run(0);
            REQUIRE(plain.logprobs.size() == plain.tokens.size());
            for (const int32_t k : {4, 8}) {
                INFO("kind " << kind << ", prompt " << pi << ", k " << k);
                const SessionCore::Emitted spec = run(k);
                REQUIRE(spec.tokens == plain.tokens);
                REQUIRE(spec.logprobs.size() == spec.tokens.size());
                REQUIRE(spec.logprobs.top_ids.size() == plain.logprobs.top_ids.size());
                int drafted = 0;
                for (size_t i = 0; i < spec.tokens.size(); ++i) {
                    drafted += spec.from_draft[i];
                    CHECK(spec.logprobs.logprob[i] == Approx(plain.logprobs.logprob[i]).margin(1e-5));
                }
                const std::vector<float>& top = plain.logprobs.top_logprobs;
                for (size_t j = 0; j < top.size(); ++j) {
                    CHECK(spec.logprobs.top_logprobs[j] == Approx(top[j]).margin(1e-5));
                    // The ids rank alike, but for near-ties (which rounding between batch shapes may swap).
                    const size_t r = j % 5;
                    const bool near_tie = (r > 0 && top[j - 1] - top[j] < 1e-4f) || (r < 4 && top[j] - top[j + 1] < 1e-4f);
                    if (!near_tie) CHECK(spec.logprobs.top_ids[j] == plain.logprobs.top_ids[j]);
                }
                CHECK(drafted > 0);  // some tokens came from the draft: their figures were read from verification rows
            }
        }
    }
}

// What reading the figures costs per emitted token (hidden; docs/BENCHMARKS.md):
// one stories15M logit row, 32000 ids, read 2000 times.
TEST_CASE("logprobs: cost per token of LogprobReader on a stories15M row", "[.cost]") {
    auto target = load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(64, 1));
    const int32_t seq = kv.create_sequence();
    const std::vector<int32_t> prompt = target->tokenizer().encode("Once upon a time", true);
    REQUIRE(kv.reserve(seq, static_cast<int32_t>(prompt.size())));
    const BatchItem item{seq, prompt, false};
    const std::span<const float> row = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
    const std::vector<float> logits(row.begin(), row.end());
    LogprobReader reader(fwd.n_vocab());
    for (const int32_t n_top : {0, 5, 20}) {
        SamplingParams p;
        p.logprobs = n_top;
        Sampler sampler(p, fwd.n_vocab());
        TokenLogprobs out;
        const int reps = 2000;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) {
            if (out.size() > 64) out.clear();
            reader.read(sampler, logits.data(), prompt, 100, out);
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
        std::printf("top_logprobs %2d: %.4f ms per token\n", n_top, ms);
        CHECK(ms > 0.0);
    }
}
