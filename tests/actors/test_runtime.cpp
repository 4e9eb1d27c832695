// The actor runtime end to end in one process: real models, real actors,
// many concurrent sessions. Greedy outputs must equal single-sequence
// plain decoding; cancellation, session death and shutdown must return
// every KV block; exhaustion and bad requests must get their documented
// errors; a failed draft or verifier must not take the runtime down.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <caf/policy/work_sharing.hpp>

#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "actors/runtime.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "support/family_models.h"
#include "support/models.h"
#include "support/tiny_model.h"

using namespace specd;

namespace {

RuntimeConfig test_config(bool with_draft = true) {
    RuntimeConfig c;
    c.target_model = test::model_path("stories15M-f32.gguf");
    if (with_draft) c.draft_model = test::model_path("stories15M-q8_0.gguf");
    c.threads_target = 2;
    c.threads_draft = 1;
    c.max_sequences = 40;
    c.memory_budget_bytes = int64_t{2} << 30;
    return c;
}

// The reference: one plain greedy decode on its own.
std::vector<int32_t> plain_greedy(const std::string& prompt, int32_t max_tokens) {
    static auto model = test::load("stories15M-f32.gguf");
    static ThreadPool pool(2);
    static ForwardPass fwd(*model, pool);
    static PagedKvCache kv(fwd.kv_shape(model->hparams().n_ctx_train, 1));
    PlainDecoder plain(fwd, kv);
    GenerationParams gp;
    gp.max_tokens = max_tokens;
    gp.sampling.temperature = 0.0f;
    return plain.generate(model->tokenizer().encode(prompt, true), gp).tokens;
}

generate_request greedy_request(std::string id, std::string prompt, int32_t max_tokens) {
    generate_request r;
    r.id = std::move(id);
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    return r;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time", "Lily and Ben went to the park.", "The cat sat on the mat. The cat sat on the",
    "One day, a little girl named Sue found a shiny rock.", "Tom had a red ball. Tom had a red",
    "The sun was hot", "Max the dog liked to run", "Anna saw a big bird in the tree. She"};

void require_pool_empty(Runtime& rt) {
    // Releases travel through the compute actors first; give them a moment.
    runtime_stats s;
    for (int i = 0; i < 200; ++i) {
        s = rt.stats();
        if (s.kv_target_free == s.kv_target_blocks && s.kv_draft_free == s.kv_draft_blocks && s.running == 0 && s.waiting == 0 &&
            rt.active_sessions() == 0)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(s.kv_target_free == s.kv_target_blocks);
    CHECK(s.kv_draft_free == s.kv_draft_blocks);
    CHECK(s.running == 0);
    CHECK(s.waiting == 0);
    CHECK(rt.active_sessions() == 0);
}

}  // namespace

TEST_CASE("one request: prefill, propose, verify, emit, done — greedy output equals plain decoding", "[runtime]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    const auto expected = plain_greedy("Once upon a time", 64);
    for (int spec = 0; spec < 2; ++spec) {
        generate_request req = greedy_request("r1", "Once upon a time", 64);
        req.speculative = static_cast<int8_t>(spec);
        GenerateResult r = rt.generate(req);
        INFO(r.error.message);
        REQUIRE(r.ok);
        CHECK(r.tokens == expected);
        CHECK(r.done.id == "r1");
        CHECK(r.done.finish_reason == "length");
        CHECK(r.done.completion_tokens == 64);
        CHECK(r.done.prompt_tokens == 5);
        CHECK(r.text == rt.tokenizer().decode(expected, DecodeAt::Continuation));
        int64_t from_draft = 0;
        for (uint8_t f : r.from_draft) from_draft += f;
        CHECK(from_draft == r.done.accepted);
        if (spec) {
            CHECK(r.done.speculative);
            CHECK(r.done.drafted > 0);
            CHECK(r.done.accepted > r.done.drafted / 2);   // q8_0 self-draft
            CHECK(r.token_events < 64);                    // accepted drafts arrive several per event
        } else {
            CHECK(r.done.drafted == 0);
            CHECK(r.token_events == 64);
        }
    }
    require_pool_empty(rt);
}

TEST_CASE("a draft whose vocabulary is 128 ids shorter or 64 longer than the target's (llama.cpp's rule) drafts through "
          "the runtime, and greedy output equals plain decoding", "[runtime][draft-vocab]") {
    // Family models with stories15M's vocabulary: a 3-layer target, and its
    // first layer as the draft with the last 128 ids cut (as Qwen2.5-0.5B's
    // 151,936 rows draft for the 32B's 152,064), or 64 padding ids added
    // that the draft prefers (the draft actor must mask them).
    const gguf::File vocab = gguf::File::open(test::model_path("stories15M-f32.gguf"));
    test::FamilyModelSpec target_spec = test::family_preset("llama3");
    target_spec.layers = 3;
    const std::string target_path = test::write_family_model(test::temp_path("rt-target.gguf"), target_spec, vocab);
    struct Cleanup {
        std::vector<std::string> paths;
        ~Cleanup() {
            for (const auto& p : paths) std::filesystem::remove(p);
        }
    } cleanup{{target_path}};
    // Two ids only the target has: the shorter draft is fed its substitute there.
    const std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931, 31990, 727, 471, 263, 31900, 2217};
    std::vector<int32_t> expected;
    {
        auto model = LlamaModel::load(target_path);
        ThreadPool pool(2);
        ForwardPass fwd(*model, pool);
        PagedKvCache kv(fwd.kv_shape(model->hparams().n_ctx_train, 1));
        GenerationParams gp;
        gp.max_tokens = 40;
        gp.stop_at_eos = false;
        gp.sampling.temperature = 0.0f;
        expected = PlainDecoder(fwd, kv).generate(prompt, gp).tokens;
    }
    for (const auto& [trim, pad] : {std::pair<int64_t, int64_t>{128, 0}, {0, 64}}) {
        test::FamilyModelSpec draft_spec = target_spec;
        draft_spec.layers = 1;
        draft_spec.vocab_trim = trim;
        draft_spec.vocab_pad = pad;
        draft_spec.pad_row_scale = 3.0f;
        const std::string draft_path =
            test::write_family_model(test::temp_path("rt-draft-" + std::to_string(trim) + "-" + std::to_string(pad) + ".gguf"), draft_spec, vocab);
        cleanup.paths.push_back(draft_path);
        RuntimeConfig c = test_config();
        c.target_model = target_path;
        c.draft_model = draft_path;
        c.require_draft = true;  // a refused pair would fail here instead of serving plainly
        c.adaptive = false;
        c.draft_max = 4;
        StandaloneRuntime host(c);
        Runtime& rt = host.runtime();
        CHECK(rt.has_draft_model());
        for (int i = 0; i < 2; ++i) {
            generate_request req = greedy_request("v" + std::to_string(i), "", 40);
            req.prompt_tokens = prompt;
            req.stop_at_eos = false;
            req.speculative = 1;
            GenerateResult r = rt.generate(req);
            INFO("draft trim " << trim << " pad " << pad << ": " << r.error.message);
            REQUIRE(r.ok);
            CHECK(r.tokens == expected);
            CHECK(r.done.drafted > 0);
            CHECK(r.done.accepted > 0);
        }
        require_pool_empty(rt);
    }
}

