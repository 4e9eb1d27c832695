// BatchVerifier: continuous batching without actors. Many SessionCores
// driven by hand against one BatchVerifier (target) and one BatchDrafter
// (draft model or n-gram), joining at different steps, must each produce
// exactly what a single plain decode of their prompt produces (greedy),
// and the same tokens as the single-sequence SpeculativeDecoder (sampling,
// fixed k). Also the verifier's refusals and what it feeds the step cost probe.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <map>
#include <memory>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/session_core.h"
#include "engine/speculative.h"
#include "support/models.h"
#include "support/session_driver.h"

using namespace specd;
using test::Driven;
using test::drive;
using test::load;

namespace {

const std::vector<std::string> kPrompts = {
    "Once upon a time", "Lily and Ben went to the park.", "The cat sat on the mat. The cat sat on the",
    "One day, a little girl named Sue found a shiny rock.", "Tom had a red ball. Tom had a red",
    "The sun was hot", "Max the dog liked to run", "Anna saw a big bird in the tree. She"};

}  // namespace

TEST_CASE("batched sessions joining at different steps each equal their single plain greedy decode", "[batch][greedy]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = target->hparams().n_ctx_train;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 24));
    ForwardPass dfwd(*draft, pool);
    PagedKvCache dkv(dfwd.kv_shape(n_ctx, 24));

    // Reference: one plain decode per prompt and length.
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    const Tokenizer& tok = target->tokenizer();

    for (int mode = 0; mode < 3; ++mode) {  // 0: draft model, 1: n-gram, 2: plain through the same path
        BatchVerifierOptions vo;
        vo.prefill_chunk_tokens = 8;  // small, so prompts are prefilled over several steps beside others' decoding
        BatchVerifier verifier(fwd, kv, vo);
        std::unique_ptr<BatchDrafter> drafter =
            mode == 0 ? std::make_unique<BatchDrafter>(&dfwd, &dkv) : std::make_unique<BatchDrafter>(nullptr, nullptr);
        std::vector<Driven> sessions;
        std::vector<GenerationResult> refs;
        for (size_t i = 0; i < 16; ++i) {
            GenerationParams gp;
            gp.max_tokens = 20 + static_cast<int32_t>(i * 7 % 40);
            gp.sampling.temperature = 0.0f;
            const auto ids = tok.encode(kPrompts[i % kPrompts.size()], true);
            refs.push_back(plain.generate(ids, gp));
            SpeculativeParams sp;
            sp.draft_max = 1 + static_cast<int32_t>(i % 8);
            sp.adaptive = (i % 3 == 0);
            Driven d;
            d.core = std::make_unique<SessionCore>(tok, ids, gp, sp, mode != 2, n_ctx);
            d.start_round = static_cast<int>(i % 5) * 3;
            sessions.push_back(std::move(d));
        }
        drive(sessions, verifier, drafter.get());
        for (size_t i = 0; i < sessions.size(); ++i) {
            INFO("mode " << mode << " session " << i << ": " << kPrompts[i % kPrompts.size()]);
            CHECK(sessions[i].core->output() == refs[i].tokens);
            CHECK(sessions[i].core->stop_reason() == refs[i].stop);
            if (mode == 2) CHECK(sessions[i].core->stats().n_drafted == 0);
        }
        CHECK(kv.used_blocks() == 0);
        CHECK(kv.active_sequences() == 0);
        CHECK(dkv.used_blocks() == 0);
        if (mode == 0) {
            SpecStats total;
            for (auto& s : sessions) total.add(s.core->stats());
            CHECK(total.acceptance_rate() > 0.8);  // the q8_0 self-draft agrees with the target almost always
        }
    }
}

