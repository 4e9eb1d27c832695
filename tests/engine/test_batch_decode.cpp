// Continuous batching without actors: many SessionCores driven by hand
// against one BatchVerifier (target) and one BatchDrafter (draft model or
// n-gram), joining at different steps, must each produce exactly what a
// single plain decode of their prompt produces (greedy), and the same
// tokens as the single-sequence SpeculativeDecoder (sampling, fixed k).
// Also the KV ledger's admission rules and the verifier's refusals.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/kv_ledger.h"
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

TEST_CASE("session core: emitted text streams as a continuation and bad requests are refused", "[batch]") {
    auto target = load("stories15M-q8_0.gguf");
    const Tokenizer& tok = target->tokenizer();
    GenerationParams gp;
    SpeculativeParams sp;
    CHECK_THROWS_WITH(SessionCore(tok, {}, gp, sp, true, 256), Catch::Contains("prompt"));
    gp.max_tokens = 0;
    CHECK_THROWS_WITH(SessionCore(tok, {1, 2}, gp, sp, true, 256), Catch::Contains("max_tokens"));
    gp.max_tokens = 8;
    gp.sampling.top_p = 2.0f;
    CHECK_THROWS_WITH(SessionCore(tok, {1, 2}, gp, sp, true, 256), Catch::Contains("top_p"));
    gp.sampling.top_p = 0.9f;
    sp.draft_max = -1;
    CHECK_THROWS_WITH(SessionCore(tok, {1, 2}, gp, sp, true, 256), Catch::Contains("draft-max"));
    sp.draft_max = 4;
    std::vector<int32_t> long_prompt(300, 100);
    CHECK_THROWS_WITH(SessionCore(tok, long_prompt, gp, sp, true, 256), Catch::Contains("256"));

    // Streamed text equals decoding the whole output at once.
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(256, 2));
    BatchVerifier verifier(fwd, kv);
    BatchDrafter drafter(nullptr, nullptr);
    std::vector<Driven> sessions(1);
    gp.max_tokens = 30;
    gp.sampling.temperature = 0.0f;
    sessions[0].core = std::make_unique<SessionCore>(tok, tok.encode("Once upon a time", true), gp, sp, true, 256);
    drive(sessions, verifier, &drafter);
    SessionCore::Emitted e;
    sessions[0].core->take_emitted(e);
    CHECK(e.tokens == sessions[0].core->output());
    CHECK(e.text == tok.decode(e.tokens, DecodeAt::Continuation));
    CHECK(e.text.rfind(", there was", 0) == 0);
    // Each token's own part of the text: the text up to token i's end is
    // the decoding of the output up to token i.
    REQUIRE(e.text_ends.size() == e.tokens.size());
    CHECK(e.text_ends.back() == e.text.size());
    for (size_t i = 0; i < e.tokens.size(); ++i) {
        const std::vector<int32_t> upto(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        CHECK(e.text.substr(0, e.text_ends[i]) == tok.decode(upto, DecodeAt::Continuation));
    }
}

