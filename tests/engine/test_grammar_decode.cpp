// Constrained output under speculation (issue 35, item 5): the grammar
// masks each verification row (engine/grammar_decode.h), drafts are cut at
// their first forbidden token, and the answer ends where the grammar is
// complete. Greedy constrained output with a draft model or the n-gram
// proposer, alone or batched, must be token-identical to plain constrained
// decoding (PlainDecoder), and every output must stay inside its grammar
// (and parse as JSON where the grammar is JSON's).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/grammar.h"
#include "engine/grammar_decode.h"
#include "engine/session_core.h"
#include "engine/speculative.h"
#include "support/models.h"
#include "support/session_driver.h"
#include "support/sampled_pairs.h"
#include "support/tiny_model.h"

using namespace specd;
using test::Driven;
using test::drive;
using test::load;

namespace {

// Grammars a story model can finish within a few dozen tokens.
const char* kPerson = R"(
root   ::= " "? "{" ws "\"name\":" ws name "," ws "\"age\":" ws age "," ws "\"pet\":" ws pet ws "}"
name   ::= "\"" [A-Z] [a-z]{1,10} "\""
age    ::= [1-9] [0-9]?
pet    ::= "\"dog\"" | "\"cat\"" | "\"bird\"" | "null"
ws     ::= " "?
)";
const char* kSentence = R"(root ::= " Once upon a time, there was a " ("dog" | "cat" | "girl" | "boy") " named " [A-Z] [a-z]+ ".")";
const char* kList = R"(root ::= " "? "[" item ("," " "? item){0,4} "]"
item ::= "\"" [a-z ]{1,16} "\"")";

const std::vector<std::string> kPrompts = {
    "Once upon a time", "Lily and Ben went to the park.", "The cat sat on the mat. The cat sat on the",
    "One day, a little girl named Sue found a shiny rock.", "Tom had a red ball. Tom had a red", "The sun was hot"};

std::string text_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += tok.piece_view(id);
    return s;
}

// The whole output is inside the grammar, and complete when it ended on its own.
void check_inside(const Tokenizer& tok, const std::string& gbnf, const std::vector<int32_t>& out, StopReason stop) {
    GrammarMatcher m(compile_request_grammar(gbnf));
    for (int32_t id : out) {
        INFO("token " << id << " '" << tok.token_text(id) << "' after '" << text_of(tok, out) << "'");
        REQUIRE(m.accept_token(tok, id));
    }
    if (stop == StopReason::Eos) CHECK(m.can_end());
}

}  // namespace

