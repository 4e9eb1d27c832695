// Stop sequences: the matcher over streamed text, and whole sessions under
// speculative decoding, which must end exactly where plain decoding of the
// same prompt first shows the string, with the text before it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "engine/session_core.h"
#include "engine/forward.h"
#include "engine/speculative.h"
#include "engine/stop_matcher.h"
#include "support/models.h"
#include "support/session_driver.h"

using namespace specd;
using test::Driven;
using test::drive;
using test::load;

TEST_CASE("stop matcher: text before a stop string streams at once, and only a possible start of one is held back", "[stop]") {
    StopMatcher m({"STOP", "end."});
    std::string out;
    CHECK_FALSE(m.feed("abc S", out));
    CHECK(out == "abc ");  // "S" may begin "STOP"
    CHECK_FALSE(m.feed("T", out));
    CHECK(out == "abc ");
    CHECK_FALSE(m.feed("x", out));  // "STx": no longer a start
    CHECK(out == "abc STx");
    CHECK_FALSE(m.feed(" the en", out));
    CHECK(out == "abc STx the ");
    CHECK(m.feed("d. more", out));  // completes across feeds; the rest is dropped
    CHECK(out == "abc STx the ");
    CHECK(m.stopped());
    CHECK(m.feed("later", out));
    CHECK(out == "abc STx the ");
}

TEST_CASE("stop matcher: the earliest of several strings wins, inside one feed too, and flush releases the held tail", "[stop]") {
    StopMatcher m({"lo", "hello"});
    std::string out;
    CHECK(m.feed("say hello", out));
    CHECK(out == "say ");  // "hello" starts at 4, before "lo" at 7
    StopMatcher two({"b", "abc"});
    std::string o2;
    CHECK(two.feed("xxabc", o2));
    CHECK(o2 == "xx");  // "abc" starts at 2, before "b" at 3
    StopMatcher held({"\xE6\x97\xA5\xE6\x9C\xAC"});  // a multi-byte string
    std::string o3;
    CHECK_FALSE(held.feed("x\xE6\x97\xA5", o3));
    CHECK(o3 == "x");
    held.flush(o3);
    CHECK(o3 == "x\xE6\x97\xA5");
    StopMatcher none(std::vector<std::string>{});
    std::string o4;
    CHECK_FALSE(none.active());
    CHECK_FALSE(none.feed("anything", o4));
    CHECK(o4 == "anything");
}

TEST_CASE("stop sequences under speculation: sessions end where plain decoding first shows the string, text cut before it",
          "[stop][batch][greedy]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = target->hparams().n_ctx_train;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 16));
    ForwardPass dfwd(*draft, pool);
    PagedKvCache dkv(dfwd.kv_shape(n_ctx, 16));
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    const Tokenizer& tok = target->tokenizer();

    GenerationParams gp;
    gp.max_tokens = 80;
    gp.sampling.temperature = 0.0f;
    const auto ids = tok.encode("Once upon a time", true);
    const GenerationResult ref = plain.generate(ids, gp);
    const std::string ref_text = tok.decode(ref.tokens, DecodeAt::Continuation);
    REQUIRE(ref_text.size() > 120);
    // Strings that begin mid-token, span token boundaries, or sit late.
    const std::vector<std::vector<std::string>> cases = {
        {ref_text.substr(40, 7)}, {ref_text.substr(ref_text.size() - 30, 5), "zzzz"}, {"qqq", ref_text.substr(10, 3)},
        {ref_text.substr(ref_text.size() - 1)}, {"never appears in a story"}};

    for (int mode = 0; mode < 2; ++mode) {  // 0: speculative with the q8_0 draft, 1: plain through the same path
        for (int32_t draft_max : {1, 4, 8}) {
            BatchVerifier verifier(fwd, kv, BatchVerifierOptions{});
            BatchDrafter drafter(&dfwd, &dkv);
            std::vector<Driven> sessions;
            for (const auto& stops : cases) {
                GenerationParams g = gp;
                g.stop = stops;
                SpeculativeParams sp;
                sp.draft_max = draft_max;
                sp.adaptive = false;
                Driven d;
                d.core = std::make_unique<SessionCore>(tok, ids, g, sp, mode == 0, n_ctx, LoadPolicy{0});
                sessions.push_back(std::move(d));
            }
            drive(sessions, verifier, &drafter);
            for (size_t i = 0; i < cases.size(); ++i) {
                SessionCore::Emitted e;
                sessions[i].core->take_emitted(e);
                // Each token's share of the text (token_texts) still adds up to the text.
                REQUIRE(e.text_ends.size() == e.tokens.size());
                if (!e.tokens.empty()) CHECK(e.text_ends.back() == e.text.size());
                CHECK(std::is_sorted(e.text_ends.begin(), e.text_ends.end()));
                size_t first = std::string::npos;
                for (const std::string& s : cases[i]) first = std::min(first, ref_text.find(s));
                INFO("mode " << mode << " k " << draft_max << " case " << i << " stop at " << first);
                if (first == std::string::npos) {
                    CHECK(e.text == ref_text);
                    CHECK(sessions[i].core->output() == ref.tokens);
                    CHECK(sessions[i].core->stop_reason() == ref.stop);
                    continue;
                }
                CHECK(e.text == ref_text.substr(0, first));
                CHECK(sessions[i].core->stop_reason() == StopReason::StopSequence);
                // Exactly the plain tokens up to the one that completed the string.
                const auto& out = sessions[i].core->output();
                REQUIRE(out.size() <= ref.tokens.size());
                CHECK(std::equal(out.begin(), out.end(), ref.tokens.begin()));
                const std::string shown = tok.decode(out, DecodeAt::Continuation);
                CHECK(shown.size() >= first);
                const std::string shorter = tok.decode(std::vector<int32_t>(out.begin(), out.end() - 1), DecodeAt::Continuation);
                bool completed_earlier = false;
                for (const std::string& s : cases[i]) completed_earlier |= shorter.find(s) != std::string::npos;
                CHECK_FALSE(completed_earlier);
            }
            CHECK(kv.used_blocks() == 0);
            CHECK(dkv.used_blocks() == 0);
        }
    }
}

TEST_CASE("stop sequences: too many or too long are refused with a message", "[stop]") {
    auto target = load("stories15M-f32.gguf");
    const Tokenizer& tok = target->tokenizer();
    GenerationParams gp;
    gp.stop.assign(kMaxStopSequences + 1, "x");
    CHECK_THROWS_WITH(SessionCore(tok, {1, 2}, gp, SpeculativeParams{}, false, 256), Catch::Contains("stop sequences"));
    gp.stop = {std::string(kMaxStopSequenceBytes + 1, 'x')};
    CHECK_THROWS_WITH(SessionCore(tok, {1, 2}, gp, SpeculativeParams{}, false, 256), Catch::Contains("bytes"));
}
