// SessionCore, one request's decoding state machine: the text it streams,
// the requests it refuses, and run-ahead (how many plain steps a verifier
// may run for it on its own).
#include <catch2/catch.hpp>

#include <memory>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/session_core.h"
#include "support/models.h"
#include "support/session_driver.h"

using namespace specd;
using test::Driven;
using test::drive;
using test::load;

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