TEST_CASE("constrained greedy decoding with speculation equals plain constrained decoding (q8_0, q4_0, n-gram, at k 1, 4, 8, batched and alone)",
          "[grammar][batch][greedy]") {
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
    const std::vector<std::string> grammars = {std::string(Grammar::json_object_text()), kPerson, kSentence, kList};
    {
        // The single-sequence speculative decoder has no grammar: it refuses one rather than ignore it.
        NgramProposer ngram(1, 4);
        SpeculativeDecoder single(fwd, single_kv, &ngram);
        GenerationParams gp;
        gp.sampling.grammar = kSentence;
        CHECK_THROWS_WITH(single.generate(tok.encode("Once upon a time", true), gp, SpeculativeParams{}), Catch::Contains("grammar"));
    }

    for (int mode = 0; mode < 4; ++mode) {  // 0: q8_0 draft, 1: q4_0 draft, 2: n-gram, 3: plain through the same path
        BatchVerifier verifier(fwd, kv);
        std::unique_ptr<BatchDrafter> drafter = mode == 0   ? std::make_unique<BatchDrafter>(&q8fwd, &q8kv)
                                                : mode == 1 ? std::make_unique<BatchDrafter>(&q4fwd, &q4kv)
                                                            : std::make_unique<BatchDrafter>(nullptr, nullptr);
        std::vector<Driven> sessions;
        std::vector<GenerationResult> refs;
        std::vector<std::string> used;
        for (size_t i = 0; i < 8; ++i) {
            GenerationParams gp;
            gp.max_tokens = 64;
            gp.sampling.temperature = 0.0f;
            gp.sampling.grammar = grammars[i % grammars.size()];
            if (i == 5) gp.sampling.repeat_penalty = 1.2f;  // the transforms run on the masked row
            const auto ids = tok.encode(kPrompts[i % kPrompts.size()], true);
            refs.push_back(plain.generate(ids, gp));
            used.push_back(gp.sampling.grammar);
            SpeculativeParams sp;
            sp.draft_max = std::array<int32_t, 3>{1, 4, 8}[i % 3];
            sp.adaptive = false;
            Driven d;
            d.core = std::make_unique<SessionCore>(tok, ids, gp, sp, mode != 3, n_ctx, LoadPolicy{0});  // no load cap: every step drafts
            d.start_round = static_cast<int>(i % 3) * 2;
            sessions.push_back(std::move(d));
        }
        drive(sessions, verifier, drafter.get());
        int64_t accepted = 0;
        for (size_t i = 0; i < sessions.size(); ++i) {
            const SessionCore& s = *sessions[i].core;
            INFO("mode " << mode << " session " << i << ": " << kPrompts[i % kPrompts.size()] << " -> '" << text_of(tok, s.output()) << "'");
            CHECK(s.output() == refs[i].tokens);
            CHECK(s.stop_reason() == refs[i].stop);
            check_inside(tok, used[i], s.output(), s.stop_reason());
            if (i % grammars.size() < 2 || i % grammars.size() == 3) {
                // JSON grammars: a complete answer parses.
                if (s.stop_reason() == StopReason::Eos) {
                    CHECK_NOTHROW(nlohmann::json::parse(text_of(tok, s.output())));
                }
            }
            accepted += s.stats().n_accepted;
        }
        if (mode < 2) CHECK(accepted > 0);  // the masked draft agrees with the masked target (most of 200+ drafted tokens)
        // Each request alone too (the same verifier and drafter, now idle).
        for (size_t i = 0; i < grammars.size(); ++i) {
            GenerationParams gp;
            gp.max_tokens = 64;
            gp.sampling.temperature = 0.0f;
            gp.sampling.grammar = used[i];
            SpeculativeParams sp;
            sp.draft_max = 4;
            sp.adaptive = true;
            std::vector<Driven> alone(1);
            alone[0].core = std::make_unique<SessionCore>(tok, tok.encode(kPrompts[i % kPrompts.size()], true), gp, sp, mode != 3, n_ctx,
                                                          LoadPolicy{0});
            drive(alone, verifier, drafter.get());
            INFO("mode " << mode << " alone " << i);
            CHECK(alone[0].core->output() == refs[i].tokens);
        }
        CHECK(verifier.greedy_steps() == 0);  // a grammar needs every row's logits
        CHECK(kv.used_blocks() == 0);
        CHECK(kv.active_sequences() == 0);
    }
}

TEST_CASE("sampled constrained decoding with a sampled draft stays inside the grammar, batched (q8_0 with its distributions, n-gram)",
          "[grammar][batch][sampled]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool), dfwd(*draft, pool);
    const int32_t n_ctx = 256;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 8)), dkv(dfwd.kv_shape(n_ctx, 8));
    const Tokenizer& tok = target->tokenizer();
    const std::vector<std::string> grammars = {kPerson, kSentence, kList};
    for (int mode = 0; mode < 2; ++mode) {
        BatchVerifier verifier(fwd, kv);
        std::unique_ptr<BatchDrafter> drafter = mode == 0 ? std::make_unique<BatchDrafter>(&dfwd, &dkv)
                                                          : std::make_unique<BatchDrafter>(nullptr, nullptr);
        std::vector<Driven> sessions;
        std::vector<std::string> used;
        for (size_t i = 0; i < 8; ++i) {
            GenerationParams gp;
            gp.max_tokens = 80;
            gp.sampling.temperature = 1.0f;
            gp.sampling.top_k = 0;  // the whole masked row: tokens the draft would rarely pick get their chance
            gp.sampling.top_p = 1.0f;
            gp.sampling.min_p = 0.0f;
            gp.sampling.seed = 77 + i;
            gp.sampling.grammar = grammars[i % grammars.size()];
            used.push_back(gp.sampling.grammar);
            SpeculativeParams sp;
            sp.draft_max = std::array<int32_t, 3>{1, 4, 8}[i % 3];
            sp.adaptive = false;
            Driven d;
            d.core = std::make_unique<SessionCore>(tok, tok.encode(kPrompts[i % kPrompts.size()], true), gp, sp, true, n_ctx,
                                                   LoadPolicy{0});
            d.start_round = static_cast<int>(i % 3);
            sessions.push_back(std::move(d));
        }
        drive(sessions, verifier, drafter.get());
        int finished = 0;
        for (size_t i = 0; i < sessions.size(); ++i) {
            const SessionCore& s = *sessions[i].core;
            INFO("mode " << mode << " session " << i << " -> '" << text_of(tok, s.output()) << "'");
            check_inside(tok, used[i], s.output(), s.stop_reason());
            if (s.stop_reason() == StopReason::Eos) {
                ++finished;
                if (i % grammars.size() != 1) CHECK_NOTHROW(nlohmann::json::parse(text_of(tok, s.output())));
            }
        }
        CHECK(finished >= 4);  // most of these short grammars complete within 80 tokens
        CHECK(kv.used_blocks() == 0);
    }
}