// The server's path (SessionCore, BatchVerifier, BatchDrafter) with the
// logit transforms: each row's penalties count the drafted tokens before it.
TEST_CASE("batched greedy sessions with penalties and logit_bias each equal their single plain decode (q8_0, q4_0, n-gram, at k 1, 4, 8)",
          "[batch][greedy][penalties]") {
    auto target = load("stories15M-f32.gguf");
    auto draft_q8 = load("stories15M-q8_0.gguf");
    auto draft_q4 = load("stories15M-q4_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = 256;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 8));
    ForwardPass q8fwd(*draft_q8, pool), q4fwd(*draft_q4, pool);
    PagedKvCache q8kv(q8fwd.kv_shape(n_ctx, 8)), q4kv(q4fwd.kv_shape(n_ctx, 8));
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    const Tokenizer& tok = target->tokenizer();
    const int32_t dog = tok.encode(" dog", false).back();
    const int32_t the = tok.encode(" the", false).back();

    for (int mode = 0; mode < 3; ++mode) {  // 0: q8_0 draft, 1: q4_0 draft, 2: n-gram
        BatchVerifier verifier(fwd, kv);
        std::unique_ptr<BatchDrafter> drafter = mode == 0   ? std::make_unique<BatchDrafter>(&q8fwd, &q8kv)
                                                : mode == 1 ? std::make_unique<BatchDrafter>(&q4fwd, &q4kv)
                                                            : std::make_unique<BatchDrafter>(nullptr, nullptr);
        std::vector<Driven> sessions;
        std::vector<GenerationResult> refs;
        for (size_t i = 0; i < 6; ++i) {
            GenerationParams gp;
            gp.max_tokens = 40;
            gp.sampling.temperature = 0.0f;
            if (i % 2 == 0) {  // OpenAI's reading
                gp.sampling.presence_penalty = 0.6f;
                gp.sampling.frequency_penalty = 0.4f;
                gp.sampling.logit_bias = {{dog, 4.0f}, {the, -INFINITY}};
            } else {  // llama-server's
                gp.sampling.penalty_window = PenaltyWindow::LastN;
                gp.sampling.repeat_last_n = 32;
                gp.sampling.repeat_penalty = 1.15f;
                gp.sampling.presence_penalty = 0.3f;
                gp.sampling.frequency_penalty = 0.5f;
                gp.sampling.logit_bias = {{dog, 3.0f}};
            }
            const auto ids = tok.encode(kPrompts[i], true);
            refs.push_back(plain.generate(ids, gp));
            SpeculativeParams sp;
            sp.draft_max = std::array<int32_t, 3>{1, 4, 8}[i % 3];
            sp.adaptive = false;
            Driven d;
            d.core = std::make_unique<SessionCore>(tok, ids, gp, sp, true, n_ctx);
            d.start_round = static_cast<int>(i % 3) * 2;
            sessions.push_back(std::move(d));
        }
        drive(sessions, verifier, drafter.get());
        int64_t accepted = 0;
        for (size_t i = 0; i < sessions.size(); ++i) {
            INFO("mode " << mode << " session " << i << ": " << kPrompts[i]);
            CHECK(sessions[i].core->output() == refs[i].tokens);
            CHECK(sessions[i].core->stop_reason() == refs[i].stop);
            accepted += sessions[i].core->stats().n_accepted;
        }
        if (mode < 2) CHECK(accepted > 0);  // speculation really happened (penalties leave n-gram lookups little to repeat)
        CHECK(kv.used_blocks() == 0);
        CHECK(verifier.greedy_steps() == 0);  // the transforms need every row's logits
    }
}

TEST_CASE("batched sampled decoding draws the same tokens as the single-sequence speculative decoder", "[batch][sampled]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    ForwardPass dfwd(*draft, pool);
    const int32_t n_ctx = 256;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 8));
    PagedKvCache dkv(dfwd.kv_shape(n_ctx, 8));
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    DraftModelProposer proposer(*target, *draft, pool, n_ctx);
    const Tokenizer& tok = target->tokenizer();

    BatchVerifier verifier(fwd, kv);
    BatchDrafter drafter(&dfwd, &dkv);
    std::vector<Driven> sessions;
    std::vector<std::vector<int32_t>> refs;
    for (size_t i = 0; i < 6; ++i) {
        GenerationParams gp;
        gp.max_tokens = 48;
        gp.sampling.temperature = 0.9f;
        gp.sampling.seed = 1000 + i;
        gp.sampling.repeat_penalty = i % 2 ? 1.1f : 1.0f;
        if (i % 3 == 1) {  // OpenAI's penalties and a bias: the verifier's rows and the draft's apply them alike
            gp.sampling.presence_penalty = 0.5f;
            gp.sampling.frequency_penalty = 0.5f;
            gp.sampling.logit_bias = {{tok.encode(" dog", false).back(), 2.0f}};
        } else if (i % 3 == 2) {  // llama-server's window
            gp.sampling.penalty_window = PenaltyWindow::LastN;
            gp.sampling.frequency_penalty = 0.8f;
        }
        SpeculativeParams sp;
        sp.draft_max = 4;
        sp.adaptive = false;  // k must not depend on timing for the streams to line up
        const auto ids = tok.encode(kPrompts[i], true);
        SpeculativeDecoder single(fwd, single_kv, &proposer);
        refs.push_back(single.generate(ids, gp, sp).tokens);
        Driven d;
        // No load cap either: k must be the same sequence as the single decoder's.
        d.core = std::make_unique<SessionCore>(tok, ids, gp, sp, true, n_ctx, LoadPolicy{0});
        d.start_round = static_cast<int>(i);
        sessions.push_back(std::move(d));
    }
    drive(sessions, verifier, &drafter);
    for (size_t i = 0; i < sessions.size(); ++i) {
        INFO("session " << i);
        CHECK(sessions[i].core->output() == refs[i]);
    }
}

