// The verifier's run-ahead chaining (engine/run_ahead.h) without a
// scheduler: outcomes fed by hand, then against a real BatchVerifier on
// stories15M, where a chain's tokens must be plain greedy decoding's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/run_ahead.h"
#include "engine/thread_pool.h"
#include "support/models.h"

using namespace specd;

namespace {

constexpr int32_t kEos = 2;  // stories15M's (the Llama 2 vocabulary's) end of sequence

VerifyOutcome outcome(uint64_t request, uint64_t tag, int32_t next, uint64_t rng_word = 0) {
    VerifyOutcome o;
    o.request = request;
    o.tag = tag;
    o.next = next;
    o.rng.s[0] = rng_word;
    return o;
}

struct Step {
    std::vector<VerifyJob> next;
    std::vector<uint8_t> continued;
    std::vector<std::string> routes;
};

Step after(RunAheadChains<std::string>& chains, const std::vector<VerifyOutcome>& outs, uint64_t& next_tag,
           const std::vector<uint64_t>& closed = {}) {
    Step st;
    chains.after_step(
        outs, [](int32_t t) { return t == kEos; },
        [&](uint64_t r) { return std::find(closed.begin(), closed.end(), r) == closed.end(); }, next_tag, st.next, st.continued,
        st.routes);
    return st;
}

}  // namespace

TEST_CASE("run-ahead: a chain feeds each sampled token, its random state and the request's sampling into the next plain step, for exactly its step count",
          "[run_ahead]") {
    RunAheadChains<std::string> chains;
    SamplingParams sampling;
    sampling.temperature = 0.7f;
    sampling.seed = 42;
    chains.begin(10, 5, "session-5", 2, true, sampling);
    uint64_t next_tag = 11;

    Step st = after(chains, {outcome(5, 10, 300, 77)}, next_tag);
    REQUIRE(st.next.size() == 1);
    CHECK(st.continued == std::vector<uint8_t>{1});
    CHECK(st.routes == std::vector<std::string>{"session-5"});
    const VerifyJob& j = st.next[0];
    CHECK(j.request == 5);
    CHECK(j.tag == 11);
    CHECK(next_tag == 12);
    CHECK(j.tokens == std::vector<int32_t>{300});
    CHECK_FALSE(j.prefill);
    CHECK(j.n_draft == 0);
    CHECK(j.sampling.temperature == 0.7f);
    CHECK(j.sampling.seed == 42);
    CHECK(j.rng.s[0] == 77);

    st = after(chains, {outcome(5, 11, 301)}, next_tag);
    CHECK(st.continued == std::vector<uint8_t>{1});
    CHECK(st.next.at(0).tag == 12);
    // Two steps were allowed: the third result still goes to the session, and ends the chain.
    st = after(chains, {outcome(5, 12, 302)}, next_tag);
    CHECK(st.next.empty());
    CHECK(st.continued == std::vector<uint8_t>{0});
    CHECK(st.routes == std::vector<std::string>{"session-5"});
    CHECK(chains.size() == 0);
}

TEST_CASE("run-ahead: a chain ends after an end-of-generation token when the request stops at EOS, and goes through it when it does not",
          "[run_ahead]") {
    RunAheadChains<std::string> chains;
    uint64_t next_tag = 100;
    chains.begin(1, 1, "stops", 8, true, SamplingParams{});
    chains.begin(2, 2, "goes-on", 8, false, SamplingParams{});
    Step st = after(chains, {outcome(1, 1, kEos), outcome(2, 2, kEos)}, next_tag);
    CHECK(st.continued == std::vector<uint8_t>{0, 1});
    CHECK(st.routes == std::vector<std::string>{"stops", "goes-on"});
    REQUIRE(st.next.size() == 1);
    CHECK(st.next[0].request == 2);
    CHECK(st.next[0].tokens == std::vector<int32_t>{kEos});
}

TEST_CASE("run-ahead: a chain ends at a failed step and at a request the verifier no longer holds, close drops a chain, and other jobs have no route",
          "[run_ahead]") {
    RunAheadChains<std::string> chains;
    uint64_t next_tag = 100;
    chains.begin(1, 1, "failed", 8, true, SamplingParams{});
    chains.begin(2, 2, "gone", 8, true, SamplingParams{});
    chains.begin(3, 3, "closed", 8, true, SamplingParams{});
    chains.begin(4, 4, "fine", 8, true, SamplingParams{});
    VerifyOutcome failed = outcome(1, 1, -1);
    failed.ok = false;
    failed.error = "no free KV blocks";
    chains.close(3);
    CHECK_FALSE(chains.chained(3));
    Step st = after(chains, {failed, outcome(2, 2, 500), outcome(3, 3, 501), outcome(4, 4, 502), outcome(9, 77, 503)}, next_tag, {2});
    CHECK(st.continued == std::vector<uint8_t>{0, 0, 0, 1, 0});
    CHECK(st.routes == std::vector<std::string>{"failed", "gone", "", "fine", ""});
    REQUIRE(st.next.size() == 1);
    CHECK(st.next[0].request == 4);
    CHECK(chains.chained(st.next[0].tag));
    std::vector<uint64_t> owed;
    chains.for_each([&](uint64_t tag, const std::string& route) {
        owed.push_back(tag);
        CHECK(route == "fine");
    });
    CHECK(owed == std::vector<uint64_t>{st.next[0].tag});
}

TEST_CASE("run-ahead over a real BatchVerifier: a prefill chained for 15 steps yields plain greedy decoding's 16 tokens, one verifier step each",
          "[run_ahead][model]") {
    auto model = test::load("stories15M-f32.gguf");
    const Tokenizer& tok = model->tokenizer();
    const std::vector<int32_t> prompt = tok.encode("Once upon a time", true);
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(256, 2));
    GenerationParams gp;
    gp.max_tokens = 16;
    gp.sampling.temperature = 0.0f;
    PagedKvCache single(fwd.kv_shape(256, 1));
    const std::vector<int32_t> want = PlainDecoder(fwd, single).generate(prompt, gp).tokens;
    REQUIRE(want.size() == 16);

    BatchVerifier verifier(fwd, kv);
    RunAheadChains<int> chains;
    uint64_t next_tag = 1;
    VerifyJob prefill;
    prefill.request = 3;
    prefill.tag = next_tag++;
    prefill.prefill = true;
    prefill.tokens = prompt;
    prefill.sampling = gp.sampling;
    chains.begin(prefill.tag, 3, 1, 15, true, gp.sampling);
    verifier.submit(std::move(prefill));

    std::vector<int32_t> got;
    int32_t steps = 0;
    while (verifier.has_work()) {
        std::vector<VerifyOutcome> outs;
        verifier.step(outs);
        ++steps;
        REQUIRE(outs.size() == 1);
        REQUIRE(outs[0].ok);
        got.push_back(outs[0].next);
        std::vector<VerifyJob> next;
        std::vector<uint8_t> continued;
        std::vector<int> routes;
        chains.after_step(
            outs, [&](int32_t t) { return tok.is_end_of_generation(t); }, [&](uint64_t r) { return verifier.is_open(r); }, next_tag,
            next, continued, routes);
        CHECK(routes == std::vector<int>{1});
        for (VerifyJob& j : next) verifier.submit(std::move(j));
    }
    CHECK(steps == 16);
    CHECK(got == want);
}