// Sampled constrained speculation keeps the masked target distribution:
// on tiny models (8 tokens: " a", " b", "c", "d", "e", EOS, ...), the
// joint distribution of output tokens 2 and 3 (the first step after the
// prefill verifies them on rows 0 and 1; row 1's mask depends on drafted
// token 2) by enumeration, against the pairs thousands of seeded
// generations give, by chi-square. Three drafts: the draft model proposing
// from masked rows, the same model proposing unmasked (its forbidden
// tokens reach the session, which cuts the draft after the first of them,
// keeping it for the verifier to reject by the rule), and n-gram.
TEST_CASE("sampled constrained speculation follows the masked target distribution (chi-square, tiny models)",
          "[grammar][batch][sampled][stats]") {
    const std::string target_path = test::write_tiny_model(test::temp_path("target_gr.gguf"), 21);
    const std::string draft_path = test::write_tiny_model(test::temp_path("draft_gr.gguf"), 22);
    auto target = LlamaModel::load(target_path);
    auto draft = LlamaModel::load(draft_path);
    std::filesystem::remove(target_path);
    std::filesystem::remove(draft_path);
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool), dfwd(*draft, pool);
    PagedKvCache kv(fwd.kv_shape(32, 20)), dkv(dfwd.kv_shape(32, 20));
    const Tokenizer& tok = target->tokenizer();
    const TokenTrie trie(tok);
    const std::vector<int32_t> prompt = {1, 3, 5};
    // " a" must be followed by c or d, "e" by " a"; c and d come only after " a"; at least 3 steps before the end.
    const std::string gbnf = R"(root ::= ( " a" [cd] | " b" | "e" " a" ){3,6})";
    SamplingParams sampling;
    sampling.temperature = 1.0f;
    sampling.top_k = 0;
    sampling.top_p = 1.0f;
    sampling.min_p = 0.0f;
    sampling.n_prompt = static_cast<int32_t>(prompt.size());

    // P(token 2, token 3) with and without the grammar, token 1 summed out.
    const auto enumerate = [&](bool constrained) {
        const int64_t V = fwd.n_vocab();
        Sampler sampler(sampling, fwd.n_vocab());
        std::vector<float> masked;
        std::vector<uint8_t> allowed;
        const auto dist_after = [&](const std::vector<int32_t>& context, std::vector<TokenProb>& out) {
            const int32_t seq = kv.create_sequence();
            auto logits = prefill(fwd, kv, seq, context);
            std::vector<float> row(logits.begin(), logits.end());
            kv.free_sequence(seq);
            if (constrained) {
                GrammarMatcher m(compile_request_grammar(gbnf));
                for (size_t i = prompt.size(); i < context.size(); ++i) REQUIRE(m.accept_token(tok, context[i]));
                REQUIRE(mask_rows(m, tok, trie, {}, row.data(), fwd.n_vocab(), masked, allowed));
                row = masked;
            }
            sampler.distribution(row.data(), context, out);
        };
        std::map<int64_t, double> expected;
        std::vector<TokenProb> d1, d2, d3;
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
    };
    const std::map<int64_t, double> expected = enumerate(true);
    const std::map<int64_t, double> unconstrained = enumerate(false);

    const int64_t n = 6000;
    for (int mode = 0; mode < 3; ++mode) {  // 0: masked draft model, 1: unmasked draft model, 2: n-gram
        BatchVerifier verifier(fwd, kv);
        BatchDrafter model_drafter(&dfwd, &dkv), ngram_drafter(nullptr, nullptr);
        BatchDrafter& drafter = mode < 2 ? model_drafter : ngram_drafter;
        const auto unmask = [&](std::vector<DraftJob>& jobs) {
            if (mode == 1) for (DraftJob& j : jobs) j.sampling.grammar.clear();
        };
        test::SampledPairs got;
        got.n = n;
        int64_t cut = 0;
        for (int64_t first = 0; first < n; first += 20) {  // 20 sessions batched at a time
            std::vector<Driven> sessions;
            for (int64_t i = first; i < first + 20; ++i) {
                GenerationParams gp;
                gp.max_tokens = 4;
                gp.sampling = sampling;
                gp.sampling.grammar = gbnf;
                gp.sampling.seed = 5000 + static_cast<uint64_t>(i);
                Driven d;
                d.core = std::make_unique<SessionCore>(tok, prompt, gp, test::fixed_draft(3), true, 32, LoadPolicy{0});
                sessions.push_back(std::move(d));
            }
            drive(sessions, verifier, &drafter, unmask);
            for (const Driven& d : sessions) {
                const std::vector<int32_t>& out = d.core->output();
                REQUIRE(out.size() == 4);  // the grammar cannot end before 3 steps
                check_inside(tok, gbnf, out, d.core->stop_reason());
                ++got.observed[out[1] * static_cast<int64_t>(fwd.n_vocab()) + out[2]];
                got.drafted += d.core->stats().n_drafted;
                cut += d.core->stats().n_drafted - d.core->stats().n_accepted;
            }
        }
        const std::string what = mode == 0 ? "masked draft" : mode == 1 ? "unmasked draft" : "n-gram";
        INFO(what << ": " << got.drafted << " drafted, " << cut << " rejected");
        // Cutting an unmasked sampled draft at its forbidden token instead
        // (a plain draw from the row, not the residual's) fails this: chi2 237, df 8.
        test::check_follows(got, expected, what);
        const auto [stat, df] = test::chi_square(got.observed, unconstrained, got.n);
        INFO(what << " against the unconstrained distribution: chi2 " << stat << " df " << df);
        CHECK(stat > test::chi_square_critical_001(df));  // the test has power: the grammar matters
        CHECK(kv.used_blocks() == 0);
    }
}