TEST_CASE("pipelined drafting (draft t+1 while t verifies): greedy outputs equal plain decoding, alone and concurrent",
          "[runtime][pipeline]") {
    RuntimeConfig c = test_config();
    c.pipeline_drafts = "on";
    StandaloneRuntime host(c);
    Runtime& rt = host.runtime();
    // Alone, then all prompts at once; fixed k so the pipeline always runs.
    for (const std::string& p : {kPrompts[0], kPrompts[2]}) {
        generate_request req = greedy_request("p", p, 48);
        req.speculative = 1;
        req.adaptive = 0;
        req.draft_max = 4;
        GenerateResult r = rt.generate(req);
        INFO(p << ": " << r.error.message);
        REQUIRE(r.ok);
        CHECK(r.tokens == plain_greedy(p, 48));
        CHECK(r.done.drafted > 0);
        CHECK(r.done.accepted > r.done.drafted / 2);
    }
    std::vector<std::thread> threads;
    std::vector<GenerateResult> results(kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        threads.emplace_back([&, i] {
            generate_request req = greedy_request(std::to_string(i), kPrompts[i], 40);
            req.speculative = 1;
            req.adaptive = 0;
            req.draft_max = 3;
            results[i] = rt.generate(req);
        });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        INFO(kPrompts[i] << ": " << results[i].error.message);
        REQUIRE(results[i].ok);
        CHECK(results[i].tokens == plain_greedy(kPrompts[i], 40));
    }
    // Sampled requests finish (their losslessness is the acceptance rule's,
    // tested in the engine; the pipeline only uses a separate draft stream).
    generate_request sampled = greedy_request("s", kPrompts[1], 40);
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.seed = 3;
    sampled.adaptive = 0;
    GenerateResult r = rt.generate(sampled);
    REQUIRE(r.ok);
    CHECK(r.done.completion_tokens == 40);
    require_pool_empty(rt);
}

