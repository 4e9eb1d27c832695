// Lossless speculative decoding: exact (greedy) and statistical (sampling)
// equality with plain decoding, rollback invariants, and the draft-length
// controller (the acceptance rule itself: test_verify_draft.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "engine/speculative.h"
#include "engine/forward.h"
#include "support/models.h"
#include "support/sampled_pairs.h"
#include "support/tiny_model.h"

using namespace specd;
using test::load;

// --------------------------------------------------- greedy: exact match ---

TEST_CASE("greedy speculative output is token-identical to plain decoding for every proposer and draft length",
          "[spec][greedy]") {
    const std::vector<std::string> prompts = {
        "Once upon a time", "Lily and Ben went to the park.", "The cat sat on the mat. The cat sat on the",
        "One day, a little girl named Sue found a shiny rock.", "Tom had a red ball. Tom had a red",
        "The sun was hot", "Max the dog liked to run", "Anna saw a big bird in the tree. She"};
    for (const char* target_file : {"stories15M-f32.gguf", "stories15M-q8_0.gguf"}) {
        auto target = load(target_file);
        auto draft_q4 = load("stories15M-q4_0.gguf");
        auto draft_q8 = load("stories15M-q8_0.gguf");
        ThreadPool pool(2);
        ForwardPass fwd(*target, pool);
        const int32_t n_ctx = target->hparams().n_ctx_train;
        PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
        PlainDecoder plain(fwd, kv);
        DraftModelProposer q4(*target, *draft_q4, pool, n_ctx);
        DraftModelProposer q8(*target, *draft_q8, pool, n_ctx);
        // A draft head of 64 ids (ForwardOptions::draft_head_tokens): after
        // its warm-up, drafts miss every other token, so rejections abound.
        DraftModelProposer q8_head(*target, *draft_q8, pool, n_ctx, 64);
        NgramProposer ngram(1, 4);
        GenerationParams gp;
        gp.max_tokens = 60;
        gp.sampling.temperature = 0.0f;
        {
            SpeculativeDecoder warm(fwd, kv, &q8_head);
            SpeculativeParams sp;
            sp.adaptive = false;
            for (int i = 0; i < 8; ++i) warm.generate(target->tokenizer().encode(prompts[0], true), gp, sp);  // ~1200 tokens fed
        }
        for (size_t pi = 0; pi < prompts.size(); ++pi) {
            const auto ids = target->tokenizer().encode(prompts[pi], true);
            const GenerationResult reference = plain.generate(ids, gp);
            for (Proposer* proposer : {static_cast<Proposer*>(&q4), static_cast<Proposer*>(&q8), static_cast<Proposer*>(&q8_head),
                                       static_cast<Proposer*>(&ngram)}) {
                for (int32_t k : {1, 2, 4, 8, 16}) {
                    // Keep the suite fast: q8 and its head on half the prompts each.
                    if ((proposer == &q8 && pi % 2) || (proposer == &q8_head && pi % 2 == 0)) continue;
                    SpeculativeDecoder spec(fwd, kv, proposer);
                    SpeculativeParams sp;
                    sp.draft_max = k;
                    sp.adaptive = (k == 8);  // the dynamic controller at the default length
                    const SpeculativeResult r = spec.generate(ids, gp, sp);
                    INFO(target_file << " | " << proposer->name() << " k=" << k << " | prompt: " << prompts[pi]);
                    REQUIRE(r.tokens == reference.tokens);
                    CHECK(r.stop == reference.stop);
                    CHECK(kv.used_blocks() == 0);
                }
            }
        }
    }
}

TEST_CASE("greedy: the q8_0 self-draft is accepted almost always, the q4_0 less, n-gram on repeats", "[spec][greedy]") {
    auto target = load("stories15M-f32.gguf");
    auto draft_q8 = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(256, 1));
    DraftModelProposer q8(*target, *draft_q8, pool, 256);
    SpeculativeDecoder spec(fwd, kv, &q8);
    GenerationParams gp;
    gp.max_tokens = 100;
    gp.sampling.temperature = 0.0f;
    SpeculativeParams sp;
    sp.adaptive = false;
    const auto ids = target->tokenizer().encode("Once upon a time", true);
    const SpeculativeResult r = spec.generate(ids, gp, sp);
    CHECK(r.stats.acceptance_rate() > 0.8);
    CHECK(r.stats.mean_accept_len() > 3.5);
    size_t drafted = 0;
    for (bool b : r.from_draft) drafted += b;
    CHECK(static_cast<int64_t>(drafted) == r.stats.n_accepted);
}