TEST_CASE("grammar: drafts are cut at their first forbidden token, and the matcher comes back where it was", "[grammar]") {
    auto model = load("stories15M-f32.gguf");
    const Tokenizer& tok = model->tokenizer();
    GrammarMatcher m(compile_request_grammar(kSentence));
    const std::vector<int32_t> good = tok.encode("Once upon a time, there was a dog", false);
    std::vector<int32_t> draft = good;
    const std::vector<int32_t> bad = {tok.encode("x and", false).back()};  // "▁and"
    draft.insert(draft.end(), bad.begin(), bad.end());
    draft.insert(draft.end(), good.begin(), good.end());
    CHECK(grammar_prefix(m, tok, draft) == good.size());
    CHECK(grammar_prefix(m, tok, good) == good.size());  // the same again: the walk left no trace
    CHECK(grammar_prefix(m, tok, bad) == 0);
    // mask_rows: row 0 at the start, row i after d1..di; rows after a refused token untouched.
    const TokenTrie trie(tok);
    const size_t V = static_cast<size_t>(tok.n_vocab());
    const std::vector<int32_t> drafted = {good[0], bad[0], good[1]};
    std::vector<float> rows(4 * V, 1.0f), out;
    std::vector<uint8_t> allowed;
    REQUIRE(mask_rows(m, tok, trie, drafted, rows.data(), tok.n_vocab(), out, allowed));
    GrammarMatcher fresh(compile_request_grammar(kSentence));
    for (size_t r = 0; r < 2; ++r) {
        fresh.allowed_tokens(trie, allowed);
        for (size_t id = 0; id < V; ++id) {
            INFO("row " << r << " token " << id);
            REQUIRE((out[r * V + id] == 1.0f) == static_cast<bool>(allowed[id]));
        }
        if (r == 0) REQUIRE(fresh.accept_token(tok, good[0]));
    }
    for (size_t id = 0; id < 2 * V; ++id) REQUIRE(out[2 * V + id] == 1.0f);  // after " and", which the grammar refuses
    CHECK(grammar_prefix(m, tok, good) == good.size());
}