TEST_CASE("run-ahead: a verifier feeding back its own samples for run_ahead_limit() steps wastes none and changes no token",
          "[batch][run_ahead]") {
    // What the verifier actor does with verify_msg::run_ahead, by hand: after
    // a job that drafts nothing it runs min(chunk, run_ahead_limit()) more
    // steps, each on the token the last one sampled, before the core sees
    // their outcomes. Every such step must still be wanted when its outcome
    // arrives (max_tokens and the context end the request exactly at the
    // last one; it stops early after an end-of-generation token), and the
    // output must equal step-by-step plain decoding.
    auto target = load("stories15M-q8_0.gguf");
    const Tokenizer& tok = target->tokenizer();
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = 48;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    BatchVerifier verifier(fwd, kv);
    const auto prompt = tok.encode("Once upon a time", true);
    uint64_t next_tag = 1;
    auto run = [&](const VerifyJob& job) {
        verifier.submit(job);
        std::vector<VerifyOutcome> outs;
        verifier.step(outs);
        REQUIRE(outs.size() == 1);
        INFO(outs[0].error);
        REQUIRE(outs[0].ok);
        return outs[0];
    };
    for (float temperature : {0.0f, 0.9f}) {
        for (int32_t max_tokens : {1, 2, 17, 200}) {  // 200: the context ends the request first
            for (int32_t chunk : {1, 5, 4096}) {
                INFO("temperature " << temperature << ", max_tokens " << max_tokens << ", chunk " << chunk);
                GenerationParams gp;
                gp.max_tokens = max_tokens;
                gp.sampling.temperature = temperature;
                gp.sampling.seed = 11;
                SpeculativeParams sp;
                SessionCore core(tok, prompt, gp, sp, false, n_ctx);
                const uint64_t request = 1;
                // Step-by-step: the same core, one job at a time.
                SessionCore stepwise(tok, prompt, gp, sp, false, n_ctx);
                stepwise.on_prefill(run(stepwise.prefill_job(request, next_tag++)));
                while (!stepwise.finished()) {
                    REQUIRE(stepwise.next_k() == 0);
                    stepwise.on_verify(run(stepwise.verify_job(request, next_tag++)));
                }
                verifier.close(request);
                if (temperature == 0.0f) CHECK(stepwise.output() == plain.generate(prompt, gp).tokens);

                bool prefilled = false;
                int32_t ran_ahead = 0;
                while (!core.finished()) {
                    if (prefilled) REQUIRE(core.next_k() == 0);
                    const VerifyJob job = prefilled ? core.verify_job(request, next_tag++) : core.prefill_job(request, next_tag++);
                    const int32_t ahead = std::min(chunk, core.run_ahead_limit());
                    CHECK(ahead >= 0);
                    // The verifier's steps, all before the core hears of any.
                    std::vector<VerifyOutcome> outcomes{run(job)};
                    for (int32_t i = 0; i < ahead && !tok.is_end_of_generation(outcomes.back().next); ++i) {
                        VerifyJob next;
                        next.request = request;
                        next.tag = next_tag++;
                        next.tokens = {outcomes.back().next};
                        next.sampling = job.sampling;
                        next.rng = outcomes.back().rng;
                        outcomes.push_back(run(next));
                    }
                    ran_ahead += static_cast<int32_t>(outcomes.size()) - 1;
                    for (const VerifyOutcome& o : outcomes) {
                        REQUIRE_FALSE(core.finished());  // no step was wasted
                        if (prefilled) {
                            core.on_verify(o);
                        } else {
                            core.on_prefill(o);
                            prefilled = true;
                        }
                    }
                }
                verifier.close(request);
                CHECK(core.output() == stepwise.output());
                CHECK(core.stop_reason() == stepwise.stop_reason());
                if (max_tokens == 200 && stepwise.stop_reason() != StopReason::Eos) CHECK(core.stop_reason() == StopReason::ContextFull);
                if (chunk > 1 && max_tokens > 2) CHECK(ran_ahead > 0);
            }
        }
    }
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("run-ahead: a speculative request runs ahead only while the load policy keeps it plain", "[batch][run_ahead]") {
    // A k = 0 step chosen by the controller (or an empty draft) must come
    // back to the session: the controller decides again and probes the
    // draft. Only the load policy's k = 0 lets the verifier run on.
    auto target = load("stories15M-q8_0.gguf");
    const Tokenizer& tok = target->tokenizer();
    const auto prompt = tok.encode("Once upon a time", true);
    GenerationParams gp;
    gp.max_tokens = 64;
    SpeculativeParams sp;
    sp.draft_max = 4;
    auto outcome = [](int32_t open_requests) {
        VerifyOutcome o;
        o.next = 42;
        o.batch_requests = 1;
        o.open_requests = open_requests;
        o.step_ms = 1.0;
        return o;
    };
    SECTION("alone: an empty draft gives a k = 0 job that does not run ahead") {
        SessionCore core(tok, prompt, gp, sp, true, 256);
        CHECK(core.run_ahead_limit() == 0);  // after the prefill job: the next step drafts
        core.on_prefill(outcome(1));
        REQUIRE(core.next_k() > 0);
        core.on_draft(DraftOutcome{});  // the proposer found nothing
        CHECK(core.verify_job(1, 2).n_draft == 0);
        CHECK(core.run_ahead_limit() == 0);
    }
    SECTION("under load: the policy's k = 0 runs ahead, within max_tokens") {
        SessionCore core(tok, prompt, gp, sp, true, 256);
        core.on_prefill(outcome(16));
        REQUIRE(core.next_k() == 0);
        CHECK(core.stats().n_load_capped == 1);
        CHECK(core.run_ahead_limit() == gp.max_tokens - 2);  // the prefill's token and this job's are out
        core.on_verify(outcome(16));
        core.on_verify(outcome(16));  // a step run ahead: counted as load-capped too
        CHECK(core.stats().n_load_capped == 2);
        core.on_verify(outcome(1));  // the load is gone: the next step drafts again
        REQUIRE(core.next_k() > 0);
        CHECK(core.run_ahead_limit() == 0);
    }
    SECTION("speculation off for the request: plain, runs ahead") {
        SessionCore core(tok, prompt, gp, sp, false, 256);
        core.on_prefill(outcome(1));
        REQUIRE(core.next_k() == 0);
        CHECK(core.run_ahead_limit() == gp.max_tokens - 2);
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

TEST_CASE("KV ledger: grants what fits, queues in order, refuses what never fits or overflows the queue", "[batch][ledger]") {
    KvPoolSpec target{10, 16, 4};
    KvPoolSpec draft{4, 16, 4};
    KvLedger ledger(target, draft, 2);
    std::string why;
    CHECK(ledger.acquire(1, {64, 64}, &why) == Admission::Granted);  // 4 + 4 blocks
    CHECK(ledger.target_free_blocks() == 6);
    CHECK(ledger.draft_free_blocks() == 0);
    CHECK(ledger.acquire(2, {32, 32}, &why) == Admission::Queued);   // the draft pool is empty
    CHECK(ledger.acquire(3, {16, 0}, &why) == Admission::Queued);    // would fit, but FIFO
    CHECK(ledger.acquire(4, {16, 0}, &why) == Admission::Refused);   // queue full
    CHECK_THAT(why, Catch::Contains("KV cache full"));
    CHECK(ledger.acquire(5, {1000, 0}, &why) == Admission::Refused);
    CHECK_THAT(why, Catch::Contains("too small"));
    std::vector<uint64_t> granted;
    ledger.release(1, granted);
    CHECK(granted == std::vector<uint64_t>{2, 3});
    granted.clear();
    ledger.release(2, granted);
    ledger.release(3, granted);
    CHECK(ledger.target_free_blocks() == 10);
    CHECK(ledger.draft_free_blocks() == 4);
    CHECK(ledger.granted() == 0);
    // A draft that could never fit is not reserved; the request runs without it.
    CHECK(ledger.acquire(6, {16, 1000}, &why) == Admission::Granted);
    CHECK(ledger.draft_free_blocks() == 4);
}

TEST_CASE("KV ledger: a refusal names the limit that was hit, sequence slots or KV blocks", "[batch][ledger]") {
    KvLedger ledger(KvPoolSpec{100, 16, 2}, KvPoolSpec{}, 1);
    std::string why;
    CHECK(ledger.acquire(1, {16, 0}, &why) == Admission::Granted);
    CHECK(ledger.acquire(2, {16, 0}, &why) == Admission::Granted);
    CHECK(ledger.acquire(3, {16, 0}, &why) == Admission::Queued);    // both slots taken, blocks plenty
    CHECK(ledger.acquire(4, {16, 0}, &why) == Admission::Refused);
    CHECK_THAT(why, Catch::Contains("too many requests") && Catch::Contains("max_sessions 2") && Catch::Contains("queue_length 1"));
    CHECK_THAT(why, !Catch::Contains("KV cache full"));
}

TEST_CASE("load policy: k shrinks as the load grows and speculation turns off once the cap is too short to pay", "[batch]") {
    LoadPolicy p;  // default budget 10
    CHECK(p.k_cap(1, 8) == 8);   // alone: never capped
    CHECK(p.k_cap(2, 8) == 4);
    CHECK(p.k_cap(3, 8) == 0);   // cap 2 < kMinUsefulDraft
    CHECK(p.k_cap(64, 8) == 0);
    p.verify_token_budget = 16;
    CHECK(p.k_cap(2, 8) == 7);
    CHECK(p.k_cap(2, 4) == 4);   // never above draft-max
    CHECK(p.k_cap(4, 8) == 3);
    CHECK(p.k_cap(5, 8) == 0);
    p.verify_token_budget = 0;
    CHECK(p.k_cap(100, 8) == 8);
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

TEST_CASE("load policy: with a measured step cost, speculation stays on at 16 requests where rows are nearly free and turns off where they are not",
          "[batch]") {
    // The inflated 1.1B q8_0 target on 2 cores (docs/BENCHMARKS.md):
    // T(1) 70 ms, ~3.6 ms per extra row; a stories15M q4_0 draft token ~1 ms.
    StepCostProbe memory_bound;
    memory_bound.record(1, 70.0);
    memory_bound.record(16, 70.0 + 15 * 3.6);
    LoadPolicy p;
    p.probe = &memory_bound;
    LoadPolicy::DraftCosts good{0.7, 1.0};
    CHECK(p.k_cap(1, 8) == 8);  // alone: never capped
    CHECK(p.k_cap(4, 8, good) >= 3);
    const int32_t k16 = p.k_cap(16, 8, good);
    CHECK(k16 >= 1);
    // The chosen k promises at least kMinGain over plain decoding at 16:
    const double t16 = 70.0 + 15 * 3.6, tk = 70.0 + (16 * (k16 + 1) - 1) * 3.6 + k16 * 1.0;
    double e = 0, term = 1;
    for (int i = 0; i <= k16; ++i, term *= 0.7) e += term;
    CHECK((16 * e / tk) / (16 / t16) >= LoadPolicy::kMinGain);
    // A poor draft is not worth its rows at that load, nor at 64.
    CHECK(p.k_cap(16, 8, {0.2, 1.0}) == 0);
    CHECK(p.k_cap(64, 8, good) <= k16);
    // Never above draft-max; no budget, no cap.
    CHECK(p.k_cap(4, 2, good) <= 2);
    p.verify_token_budget = 0;
    CHECK(p.k_cap(100, 8, {0.0, 100.0}) == 8);

    // stories15M f32 target, stories15M q8_0 draft on 2 cores: 9 rows cost
    // 2.3 single-row steps and a draft token a third of a target step; the
    // fixed budget's measurement (k = 3 for three sessions ran at 0.75x of
    // plain) says speculation must be off from three.
    StepCostProbe compute_bound;
    compute_bound.record(1, 0.84);
    compute_bound.record(9, 1.9);
    LoadPolicy q;
    q.probe = &compute_bound;
    const LoadPolicy::DraftCosts costly_draft{0.75, 0.3};
    CHECK(q.k_cap(3, 8, costly_draft) == 0);
    CHECK(q.k_cap(16, 8, costly_draft) == 0);
    // Before the request has drafted, the priors decide (a tenth-size draft, 0.8 acceptance).
    CHECK(q.k_cap(2, 8) == q.k_cap(2, 8, {LoadPolicy::kPriorAcceptance, LoadPolicy::kPriorDraftShare * 0.84}));
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

TEST_CASE("incremental draft contexts: the mirror rebuilds every context the sender had, and asks for a resend when it can't",
          "[batch][wire]") {
    std::vector<int32_t> sent;
    ContextMirror mirror;
    const std::vector<std::vector<int32_t>> contexts = {
        {1, 5, 9},              // first: sent whole (keep 0)
        {1, 5, 9, 4, 4, 7},     // accepted tokens appended
        {1, 5, 9, 4, 8},        // a rejection: two dropped, one new
        {1, 5, 9, 4, 8, 2, 3},  // and on
        {2},                    // a different history altogether
    };
    const std::vector<int32_t> expected_keep = {0, 3, 4, 5, 0};
    for (size_t i = 0; i < contexts.size(); ++i) {
        ContextUpdate u = make_context_update(sent, contexts[i]);
        CHECK(u.keep == expected_keep[i]);
        CHECK(u.tail.size() == contexts[i].size() - static_cast<size_t>(u.keep));
        const std::vector<int32_t>* rebuilt = mirror.apply(7, u.keep, u.tail);
        REQUIRE(rebuilt != nullptr);
        CHECK(*rebuilt == contexts[i]);
    }
    // A receiver that lost the request (restarted) or holds fewer tokens refuses.
    ContextMirror fresh;
    CHECK(fresh.apply(7, 3, std::vector<int32_t>{1}) == nullptr);
    CHECK(mirror.apply(7, 5, std::vector<int32_t>{1}) == nullptr);
    CHECK(mirror.size() == 0);  // the bad update dropped what was held: the next send must be whole
    CHECK(mirror.apply(7, 0, std::vector<int32_t>{4, 2}) != nullptr);
    mirror.close(7);
    CHECK(mirror.size() == 0);
}