TEST_CASE("greedy: a draft head lacking the target's tokens costs acceptance, never a token", "[spec][greedy][draft-head]") {
    auto target = load("stories15M-f32.gguf");
    auto draft_q8 = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = target->hparams().n_ctx_train;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
    DraftModelProposer full(*target, *draft_q8, pool, n_ctx);
    DraftModelProposer headed(*target, *draft_q8, pool, n_ctx, 16);  // fewer ids than one story uses
    GenerationParams gp;
    gp.max_tokens = 80;
    gp.stop_at_eos = false;
    gp.sampling.temperature = 0.0f;
    SpeculativeParams sp;
    sp.adaptive = false;
    SpeculativeDecoder warm(fwd, kv, &headed);
    for (int i = 0; i < 12; ++i) warm.generate(target->tokenizer().encode("Lily and Ben went to the park.", true), gp, sp);

    const auto ids = target->tokenizer().encode("Once upon a time", true);
    const GenerationResult reference = PlainDecoder(fwd, kv).generate(ids, gp);
    SpeculativeDecoder with_full(fwd, kv, &full), with_head(fwd, kv, &headed);
    const SpeculativeResult a = with_full.generate(ids, gp, sp);
    const SpeculativeResult b = with_head.generate(ids, gp, sp);
    CHECK(a.tokens == reference.tokens);
    CHECK(b.tokens == reference.tokens);
    INFO("acceptance: full head " << a.stats.acceptance_rate() << ", 16-id head " << b.stats.acceptance_rate());
    CHECK(b.stats.n_accepted < b.stats.n_drafted);
    CHECK(b.stats.acceptance_rate() < a.stats.acceptance_rate() - 0.2);
    CHECK(kv.used_blocks() == 0);
}

// Penalties and logit_bias at position i depend on every token before it,
// drafted ones included: the verifier applies them per row, the draft
// proposes with them. Both APIs' readings, each with a bias that moves the
// argmax (boosting " dog", never " the").
std::vector<SamplingParams> greedy_transforms(const Tokenizer& tok) {
    const int32_t dog = tok.encode(" dog", false).back();
    const int32_t the = tok.encode(" the", false).back();
    SamplingParams openai;
    openai.temperature = 0.0f;
    openai.presence_penalty = 0.6f;
    openai.frequency_penalty = 0.4f;
    openai.logit_bias = {{dog, 4.0f}, {the, -INFINITY}};
    SamplingParams llama_server;
    llama_server.temperature = 0.0f;
    llama_server.penalty_window = PenaltyWindow::LastN;
    llama_server.repeat_last_n = 32;
    llama_server.repeat_penalty = 1.15f;
    llama_server.presence_penalty = 0.3f;
    llama_server.frequency_penalty = 0.5f;
    llama_server.logit_bias = {{dog, 3.0f}};
    return {openai, llama_server};
}