// A benchmark, not a test (hidden: run with "[.bench]"): what a grammar
// costs per generated token on the server's path. The same requests
// (greedy, q8_0 draft, k 4) decoded through SessionCore + BatchVerifier +
// BatchDrafter with and without a grammar that their own unconstrained
// output satisfies (so both make the same tokens and the same forwards):
// the difference is the masking (rows of the verifier, rows of the draft,
// and the argmax fast path the grammar rules out). Also the cost of one
// mask_rows() per verification of k + 1 rows, alone.
TEST_CASE("grammar: masking cost per token on the server's path", "[.bench]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool), dfwd(*draft, pool);
    const int32_t n_ctx = 256;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 8)), dkv(dfwd.kv_shape(n_ctx, 8));
    const Tokenizer& tok = target->tokenizer();
    const std::vector<int32_t> prompt = tok.encode("Once upon a time", true);
    // One verifier and drafter for every run, as in a server: each builds its
    // token trie on its first constrained request (the warm-up below).
    BatchVerifier verifier(fwd, kv);
    BatchDrafter drafter(&dfwd, &dkv);
    uint64_t n_run = 0;
    auto run = [&](const std::string& grammar, std::vector<int32_t>& out, double& ms, bool full_rows = false) {
        GenerationParams gp;
        gp.max_tokens = 120;
        gp.sampling.temperature = 0.0f;
        gp.sampling.grammar = grammar;
        // A bias of 0 changes no logit but rules out the argmax fast path,
        // as a grammar does: what is left of the difference is the masking.
        if (full_rows) gp.sampling.logit_bias = {{0, 0.0f}};
        SpeculativeParams sp;
        sp.draft_max = 4;
        sp.adaptive = false;
        // (drive() keys requests by their index: a fresh verifier request per
        // run needs the previous one closed, which drive() does at the end.)
        std::vector<Driven> sessions(1);
        sessions[0].core = std::make_unique<SessionCore>(tok, prompt, gp, sp, true, n_ctx, LoadPolicy{0});
        ++n_run;
        const double t0 = now_ms();
        drive(sessions, verifier, &drafter);
        ms = now_ms() - t0;
        out = sessions[0].core->output();
    };
    std::vector<int32_t> plain_out, constrained_out;
    double plain_ms = 0, constrained_ms = 0;
    run("", plain_out, plain_ms);  // warm-up, and the text the grammar will admit
    // A grammar that admits the unconstrained story: any run of letters,
    // digits, spaces and punctuation (the mask is computed over the whole
    // vocabulary at every row all the same).
    const std::string gbnf = R"(root ::= [ -~\n]*)";
    double first_ms = 0;
    run(gbnf, constrained_out, first_ms);  // the first constrained request: the verifier and the drafter build their tries
    std::vector<double> plain, full, constrained;
    std::vector<int32_t> full_out;
    double full_ms = 0;
    for (int rep = 0; rep < 7; ++rep) {
        run("", plain_out, plain_ms);
        run("", full_out, full_ms, true);
        run(gbnf, constrained_out, constrained_ms);
        REQUIRE(constrained_out == plain_out);
        REQUIRE(full_out == plain_out);
        plain.push_back(plain_ms / static_cast<double>(plain_out.size()));
        full.push_back(full_ms / static_cast<double>(full_out.size()));
        constrained.push_back(constrained_ms / static_cast<double>(constrained_out.size()));
    }
    // One verification's masks (k = 4: 5 rows) along a JSON reply, with the matcher's caches.
    const double trie_t0 = now_ms();
    const TokenTrie trie(tok);
    const double trie_ms = now_ms() - trie_t0;  // once per verifier and per drafter (each run above built two)
    const std::vector<int32_t> reply = tok.encode(
        R"({"name": "Lily", "age": 3, "toys": ["ball", "doll", "red car"], "friends": [{"name": "Tom", "happy": true}], "note": "She likes to play in the park every day."})",
        false);
    GrammarMatcher m(Grammar::json_object());
    const size_t V = static_cast<size_t>(tok.n_vocab());
    std::vector<float> rows(5 * V, 0.0f), masked;
    std::vector<uint8_t> allowed;
    std::vector<double> per_verify;
    for (size_t i = 0; i + 4 < reply.size(); ++i) {
        const double t0 = now_ms();
        REQUIRE(mask_rows(m, tok, trie, std::span<const int32_t>(reply).subspan(i, 4), rows.data(), tok.n_vocab(), masked, allowed));
        per_verify.push_back(now_ms() - t0);
        REQUIRE(m.accept_token(tok, reply[i]));
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::printf("server path, %zu tokens, greedy, q8_0 draft k 4: median ms/token %.3f plain, %.3f full rows (no argmax path), "
                "%.3f with a grammar (+%.3f over full rows); the first constrained request %.3f ms/token (%zu runs)\n",
                plain_out.size(), median(plain), median(full), median(constrained), median(constrained) - median(full),
                first_ms / static_cast<double>(constrained_out.size()), static_cast<size_t>(n_run));
    std::printf("mask_rows over 5 rows (json_object, vocabulary %d), cached matcher: median %.3f ms per verification; "
                "the token trie: %.1f ms to build\n",
                tok.n_vocab(), median(per_verify), trie_ms);
}