TEST_CASE("verifier refuses bad jobs with a message and keeps serving the others", "[batch]") {
    auto target = load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(64, 2));
    BatchVerifier verifier(fwd, kv);
    std::vector<VerifyOutcome> out;
    VerifyJob bad;
    bad.request = 7;
    bad.tokens = {1, 2};
    bad.n_draft = 1;
    verifier.submit(bad);  // not open
    VerifyJob huge;
    huge.request = 8;
    huge.prefill = true;
    huge.tokens = {1, 99999};
    verifier.submit(huge);  // token out of range
    VerifyJob too_long;
    too_long.request = 9;
    too_long.prefill = true;
    too_long.tokens.assign(64, 5);
    verifier.submit(too_long);
    VerifyJob good;
    good.request = 10;
    good.prefill = true;
    good.tokens = {1, 100, 200};
    good.sampling.temperature = 0.0f;
    verifier.submit(good);
    VerifyJob third;  // a third sequence: the cache has two slots
    for (uint64_t r : {11, 12}) {
        third.request = r;
        third.prefill = true;
        third.tokens = {1, 5};
        verifier.submit(third);
    }
    while (verifier.has_work()) verifier.step(out);
    std::map<uint64_t, VerifyOutcome> by_request;
    for (auto& o : out) by_request[o.request] = o;
    CHECK_THAT(by_request[7].error, Catch::Contains("not open"));
    CHECK_THAT(by_request[8].error, Catch::Contains("outside the vocabulary"));
    CHECK_THAT(by_request[9].error, Catch::Contains("context holds 64"));
    CHECK(by_request[10].ok);
    CHECK(by_request[11].ok);
    CHECK_FALSE(by_request[12].ok);
    CHECK(by_request[12].kv_full);
    verifier.close(10);
    verifier.close(11);
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("step cost probe: T(1) from single-row steps, the slope from steps of several rows", "[batch]") {
    StepCostProbe probe;
    CHECK(probe.doubling_rows() == 0);  // nothing measured
    probe.record(9, 2.3);               // no single-row step yet: the slope is unknown
    CHECK(probe.doubling_rows() == 0);
    CHECK(probe.per_row_ms() < 0.0);
    probe.record(1, 2.0);
    CHECK(probe.doubling_rows() == 0);
    probe.record(2, 2.1);               // too few rows to tell the slope
    CHECK(probe.doubling_rows() == 0);
    probe.record(9, 2.3);               // memory-bound: 9 rows cost 1.15 single-row steps
    CHECK(probe.doubling_rows() == 54); // 1 + 2.0 / 0.0375
    CHECK(probe.single_row_ms() == Approx(2.0));
    CHECK(probe.per_row_ms() == Approx(0.0375));

    StepCostProbe free_rows;
    free_rows.record(1, 1.0);
    free_rows.record(9, 0.9);  // noise: more rows measured cheaper
    CHECK(free_rows.doubling_rows() == StepCostProbe::kMaxRows);
}

TEST_CASE("verifier: its decode and verification steps, one request's or many's, and only those, feed the step cost probe", "[batch]") {
    auto target = load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(64, 3));
    BatchVerifier verifier(fwd, kv);
    StepCostProbe probe;
    verifier.set_cost_probe(&probe);
    std::vector<VerifyOutcome> out;
    VerifyJob job;
    job.request = 1;
    job.prefill = true;
    job.tokens = {1, 100, 200, 300, 400, 500};
    job.sampling.temperature = 0.0f;
    verifier.submit(job);
    verifier.step(out);
    job.prefill = false;
    job.tokens = {out.back().next};
    verifier.submit(job);
    verifier.step(out);  // one row: T(1)
    REQUIRE(out.back().ok);
    const int32_t pending = out.back().next;
    CHECK(probe.doubling_rows() == 0);  // no slope yet
    VerifyJob other = job;
    other.request = 2;
    other.prefill = true;
    other.tokens = {1, 100, 200, 300, 400, 500};
    verifier.submit(other);
    verifier.step(out);  // a 6-row prefill of one request: not a decode step
    REQUIRE(out.back().ok);
    CHECK(probe.doubling_rows() == 0);
    job.tokens = {pending, 5, 6, 7, 8};  // four drafts, most rejected: a 5-row step all the same
    job.n_draft = 4;
    verifier.submit(job);
    verifier.step(out);
    REQUIRE(out.back().ok);
    CHECK(probe.doubling_rows() > 0);
    const double slope = probe.per_row_ms();
    // Two requests' verifications in one step (5 + 5 rows) feed it too.
    job.tokens = {out.back().next, 5, 6, 7, 8};
    verifier.submit(job);
    other.prefill = false;
    other.tokens = {out[out.size() - 2].next, 9, 10, 11, 12};
    other.n_draft = 4;
    verifier.submit(other);
    out.clear();
    verifier.step(out);
    REQUIRE(out.size() == 2);
    REQUIRE(out[0].ok);
    REQUIRE(out[1].ok);
    CHECK(probe.per_row_ms() != slope);
    // A step that carries a prompt chunk does not.
    const double slope2 = probe.per_row_ms();
    VerifyJob third = other;
    third.request = 3;
    third.prefill = true;
    third.n_draft = 0;
    third.tokens = {1, 100, 200, 300};
    verifier.submit(third);
    job.tokens = {out[0].next, 5, 6, 7, 8};
    verifier.submit(job);
    out.clear();
    verifier.step(out);
    REQUIRE(out.size() == 2);
    CHECK(out[0].ok);
    CHECK(out[1].ok);
    CHECK(probe.per_row_ms() == slope2);
    verifier.close(1);
    verifier.close(2);
    verifier.close(3);
}