TEST_CASE("greedy speculative output with penalties and logit_bias is token-identical to plain decoding (q8_0, q4_0, n-gram, at k 1, 4, 8)",
          "[spec][greedy][penalties]") {
    const std::vector<std::string> prompts = {"Once upon a time", "The cat sat on the mat. The cat sat on the",
                                              "Tom had a red ball. Tom had a red"};
    auto target = load("stories15M-f32.gguf");
    auto draft_q4 = load("stories15M-q4_0.gguf");
    auto draft_q8 = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = target->hparams().n_ctx_train;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, kv);
    DraftModelProposer q4(*target, *draft_q4, pool, n_ctx);
    DraftModelProposer q8(*target, *draft_q8, pool, n_ctx);
    NgramProposer ngram(1, 4);
    const Tokenizer& tok = target->tokenizer();
    for (const SamplingParams& sampling : greedy_transforms(tok)) {
        GenerationParams gp;
        gp.max_tokens = 60;
        gp.sampling = sampling;
        GenerationParams untransformed;
        untransformed.max_tokens = 60;
        untransformed.sampling.temperature = 0.0f;
        int changed = 0;
        for (const std::string& prompt : prompts) {
            const auto ids = tok.encode(prompt, true);
            const GenerationResult reference = plain.generate(ids, gp);
            // The transforms matter: without them the text differs.
            changed += reference.tokens != plain.generate(ids, untransformed).tokens;
            for (Proposer* proposer : {static_cast<Proposer*>(&q4), static_cast<Proposer*>(&q8), static_cast<Proposer*>(&ngram)}) {
                for (int32_t k : {1, 4, 8}) {
                    SpeculativeDecoder spec(fwd, kv, proposer);
                    SpeculativeParams sp;
                    sp.draft_max = k;
                    sp.adaptive = false;
                    const SpeculativeResult r = spec.generate(ids, gp, sp);
                    INFO(proposer->name() << " k=" << k << " window " << static_cast<int>(sampling.penalty_window) << " | " << prompt);
                    REQUIRE(r.tokens == reference.tokens);
                    CHECK(r.stop == reference.stop);
                    if (proposer != &ngram) CHECK(r.stats.n_accepted > 0);
                    CHECK(kv.used_blocks() == 0);
                }
            }
        }
        CHECK(changed == static_cast<int>(prompts.size()));
    }
}

TEST_CASE("a logit_bias id outside the target's vocabulary is refused naming logit_bias", "[spec][penalties]") {
    auto target = load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(64, 1));
    GenerationParams gp;
    gp.max_tokens = 2;
    gp.sampling.logit_bias = {{fwd.n_vocab(), 1.0f}};
    const auto ids = target->tokenizer().encode("Once", true);
    CHECK_THROWS_WITH(PlainDecoder(fwd, kv).generate(ids, gp), Catch::Contains("logit_bias"));
    CHECK_THROWS_WITH(SpeculativeDecoder(fwd, kv, nullptr).generate(ids, gp, SpeculativeParams{}), Catch::Contains("logit_bias"));
    CHECK(kv.used_blocks() == 0);
}

// --------------------------------------------------- sampling: statistics ---

TEST_CASE("sampled speculative output follows the target distribution (chi-square, tiny models)", "[spec][stats]") {
    const std::string target_path = test::write_tiny_model(test::temp_path("target.gguf"), 11);
    const std::string draft_path = test::write_tiny_model(test::temp_path("draft.gguf"), 12);
    auto target = LlamaModel::load(target_path);
    auto draft = LlamaModel::load(draft_path);
    std::filesystem::remove(target_path);
    std::filesystem::remove(draft_path);
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(32, 2));
    const std::vector<int32_t> prompt = {1, 3, 5};

    const auto softmax = [](int32_t top_k, float top_p) {
        SamplingParams s;
        s.temperature = 1.0f;
        s.top_k = top_k;
        s.top_p = top_p;
        s.min_p = 0.0f;
        s.seed = 7;
        return s;
    };
    for (const SamplingParams& sampling : {softmax(0, 1.0f), softmax(5, 0.98f)}) {
        // Exact joint distribution of the first two generated tokens under plain
        // sampling, by enumeration with the target and the sampler's filters.
        const std::map<int64_t, double> expected = test::two_token_distribution(fwd, kv, prompt, sampling);

        DraftModelProposer proposer(*target, *draft, pool, 32);
        // A draft head of 4 of the 8 ids: its q is 0 on the others, which
        // the target still samples (after the warm-up: the first ~170 runs).
        DraftModelProposer headed(*target, *draft, pool, 32, 4);
        NgramProposer ngram(1, 2);
        const int64_t n = 12000;
        for (Proposer* p : {static_cast<Proposer*>(&proposer), static_cast<Proposer*>(&headed), static_cast<Proposer*>(&ngram)}) {
            SpeculativeDecoder spec(fwd, kv, p);
            const test::SampledPairs got = test::sample_pairs(spec, fwd.n_vocab(), prompt, sampling, n, 1000);
            test::check_follows(got, expected, p->name() + " temp " + std::to_string(sampling.temperature));
        }

        // The test has power: the draft model's own samples fail it.
        {
            ForwardPass dfwd(*draft, pool);
            PagedKvCache dkv(dfwd.kv_shape(32, 1));
            PlainDecoder draft_plain(dfwd, dkv);
            std::map<int64_t, int64_t> observed;
            for (int64_t i = 0; i < n; ++i) {
                GenerationParams gp;
                gp.max_tokens = 2;
                gp.stop_at_eos = false;
                gp.sampling = sampling;
                gp.sampling.seed = 5000 + static_cast<uint64_t>(i);
                const GenerationResult r = draft_plain.generate(prompt, gp);
                ++observed[r.tokens[0] * 8 + r.tokens[1]];
            }
            const auto [stat, df] = test::chi_square(observed, expected, n);
            CHECK(stat > test::chi_square_critical_001(df));
        }
    }
}