TEST_CASE("run-ahead (plain steps the verifier chains itself) changes no token: greedy and seeded sampling equal run_ahead 0",
          "[runtime][run_ahead]") {
    // The reference runtime confirms every step through the session; the
    // others let the verifier chain 3 and 16 plain steps on its own.
    std::vector<std::unique_ptr<StandaloneRuntime>> hosts;
    for (int32_t run_ahead : {0, 3, 16}) {
        RuntimeConfig c = test_config();
        c.run_ahead = run_ahead;
        hosts.push_back(std::make_unique<StandaloneRuntime>(c));
    }
    std::vector<generate_request> requests;
    for (size_t i = 0; i < 4; ++i) {
        generate_request g = greedy_request("g" + std::to_string(i), kPrompts[i], 20 + static_cast<int32_t>(i) * 11);
        g.speculative = 0;
        requests.push_back(g);
        generate_request sampled = g;
        sampled.id = "t" + std::to_string(i);
        sampled.sampling.temperature = 0.9f;
        sampled.sampling.seed = 100 + i;
        requests.push_back(sampled);
    }
    // Up to the end of the context (stories15M never samples its EOS; the
    // stop after one is the engine test's "run-ahead: a verifier feeding
    // back its own samples ...").
    generate_request to_context = greedy_request("ctx", "Once upon a time", 300);
    to_context.speculative = 0;
    to_context.sampling.temperature = 0.9f;
    to_context.sampling.seed = 7;
    requests.push_back(to_context);
    // A speculative request whose controller may pick k = 0 (fixed k 0 is plain).
    generate_request spec = greedy_request("spec", kPrompts[2], 60);
    spec.speculative = 1;
    requests.push_back(spec);

    std::map<std::string, GenerateResult> reference;
    for (size_t h = 0; h < hosts.size(); ++h) {
        Runtime& rt = hosts[h]->runtime();
        for (const generate_request& req : requests) {
            INFO("runtime " << h << ", request " << req.id);
            GenerateResult r = rt.generate(req);
            INFO(r.error.message);
            REQUIRE(r.ok);
            CHECK(static_cast<int32_t>(r.tokens.size()) == r.done.completion_tokens);
            if (req.sampling.temperature == 0.0f && req.stop_at_eos) CHECK(r.tokens == plain_greedy(req.prompt, req.max_tokens));
            if (h == 0) {
                reference[req.id] = r;
                continue;
            }
            CHECK(r.tokens == reference[req.id].tokens);
            CHECK(r.text == reference[req.id].text);
            CHECK(r.done.finish_reason == reference[req.id].done.finish_reason);
        }
        require_pool_empty(rt);
    }
    CHECK(reference["ctx"].done.finish_reason == "context");

    // Cancel and a deadline while the verifier runs ahead: the request ends
    // with exactly the tokens it streamed, and every block comes back.
    Runtime& rt = hosts.back()->runtime();
    caf::scoped_actor self{hosts.back()->system()};
    generate_request long_plain = greedy_request("c", "Once upon a time", 200);
    long_plain.speculative = 0;
    session_actor s = rt.submit(long_plain, caf::actor{self});
    size_t streamed = 0;
    done_event done;
    bool finished = false;
    while (!finished) {
        self->receive(
            [&](token_event& e) {
                streamed += e.tokens.size();
                if (streamed == 5) rt.cancel(s);
            },
            [&](done_event& e) {
                done = e;
                finished = true;
            },
            [&](error_event& e) { FAIL(e.message); }, caf::after(std::chrono::seconds(60)) >> [&] { FAIL("timed out"); });
    }
    CHECK(done.finish_reason == "cancelled");
    CHECK(static_cast<size_t>(done.completion_tokens) == streamed);
    CHECK(streamed < 200);
    long_plain.timeout_ms = 30;
    long_plain.stop_at_eos = false;
    GenerateResult late = rt.generate(long_plain);
    CHECK_FALSE(late.ok);
    CHECK(late.error.code == "timeout");
    require_pool_empty(rt);
}

TEST_CASE("32 concurrent sessions with mixed prompts, lengths and parameters all finish, and greedy ones equal single decoding",
          "[runtime][concurrency]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    std::map<std::string, std::vector<int32_t>> expected;
    caf::scoped_actor self{host.system()};
    for (int i = 0; i < 32; ++i) {
        const std::string& prompt = kPrompts[static_cast<size_t>(i) % kPrompts.size()];
        const int32_t n = 10 + (i * 13) % 70;
        generate_request req = greedy_request("s" + std::to_string(i), prompt, n);
        if (i % 4 == 3) {
            req.sampling.temperature = 0.8f;  // sampled: only has to finish
            req.sampling.seed = static_cast<uint64_t>(i);
        } else {
            expected[req.id] = plain_greedy(prompt, n);
        }
        req.speculative = static_cast<int8_t>(i % 3 != 0);
        req.draft_max = 1 + i % 8;
        rt.submit(req, caf::actor{self});
    }
    std::map<std::string, std::vector<int32_t>> got;
    std::map<std::string, done_event> done;
    while (done.size() < 32) {
        self->receive(
            [&](token_event& e) { got[e.id].insert(got[e.id].end(), e.tokens.begin(), e.tokens.end()); },
            [&](done_event& e) { done[e.id] = e; },
            [&](error_event& e) { FAIL("error " << e.id << ": " << e.code << " " << e.message); },
            caf::after(std::chrono::seconds(120)) >> [&] { FAIL("timed out waiting for sessions"); });
    }
    for (const auto& [id, tokens] : expected) {
        INFO("session " << id);
        CHECK(got[id] == tokens);
    }
    for (const auto& [id, d] : done) CHECK(static_cast<size_t>(d.completion_tokens) == got[id].size());
    require_pool_empty(rt);
}

TEST_CASE("cancel mid-stream and a killed session both free every block", "[runtime][faults]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    caf::scoped_actor self{host.system()};
    generate_request req = greedy_request("c1", "Once upon a time", 200);
    req.speculative = 0;  // one token per event, so the cancel lands mid-stream
    session_actor s = rt.submit(req, caf::actor{self});
    int events = 0;
    std::string reason;
    bool finished = false;
    while (!finished) {
        self->receive(
            [&](token_event&) {
                if (++events == 3) rt.cancel(s);
            },
            [&](done_event& e) {
                reason = e.finish_reason;
                CHECK(e.completion_tokens < 200);
                finished = true;
            },
            [&](error_event& e) { FAIL(e.message); },
            caf::after(std::chrono::seconds(60)) >> [&] { FAIL("timed out"); });
    }
    CHECK(reason == "cancelled");
    require_pool_empty(rt);

    // A session that dies without saying goodbye.
    session_actor s2 = rt.submit(greedy_request("k1", "Once upon a time", 200), caf::actor{self});
    self->receive([&](token_event&) {}, caf::after(std::chrono::seconds(60)) >> [&] { FAIL("no first token"); });
    self->send_exit(s2, caf::exit_reason::kill);
    require_pool_empty(rt);
}

TEST_CASE("KV exhaustion: requests beyond the pool wait in the queue or are refused, none deadlocks", "[runtime][faults]") {
    RuntimeConfig c = test_config(false);
    // Room for exactly two full contexts of target KV: 256 positions x 6 layers x 288 x 2 (K and V) x 2 B (f16,
    // the default kv_cache_type) = 1.7 MiB each.
    c.kv_cache_ratio = 1.0;
    c.memory_budget_bytes = 2 * 256 * 6 * 288 * 2 * 2;
    c.max_waiting = 2;
    StandaloneRuntime host(c);
    Runtime& rt = host.runtime();
    const runtime_stats initial = rt.stats();
    CHECK(initial.kv_target_blocks == 32);
    caf::scoped_actor self{host.system()};
    for (int i = 0; i < 6; ++i) {
        generate_request req = greedy_request("x" + std::to_string(i), "Once upon a time", 240);
        rt.submit(req, caf::actor{self});
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // keep the arrival order
    }
    int n_done = 0, n_refused = 0;
    while (n_done + n_refused < 6) {
        self->receive(
            [&](token_event&) {}, [&](done_event&) { ++n_done; },
            [&](error_event& e) {
                CHECK(e.code == "overloaded");
                CHECK_THAT(e.message, Catch::Contains("KV cache full"));
                ++n_refused;
            },
            caf::after(std::chrono::seconds(120)) >> [&] { FAIL("deadlock: requests neither finish nor fail"); });
    }
    CHECK(n_done == 4);     // two at once, then the two that waited
    CHECK(n_refused == 2);  // the queue held two
    // A request that can never fit is refused at once.
    generate_request too_big = greedy_request("big", "Once upon a time", 240);
    too_big.speculative = 0;
    require_pool_empty(rt);
}