TEST_CASE("sampled speculative output with penalties and logit_bias follows the penalised target distribution (chi-square, tiny models)",
          "[spec][stats][penalties]") {
    const std::string target_path = test::write_tiny_model(test::temp_path("target_pen.gguf"), 11);
    const std::string draft_path = test::write_tiny_model(test::temp_path("draft_pen.gguf"), 12);
    auto target = LlamaModel::load(target_path);
    auto draft = LlamaModel::load(draft_path);
    std::filesystem::remove(target_path);
    std::filesystem::remove(draft_path);
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(32, 2));
    const std::vector<int32_t> prompt = {1, 3, 5};

    SamplingParams openai;  // the output's tokens counted: the second token's distribution depends on the first
    openai.temperature = 1.0f;
    openai.top_k = 0;
    openai.top_p = 1.0f;
    openai.min_p = 0.0f;
    openai.seed = 7;
    openai.presence_penalty = 1.5f;
    openai.frequency_penalty = 1.0f;
    openai.logit_bias = {{2, 1.5f}, {6, -INFINITY}};
    openai.n_prompt = static_cast<int32_t>(prompt.size());  // as the decoders set it
    SamplingParams llama_server = openai;  // the prompt's tokens counted too, after the repetition penalty
    llama_server.penalty_window = PenaltyWindow::LastN;
    llama_server.repeat_penalty = 1.5f;
    llama_server.presence_penalty = -0.5f;
    llama_server.logit_bias = {{3, 1.0f}};
    llama_server.top_k = 6;

    for (const SamplingParams& sampling : {openai, llama_server}) {
        // Tokens 2 and 3: the first step after the prefill verifies them on
        // rows 0 and 1, and row 1's history holds drafted token 1.
        const std::map<int64_t, double> expected = test::second_third_distribution(fwd, kv, prompt, sampling);
        SamplingParams untransformed = sampling;
        untransformed.presence_penalty = untransformed.frequency_penalty = 0.0f;
        untransformed.repeat_penalty = 1.0f;
        untransformed.logit_bias.clear();
        const std::map<int64_t, double> unpenalised = test::second_third_distribution(fwd, kv, prompt, untransformed);

        DraftModelProposer proposer(*target, *draft, pool, 32);
        DraftModelProposer headed(*target, *draft, pool, 32, 4);
        NgramProposer ngram(1, 2);
        const int64_t n = 12000;
        for (Proposer* p : {static_cast<Proposer*>(&proposer), static_cast<Proposer*>(&headed), static_cast<Proposer*>(&ngram)}) {
            SpeculativeDecoder spec(fwd, kv, p);
            const test::SampledPairs got = test::sample_pairs(spec, fwd.n_vocab(), prompt, sampling, n, 1000, 3, 1);
            const std::string what = p->name() + " window " + std::to_string(static_cast<int>(sampling.penalty_window));
            test::check_follows(got, expected, what);
            // The test has power: the same samples fail the distribution without the transforms.
            const auto [stat, df] = test::chi_square(got.observed, unpenalised, got.n);
            INFO(what << " against the untransformed distribution: chi2 " << stat << " df " << df);
            CHECK(stat > test::chi_square_critical_001(df));
        }
    }
}

// ---------------------------------------------------------------- rollback ---