TEST_CASE("KV cache types: a budget holds twice the blocks in f16 as in f32, and speculative greedy output equals "
          "plain greedy decoding on either",
          "[runtime]") {
    auto model = test::load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    for (const auto& [type_name, type, blocks] : {std::tuple{"f16", TensorType::F16, 64}, std::tuple{"f32", TensorType::F32, 32}}) {
        INFO("kv_cache_type " << type_name);
        RuntimeConfig c = test_config(false);  // the n-gram proposer
        c.kv_cache_ratio = 1.0;
        c.memory_budget_bytes = 2 * 256 * 6 * 288 * 2 * 4;  // two full contexts in f32
        c.kv_cache_type = type_name;
        StandaloneRuntime host(c);
        Runtime& rt = host.runtime();
        CHECK(rt.stats().kv_target_blocks == blocks);
        KvCacheShape shape = fwd.kv_shape(model->hparams().n_ctx_train, 1);
        shape.type = type;
        PagedKvCache kv(shape);
        for (const std::string& prompt : {kPrompts[2], kPrompts[4]}) {
            PlainDecoder plain(fwd, kv);
            GenerationParams gp;
            gp.max_tokens = 60;
            gp.sampling.temperature = 0.0f;
            const std::vector<int32_t> expected = plain.generate(model->tokenizer().encode(prompt, true), gp).tokens;
            const GenerateResult g = rt.generate(greedy_request("h", prompt, 60));
            REQUIRE(g.ok);
            INFO(prompt);
            CHECK(g.tokens == expected);
            CHECK(std::count(g.from_draft.begin(), g.from_draft.end(), uint8_t{1}) > 0);  // speculation did take part
        }
        require_pool_empty(rt);
    }
}

TEST_CASE("penalties and logit_bias through the actors: greedy output with speculation on and off equals plain decoding",
          "[runtime][penalties]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    auto model = test::load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(model->hparams().n_ctx_train, 1));
    const int32_t dog = model->tokenizer().encode(" dog", false).back();
    const int32_t the = model->tokenizer().encode(" the", false).back();
    for (int window = 0; window < 2; ++window) {
        generate_request req = greedy_request("p", "Once upon a time", 48);
        req.sampling.presence_penalty = 0.6f;
        req.sampling.frequency_penalty = 0.4f;
        req.sampling.logit_bias = {{dog, 4.0f}, {the, -INFINITY}};
        if (window) {
            req.sampling.penalty_window = PenaltyWindow::LastN;
            req.sampling.repeat_penalty = 1.15f;
            req.sampling.repeat_last_n = 32;
        }
        GenerationParams gp;
        gp.max_tokens = 48;
        gp.sampling = req.sampling;
        const auto expected = PlainDecoder(fwd, kv).generate(model->tokenizer().encode(req.prompt, true), gp).tokens;
        CHECK(expected != plain_greedy("Once upon a time", 48));  // the transforms matter
        for (int spec = 0; spec < 2; ++spec) {
            req.speculative = static_cast<int8_t>(spec);
            GenerateResult r = rt.generate(req);
            INFO("window " << window << " speculative " << spec << ": " << r.error.message);
            REQUIRE(r.ok);
            CHECK(r.tokens == expected);
            if (spec) CHECK(r.done.accepted > 0);
        }
    }
    // An id outside the vocabulary is a typed error naming logit_bias.
    generate_request bad = greedy_request("b", "Once upon a time", 8);
    bad.sampling.logit_bias = {{rt.tokenizer().n_vocab(), 1.0f}};
    GenerateResult g = rt.generate(bad);
    CHECK_FALSE(g.ok);
    CHECK(g.error.code == "invalid_request");
    CHECK_THAT(g.error.message, Catch::Contains("logit_bias"));
    require_pool_empty(rt);
}

TEST_CASE("a grammar through the actors: greedy output with speculation on and off, pipelined or not, equals plain constrained decoding",
          "[runtime][grammar]") {
    RuntimeConfig config = test_config();
    auto model = test::load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(model->hparams().n_ctx_train, 1));
    // A JSON object stories15M finishes: the grammar ends it with "stop".
    const std::string gbnf = R"(root ::= " "? "{" " "? "\"name\":" " "? "\"" [A-Z] [a-z]{1,10} "\"," " "? "\"pet\":" " "? ("\"dog\"" | "\"cat\"") " "? "}")";
    for (int pipelined = 0; pipelined < 2; ++pipelined) {
        config.pipeline_drafts = pipelined ? "on" : "off";
        StandaloneRuntime host(config);
        Runtime& rt = host.runtime();
        for (const std::string& prompt : {std::string("Once upon a time"), std::string("Lily and Ben went to the park.")}) {
            generate_request req = greedy_request("g", prompt, 64);
            req.sampling.grammar = gbnf;
            GenerationParams gp;
            gp.max_tokens = 64;
            gp.sampling = req.sampling;
            const GenerationResult expected = PlainDecoder(fwd, kv).generate(model->tokenizer().encode(prompt, true), gp);
            REQUIRE(expected.stop == StopReason::Eos);  // the grammar completed
            for (int spec = 0; spec < 2; ++spec) {
                req.speculative = static_cast<int8_t>(spec);
                GenerateResult r = rt.generate(req);
                INFO("pipelined " << pipelined << " speculative " << spec << " '" << prompt << "': " << r.error.message);
                REQUIRE(r.ok);
                CHECK(r.tokens == expected.tokens);
                CHECK(r.done.finish_reason == "stop");  // the grammar ended it
                if (spec) CHECK(r.done.accepted > 0);
            }
        }
        // A grammar that does not parse is a typed error, not a crash.
        generate_request bad = greedy_request("b", "Once upon a time", 8);
        bad.sampling.grammar = "root ::= (";
        GenerateResult g = rt.generate(bad);
        CHECK_FALSE(g.ok);
        CHECK(g.error.code == "invalid_request");
        CHECK_THAT(g.error.message, Catch::Contains("grammar"));
        require_pool_empty(rt);
    }
}

TEST_CASE("bad requests get typed error events, not exceptions", "[runtime][faults]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    auto code_of = [&](generate_request r) {
        GenerateResult g = rt.generate(r);
        CHECK_FALSE(g.ok);
        CHECK_FALSE(g.error.message.empty());
        return g.error.code;
    };
    generate_request r = greedy_request("b", "Once upon a time", 8);
    r.model = "no-such-model";
    CHECK(code_of(r) == "unknown_model");
    r = greedy_request("b", "", 8);
    CHECK(code_of(r) == "invalid_request");
    r = greedy_request("b", "Once upon a time", 0);
    CHECK(code_of(r) == "invalid_request");
    r = greedy_request("b", "Once upon a time", 8);
    r.sampling.temperature = -1.0f;
    CHECK(code_of(r) == "invalid_request");
    r = greedy_request("b", "Once upon a time", 8);
    r.sampling.top_p = 1.5f;
    CHECK(code_of(r) == "invalid_request");
    r = greedy_request("b", "", 8);
    r.prompt_tokens.assign(300, 100);
    CHECK(code_of(r) == "context_exceeded");
    r = greedy_request("b", "", 8);
    r.prompt_tokens = {1, 123456};
    CHECK(code_of(r) == "invalid_request");
    // The runtime still serves.
    CHECK(rt.generate(greedy_request("ok", "Once upon a time", 8)).ok);
    require_pool_empty(rt);
}