TEST_CASE("rollback: after every step the target and draft caches equal a fresh prefill of the accepted tokens",
          "[spec][rollback]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q4_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(128, 1));
    DraftModelProposer proposer(*target, *draft, pool, 128);
    ForwardPass fresh_target(*target, pool), fresh_draft(*draft, pool);
    PagedKvCache fresh_kv_t(fresh_target.kv_shape(128, 1)), fresh_kv_d(fresh_draft.kv_shape(128, 1));
    const LlamaHparams& hp = target->hparams();
    int steps = 0, mismatches = 0;
    auto same_cache = [&](const PagedKvCache& a, int32_t sa, ForwardPass& f, PagedKvCache& fresh,
                          std::span<const int32_t> tokens) {
        const int32_t s = fresh.create_sequence();
        prefill(f, fresh, s, tokens);
        bool same = a.length(sa) == static_cast<int32_t>(tokens.size());
        // The batched and the fresh pass sum in different orders; an f16
        // cache may then round a value to the neighbouring f16 (2^-10 relative).
        const float rel = a.shape().type == TensorType::F16 ? 0x1p-10f : 0.0f;
        std::vector<float> ka(static_cast<size_t>(hp.kv_dim())), kf(ka.size()), va(ka.size()), vf(ka.size());
        for (int32_t l = 0; same && l < hp.n_layers; ++l) {
            for (int32_t p = 0; same && p < a.length(sa); ++p) {
                a.read_key(sa, l, p, ka.data());
                fresh.read_key(s, l, p, kf.data());
                a.read_value(sa, l, p, va.data());
                fresh.read_value(s, l, p, vf.data());
                for (size_t i = 0; i < ka.size(); ++i) {
                    if (std::fabs(ka[i] - kf[i]) > 1e-4f + rel * std::fabs(kf[i]) ||
                        std::fabs(va[i] - vf[i]) > 1e-4f + rel * std::fabs(vf[i])) {
                        same = false;
                        break;
                    }
                }
            }
        }
        fresh.free_sequence(s);
        return same;
    };
    SpeculativeDecoder spec(fwd, kv, &proposer);
    spec.set_step_observer([&](const PagedKvCache& cache, int32_t seq, std::span<const int32_t> accepted) {
        ++steps;
        // Target: everything but the pending last token.
        if (!same_cache(cache, seq, fresh_target, fresh_kv_t, accepted.first(accepted.size() - 1))) ++mismatches;
        // Draft: a prefix of the accepted tokens.
        const auto cached = accepted.first(static_cast<size_t>(proposer.cached_tokens()));
        if (!same_cache(proposer.kv(), proposer.sequence(), fresh_draft, fresh_kv_d, cached)) ++mismatches;
    });
    GenerationParams gp;
    gp.max_tokens = 50;
    gp.sampling.temperature = 0.8f;
    gp.sampling.seed = 9;
    SpeculativeParams sp;
    sp.draft_max = 6;
    sp.adaptive = false;
    const auto r = spec.generate(target->tokenizer().encode("Once upon a time", true), gp, sp);
    CHECK(steps > 5);
    CHECK(r.stats.n_accepted < r.stats.n_drafted);  // there were rejections to roll back
    CHECK(mismatches == 0);
}

// ----------------------------------------------------------- controller ---

TEST_CASE("draft length controller: drafts long with a good draft and turns speculation off with a bad one",
          "[spec][adaptive]") {
    SpeculativeParams sp;
    sp.draft_max = 8;
    DraftLengthController good(sp), bad(sp);
    for (int i = 0; i < 50; ++i) {
        const int32_t kg = good.next_k();
        good.record(kg, kg, 0.3 * kg, 2.0 + 0.05 * kg);  // everything accepted, cheap draft
        const int32_t kb = bad.next_k();
        bad.record(kb, 0, 0.5 * kb, 2.0 + 0.05 * kb);  // nothing accepted
    }
    CHECK(good.next_k() >= 6);
    int plain = 0;
    for (int i = 0; i < 32; ++i) {
        const int32_t k = bad.next_k();
        plain += k == 0;
        bad.record(k, 0, 0.5 * k, 2.0);
    }
    CHECK(plain >= 28);  // plain decoding, with an occasional probe
}