TEST_CASE("a dead draft actor leaves sessions decoding without speculation, and a dead verifier is restarted", "[runtime][faults]") {
    StandaloneRuntime host(test_config());
    Runtime& rt = host.runtime();
    caf::scoped_actor self{host.system()};
    const auto expected = plain_greedy("Once upon a time", 40);

    self->send_exit(rt.drafter(), caf::exit_reason::kill);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    GenerateResult r = rt.generate(greedy_request("d", "Once upon a time", 40));
    REQUIRE(r.ok);
    CHECK(r.tokens == expected);
    CHECK(r.done.drafted == 0);

    // Kill the verifier while a request waits on it: that request fails
    // with a clear error, and a fresh verifier serves the next one. The
    // kill races the request's last tokens (200 tokens of stories15M take
    // ~0.1 s): a request that finished first proves nothing, so a new one
    // tries again, at most 5 times.
    bool failed = false;
    int kills = 0;
    while (!failed && kills < 5) {
        generate_request slow = greedy_request("v" + std::to_string(kills), "Once upon a time", 200);
        rt.submit(slow, caf::actor{self});
        bool first = false;
        self->receive([&](token_event&) { first = true; }, [&](error_event&) {}, [&](done_event&) {},
                      caf::after(std::chrono::seconds(60)) >> [] {});
        REQUIRE(first);
        self->send_exit(rt.verifier(), caf::exit_reason::kill);
        ++kills;
        bool finished = false;
        while (!failed && !finished) {
            bool timed_out = false;
            self->receive([&](token_event&) {},
                          [&](error_event& e) {
                              CHECK(e.code == "internal");
                              CHECK_THAT(e.message, Catch::Contains("verifier"));
                              failed = true;
                          },
                          [&](done_event&) { finished = true; },  // it won the race
                          caf::after(std::chrono::seconds(60)) >> [&] { timed_out = true; });
            REQUIRE_FALSE(timed_out);  // neither an error nor the end after the verifier died
        }
        for (int i = 0; i < 200 && rt.verifier_restarts() < kills; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(failed);
    CHECK(rt.verifier_restarts() == kills);
    r = rt.generate(greedy_request("after", "Once upon a time", 40));
    REQUIRE(r.ok);
    CHECK(r.tokens == expected);
}

TEST_CASE("callbacks get every token in order, equal to plain decoding, even when a callback throws", "[runtime]") {
    StandaloneRuntime host(test_config());
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    int events = 0;
    bool done = false;
    std::string error;
    RuntimeCallbacks cb;
    cb.on_token = [&](const token_event& e) {
        std::lock_guard<std::mutex> lock(mu);
        tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
        if (++events == 1) throw std::runtime_error("the consumer failed on the first event");
    };
    cb.on_done = [&](const done_event&) {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
        cv.notify_all();
    };
    cb.on_error = [&](const error_event& e) {
        std::lock_guard<std::mutex> lock(mu);
        error = e.message;
        cv.notify_all();
    };
    host.runtime().submit(greedy_request("cb", "Once upon a time", 48), cb);
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done || !error.empty(); }));
    CHECK(error.empty());
    CHECK(events > 1);
    CHECK(tokens == plain_greedy("Once upon a time", 48));
}

TEST_CASE("shutdown with requests in flight returns promptly and cleanly", "[runtime]") {
    auto t0 = std::chrono::steady_clock::now();
    std::atomic<int> ended{0};
    {
        StandaloneRuntime host(test_config());
        RuntimeCallbacks cb;
        cb.on_done = [&](const done_event&) { ++ended; };
        cb.on_error = [&](const error_event&) { ++ended; };
        for (int i = 0; i < 8; ++i) host.runtime().submit(greedy_request("q" + std::to_string(i), "Once upon a time", 200), cb);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }  // ~StandaloneRuntime: cancel, stop the actors, join the system
    CHECK(ended == 8);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}

namespace {
// Counts int32 messages; tells `notify` once `expected` have arrived.
struct tally_state {
    int64_t received = 0;
};
caf::behavior tally(caf::stateful_actor<tally_state>* self, int64_t expected, caf::actor notify) {
    return {
        [=](int32_t) {
            if (++self->state.received == expected) self->send(notify, self->state.received);
        },
    };
}
// Bounces a counter with its partner until it reaches `rounds`. Once the
// other senders are done, a hop usually has to wake a sleeping worker, so a
// lost wake-up stalls the rally.
caf::behavior rally(caf::event_based_actor* self, int32_t rounds, caf::actor notify) {
    return {
        [=](int32_t n, caf::actor partner) {
            if (n >= rounds) self->send(notify, int64_t{n});
            else self->send(partner, n + 1, caf::actor_cast<caf::actor>(self));
        },
    };
}
}  // namespace