// Runs `steps` steps of the controller against a simulated draft: each
// drafted token is accepted with probability `alpha` until the first
// rejection, a draft of k costs draft_ms(k) and verifying k+1 tokens
// verify_ms(k). Returns the k chosen at each step.
namespace {
std::vector<int32_t> simulate_controller(DraftLengthController& c, uint64_t seed, int steps, double alpha,
                                         const std::function<double(int32_t)>& draft_ms,
                                         const std::function<double(int32_t)>& verify_ms) {
    Rng rng(seed);
    std::vector<int32_t> ks;
    for (int i = 0; i < steps; ++i) {
        const int32_t k = c.next_k();
        int32_t accepted = 0;
        while (accepted < k && rng.uniform() < alpha) ++accepted;
        c.record(k, accepted, k > 0 ? draft_ms(k) : 0.0, verify_ms(k));
        ks.push_back(k);
    }
    return ks;
}
}  // namespace

TEST_CASE("draft length controller: a draft whose first token carries a fixed cost is drafted long",
          "[spec][adaptive]") {
    // 3 ms per step however long the draft, then 0.3 ms per token, and a
    // verification that grows 0.1 ms per token: with alpha 0.95, k = 16
    // yields ~11.6 tokens for 12.3 ms, k = 4 ~4.5 tokens for 6.5 ms. A
    // cost proportional to k (4.2 ms / 4 tokens = 1.05 ms each) would keep k short.
    SpeculativeParams sp;
    sp.draft_max = 16;
    DraftLengthController c(sp);
    const std::vector<int32_t> ks = simulate_controller(
        c, 7, 400, 0.95, [](int32_t k) { return 3.0 + 0.3 * k; }, [](int32_t k) { return 2.5 + 0.1 * k; });
    const auto long_steps = std::count_if(ks.begin() + 300, ks.end(), [](int32_t k) { return k >= 10; });
    CHECK(long_steps >= 80);
}

TEST_CASE("draft length controller: a slow first draft (cold weights) does not turn speculation off for good",
          "[spec][adaptive]") {
    // The first draft step took 40 ms (the draft's weights paged in); every
    // later one costs 2 ms + 0.55 ms per token, a verification 2.6 ms + 0.05
    // per token, alpha 0.9: drafting 4-8 tokens is worth ~1.6x plain. The
    // controller must find its way back to drafting after that first sample.
    SpeculativeParams sp;
    sp.draft_max = 8;
    DraftLengthController c(sp);
    c.record(4, 4, 40.0, 2.8);
    const std::vector<int32_t> ks = simulate_controller(
        c, 11, 300, 0.9, [](int32_t k) { return 2.0 + 0.55 * k; }, [](int32_t k) { return 2.6 + 0.05 * k; });
    const auto drafting = std::count_if(ks.begin() + 200, ks.end(), [](int32_t k) { return k > 0; });
    CHECK(drafting >= 80);
}

TEST_CASE("speculative params: bad values are refused with the field named", "[spec]") {
    SpeculativeParams sp;
    sp.draft_max = -1;
    CHECK_THROWS_WITH(sp.validate(), Catch::Contains("draft-max"));
    sp.draft_max = 4;
    sp.draft_min = 5;
    CHECK_THROWS_WITH(sp.validate(), Catch::Contains("draft-min"));
    sp.draft_min = 0;
    sp.draft_p_min = 1.5f;
    CHECK_THROWS_WITH(sp.validate(), Catch::Contains("draft-p-min"));
    CHECK_THROWS_WITH(NgramProposer(3, 2), Catch::Contains("ngram"));
}

TEST_CASE("draft vocabulary that differs from the target's is refused before any work", "[spec]") {
    auto target = load("stories15M-f32.gguf");
    const std::string tiny = test::write_tiny_model(test::temp_path("tinyvocab.gguf"), 3);
    auto draft = LlamaModel::load(tiny);
    std::filesystem::remove(tiny);
    ThreadPool pool(1);
    CHECK_THROWS_WITH(DraftModelProposer(*target, *draft, pool, 64), Catch::Contains("vocabulary sizes differ"));
}