// configure_low_latency installs specd's own work-sharing scheduler (it
// wakes one worker at a time, after releasing the queue's lock): no
// message may be left in the queue with every worker asleep. Nothing
// polls here, so a lost wake-up shows as a timeout.
TEST_CASE("low-latency scheduler: messages from many foreign threads and actors all arrive, a ping-pong rally never "
          "stalls, and the system shuts down",
          "[runtime]") {
    caf::actor_system_config cfg;
    configure_low_latency(cfg);
    caf::actor_system system(cfg);
    CHECK(dynamic_cast<caf::scheduler::coordinator<caf::policy::work_sharing>*>(&system.scheduler()) == nullptr);
    CHECK(dynamic_cast<caf::scheduler::coordinator<caf::policy::work_stealing>*>(&system.scheduler()) == nullptr);
    caf::scoped_actor self{system};
    constexpr int kThreads = 4, kPerThread = 20000, kRelays = 8, kPerRelay = 2000, kRallies = 3, kRounds = 20000;
    const int64_t expected = int64_t{kThreads} * kPerThread + int64_t{kRelays} * kPerRelay;
    auto sink = system.spawn(tally, expected, caf::actor{self});
    // Actors on the scheduler's workers send too (internal enqueues).
    for (int r = 0; r < kRelays; ++r) {
        // With an argument: CAF 0.17 binds a null tuple for a spawn without
        // one (UBSan: reference binding to null pointer).
        system.spawn([](caf::event_based_actor* relay, caf::actor to) {
            for (int i = 0; i < kPerRelay; ++i) relay->send(to, int32_t{i});
        }, sink);
    }
    std::vector<std::thread> senders;
    for (int t = 0; t < kThreads; ++t) {
        senders.emplace_back([sink] {
            for (int i = 0; i < kPerThread; ++i) caf::anon_send(sink, int32_t{i});
        });
    }
    for (int r = 0; r < kRallies; ++r) {
        auto a = system.spawn(rally, kRounds, caf::actor{self});
        auto b = system.spawn(rally, kRounds, caf::actor{self});
        caf::anon_send(a, int32_t{0}, b);
    }
    for (auto& t : senders) t.join();
    int64_t tallied = -1;
    int rallies_done = 0;
    bool timed_out = false;
    for (int i = 0; i < 1 + kRallies && !timed_out; ++i) {
        self->receive(
            [&](int64_t n) {
                if (n == expected) tallied = n;
                else if (n == kRounds) ++rallies_done;
            },
            caf::after(std::chrono::seconds(60)) >> [&] { timed_out = true; });
    }
    CHECK_FALSE(timed_out);
    CHECK(tallied == expected);
    CHECK(rallies_done == kRallies);
}

TEST_CASE("a seeded request through the actors gives the same text with speculation off, k 1, k 8, adaptive, and among others, "
          "and its logprobs come for every token, drafted ones too",
          "[runtime][seed][logprobs]") {
    // A q8_0 target: its products are integer dot products, exact in any
    // row grouping, so a verification row's logits equal a plain step's and
    // the figures agree to 1e-5 (f32 sums rows in another order: ~1e-4).
    RuntimeConfig config = test_config();
    config.target_model = test::model_path("stories15M-q8_0.gguf");
    config.draft_model = test::model_path("stories15M-q4_0.gguf");
    StandaloneRuntime host(config);
    Runtime& rt = host.runtime();
    for (const float temp : {0.8f, 1.0f}) {
        generate_request req;
        req.id = "s";
        req.prompt = "Once upon a time";
        req.max_tokens = 48;
        req.stop_at_eos = false;
        req.sampling.temperature = temp;
        req.sampling.seed = 31337;
        req.sampling.coupled = true;
        req.sampling.logprobs = 3;
        req.speculative = 0;
        const GenerateResult ref = rt.generate(req);
        INFO("temperature " << temp << ": " << ref.error.message);
        REQUIRE(ref.ok);
        REQUIRE(ref.tokens.size() == 48);
        REQUIRE(ref.logprobs.size() == ref.tokens.size());
        int64_t accepted = 0;
        auto same = [&](const GenerateResult& r, const std::string& what) {
            INFO(what << ": " << r.error.message);
            REQUIRE(r.ok);
            CHECK(r.text == ref.text);
            CHECK(r.tokens == ref.tokens);
            REQUIRE(r.logprobs.size() == r.tokens.size());
            REQUIRE(r.logprobs.n_top == 3);
            for (size_t i = 0; i < r.tokens.size(); ++i) CHECK(r.logprobs.logprob[i] == Approx(ref.logprobs.logprob[i]).margin(1e-5));
            accepted += r.done.accepted;
        };
        for (const auto& [k, adaptive] : std::vector<std::pair<int32_t, int8_t>>{{1, 0}, {8, 0}, {8, 1}}) {
            generate_request s = req;
            s.speculative = 1;
            s.draft_max = k;
            s.adaptive = adaptive;
            same(rt.generate(s), "k " + std::to_string(k) + (adaptive ? " adaptive" : " fixed"));
        }
        // Batched: the seeded request among unseeded sampled ones, all at once.
        std::vector<std::thread> others;
        std::vector<GenerateResult> results(4);
        for (size_t i = 0; i < results.size(); ++i) {
            others.emplace_back([&, i] {
                generate_request o = i == 0 ? req : greedy_request("o" + std::to_string(i), kPrompts[i], 40);
                if (i == 0) o.speculative = 1;
                if (i > 0) o.sampling.temperature = 0.9f;
                results[i] = rt.generate(o);
            });
        }
        for (std::thread& t : others) t.join();
        same(results[0], "batched");
        for (size_t i = 1; i < results.size(); ++i) CHECK(results[i].logprobs.empty());  // not asked: none computed
        CHECK(accepted > 0);
    }
    require_pool_empty(rt);
}
