// The fast batched forward pass against itself (batched vs one token at a
// time, mixed batches, rollback) and against the scalar reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/reference_forward.h"
#include "support/models.h"

using namespace specd;
using test::load;

namespace {

float max_abs_diff(const float* a, const float* b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

float max_abs(const float* a, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
    return m;
}

int32_t argmax(const float* a, size_t n) { return static_cast<int32_t>(std::max_element(a, a + n) - a); }

std::vector<float> forward_one(ForwardPass& fwd, PagedKvCache& kv, int32_t seq, std::span<const int32_t> tokens,
                               bool all) {
    BatchItem item;
    item.seq = seq;
    item.tokens = tokens;
    item.all_logits = all;
    auto logits = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
    return {logits.begin(), logits.end()};
}

// The exact-math tests below keep K and V in f32: an f16 cache (the
// default) rounds each stored element, and a last-bit difference between two
// summation orders can then round one element to the neighbouring half (and,
// with q8_0 weights, tip the activations' q8_0 roundings after it).
KvCacheShape f32_cache(KvCacheShape shape) {
    shape.type = TensorType::F32;
    return shape;
}

const std::vector<int32_t> kTokens = {1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354};

}  // namespace

TEST_CASE("forward f32: a batch of T tokens gives the same logits as T single-token steps", "[forward]") {
    auto model = load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(f32_cache(fwd.kv_shape(model->hparams().n_ctx_train, 2)));
    const size_t V = static_cast<size_t>(fwd.n_vocab());
    const int32_t batched = kv.create_sequence(), stepped = kv.create_sequence();
    const std::vector<float> all = forward_one(fwd, kv, batched, kTokens, true);
    REQUIRE(all.size() == kTokens.size() * V);
    for (size_t t = 0; t < kTokens.size(); ++t) {
        const std::vector<float> one = forward_one(fwd, kv, stepped, std::span<const int32_t>(&kTokens[t], 1), false);
        INFO("position " << t);
        CHECK(max_abs_diff(&all[t * V], one.data(), V) < 1e-4f);
    }
    CHECK(kv.length(batched) == static_cast<int32_t>(kTokens.size()));
}

TEST_CASE("forward f32: sequences batched together give the same logits as each alone", "[forward]") {
    auto model = load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(f32_cache(fwd.kv_shape(64, 4)));
    const size_t V = static_cast<size_t>(fwd.n_vocab());
    const std::span<const int32_t> all(kTokens);
    const int32_t a = kv.create_sequence(), b = kv.create_sequence(), ra = kv.create_sequence(), rb = kv.create_sequence();
    // Alone: a = first 5 then 3 more (all logits); b = first 9 then 1 more.
    forward_one(fwd, kv, ra, all.subspan(0, 5), false);
    const std::vector<float> alone_a = forward_one(fwd, kv, ra, all.subspan(5, 3), true);
    forward_one(fwd, kv, rb, all.subspan(0, 9), false);
    const std::vector<float> alone_b = forward_one(fwd, kv, rb, all.subspan(9, 1), false);
    // Together: prefill both in one batch, then both continuations in one batch.
    BatchItem first[2] = {{a, all.subspan(0, 5), false}, {b, all.subspan(0, 9), false}};
    fwd.forward(kv, first);
    BatchItem second[2] = {{a, all.subspan(5, 3), true}, {b, all.subspan(9, 1), false}};
    auto together = fwd.forward(kv, second);
    REQUIRE(together.size() == 4 * V);
    CHECK(max_abs_diff(together.data(), alone_a.data(), 3 * V) < 1e-4f);
    CHECK(max_abs_diff(together.data() + 3 * V, alone_b.data(), V) < 1e-4f);
}

TEST_CASE("forward: truncating the KV cache and decoding again reproduces the logits", "[forward]") {
    for (const char* file : {"stories15M-f32.gguf", "stories15M-q4_0.gguf"}) {
        auto model = load(file);
        ThreadPool pool(2);
        ForwardPass fwd(*model, pool);
        PagedKvCache kv(fwd.kv_shape(64, 1));
        const size_t V = static_cast<size_t>(fwd.n_vocab());
        const std::span<const int32_t> all(kTokens);
        const int32_t s = kv.create_sequence();
        forward_one(fwd, kv, s, all.subspan(0, 6), false);
        const int32_t used_before = kv.used_blocks();
        const std::vector<float> first = forward_one(fwd, kv, s, all.subspan(6, 8), true);
        // Roll back past a block boundary (14 -> 6 positions), then again.
        kv.truncate(s, 6);
        CHECK(kv.used_blocks() == used_before);
        const std::vector<float> again = forward_one(fwd, kv, s, all.subspan(6, 8), true);
        INFO(file);
        CHECK(max_abs_diff(first.data(), again.data(), 8 * V) < 1e-5f);
        // A rejected continuation, then the accepted one: same as a straight decode.
        kv.truncate(s, 6);
        const int32_t wrong[3] = {400, 500, 600};
        forward_one(fwd, kv, s, wrong, true);
        kv.truncate(s, 6);
        const std::vector<float> after_reject = forward_one(fwd, kv, s, all.subspan(6, 8), true);
        CHECK(max_abs_diff(first.data(), after_reject.data(), 8 * V) < 1e-5f);
    }
}

TEST_CASE("forward f32 cache: fast path agrees with the scalar reference for every weight type", "[forward]") {
    struct Case {
        const char* file;
        float rel_tol;  // max |diff| relative to max |logit|
    };
    // f32: only summation order differs. Quantised weights: the fast path
    // also quantises activations to q8_0 (as ggml does), the reference does not.
    for (const Case c : {Case{"stories15M-f32.gguf", 1e-4f}, Case{"stories15M-q8_0.gguf", 0.03f},
                         Case{"stories15M-q4_0.gguf", 0.06f}}) {
        auto model = load(c.file);
        ThreadPool pool(2);
        ForwardPass fwd(*model, pool);
        PagedKvCache kv(f32_cache(fwd.kv_shape(32, 1)));
        ReferenceForward ref(*model, 32);
        const size_t V = static_cast<size_t>(fwd.n_vocab());
        const int32_t s = kv.create_sequence();
        const std::vector<float> fast = forward_one(fwd, kv, s, std::span<const int32_t>(kTokens).subspan(0, 8), true);
        int agree = 0;
        for (size_t t = 0; t < 8; ++t) {
            const std::vector<float>& r = ref.step(kTokens[t]);
            INFO(c.file << " position " << t);
            CHECK(max_abs_diff(&fast[t * V], r.data(), V) <= c.rel_tol * max_abs(r.data(), V));
            agree += argmax(&fast[t * V], V) == argmax(r.data(), V);
        }
        CHECK(agree >= 7);
    }
}

TEST_CASE("forward f32 cache: every ISA the CPU has gives the same logits as the scalar kernels", "[forward]") {
    auto model = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    std::vector<std::vector<float>> results;
    for (const char* isa : {"scalar", "avx2", "avx512"}) {
        setenv("SPECD_ISA", isa, 1);
        ForwardPass fwd(*model, pool);
        unsetenv("SPECD_ISA");
        if (std::string(isa_name(fwd.isa())) != isa) {
            WARN("skipping ISA " << isa << ": this CPU lacks it");
            continue;
        }
        PagedKvCache kv(f32_cache(fwd.kv_shape(32, 1)));
        results.push_back(forward_one(fwd, kv, kv.create_sequence(), std::span<const int32_t>(kTokens).subspan(0, 6), true));
    }
    REQUIRE(!results.empty());
    for (size_t i = 1; i < results.size(); ++i) {
        CHECK(max_abs_diff(results[0].data(), results[i].data(), results[0].size()) <=
              1e-3f * max_abs(results[0].data(), results[0].size()));
    }
}

TEST_CASE("forward f16 cache: logits stay close to the f32 cache's and to the scalar reference rounding K and V "
          "through f16, and the greedy tokens agree",
          "[forward]") {
    struct Case {
        const char* file;
        float vs_f32;  // max |diff| to the f32 cache's logits, relative to max |logit|
        float vs_ref;  // max |diff| to the f16 reference's logits, relative to max |logit|
    };
    // f32 weights: the rounded keys and values move the logits by ~2e-4 of
    // their range. q8_0: the fast path quantises activations to q8_0, and
    // the rounded attention output tips some of those roundings: ~2e-2,
    // the size of the q8_0 fast path's gap to the reference.
    for (const Case c : {Case{"stories15M-f32.gguf", 1e-3f, 1e-3f}, Case{"stories15M-q8_0.gguf", 0.04f, 0.06f}}) {
        INFO(c.file);
        auto model = load(c.file);
        ThreadPool pool(2);
        ForwardPass fwd(*model, pool);
        const size_t V = static_cast<size_t>(fwd.n_vocab());
        const size_t T = kTokens.size();
        const KvCacheShape half_shape = fwd.kv_shape(32, 1);
        REQUIRE(half_shape.type == TensorType::F16);  // the default
        PagedKvCache half(half_shape), full(f32_cache(half_shape));
        const std::vector<float> h = forward_one(fwd, half, half.create_sequence(), kTokens, true);
        const std::vector<float> f = forward_one(fwd, full, full.create_sequence(), kTokens, true);
        // The scalar reference stores K and V rounded through f16 as the
        // cache does. Not bit for bit: a last-bit difference in a summed key
        // can round it to the neighbouring half.
        ReferenceForward ref(*model, 32, TensorType::F16);
        int agree = 0, agree_ref = 0;
        for (size_t t = 0; t < T; ++t) {
            INFO("position " << t);
            const float range = max_abs(&f[t * V], V);
            CHECK(max_abs_diff(&h[t * V], &f[t * V], V) <= c.vs_f32 * range);
            agree += argmax(&h[t * V], V) == argmax(&f[t * V], V);
            const std::vector<float>& r = ref.step(kTokens[t]);
            CHECK(max_abs_diff(&h[t * V], r.data(), V) <= c.vs_ref * range);
            agree_ref += argmax(&h[t * V], V) == argmax(r.data(), V);
        }
        CHECK(agree >= static_cast<int>(T) - 1);
        CHECK(agree_ref >= static_cast<int>(T) - 2);
    }
}

TEST_CASE("forward: bad batches are refused with a clear error and leave the cache unchanged", "[forward]") {
    auto model = load("stories15M-f32.gguf");
    ThreadPool pool(1);
    ForwardOptions opt;
    opt.max_batch_tokens = 32;
    ForwardPass fwd(*model, pool, opt);
    KvCacheShape shape = fwd.kv_shape(48, 2);
    shape.n_blocks = 3;  // 48 positions in all
    PagedKvCache kv(shape);
    const int32_t a = kv.create_sequence(), b = kv.create_sequence();
    const int32_t bad_token[1] = {32000};
    CHECK_THROWS_WITH(forward_one(fwd, kv, a, bad_token, false), Catch::Contains("outside the vocabulary"));
    std::vector<int32_t> many(33, 5);
    CHECK_THROWS_WITH(forward_one(fwd, kv, a, many, false), Catch::Contains("more than 32 tokens"));
    std::vector<int32_t> thirty(30, 5);
    forward_one(fwd, kv, a, thirty, false);  // 2 blocks
    CHECK_THROWS_AS(forward_one(fwd, kv, b, thirty, false), KvCacheFull);
    CHECK(kv.length(b) == 0);
    CHECK(kv.used_blocks() == 2);
    std::vector<int32_t> rest(19, 5);
    CHECK_THROWS_WITH(forward_one(fwd, kv, a, rest, false), Catch::Contains("beyond the context size 48"));
    CHECK(kv.length(a) == 30);
    BatchItem twice[2] = {{a, std::span<const int32_t>(thirty).subspan(0, 1), false},
                          {a, std::span<const int32_t>(thirty).subspan(0, 1), false}};
    CHECK_THROWS_WITH(fwd.forward(kv, twice), Catch::Contains("twice in one batch"));
}

// ------------------------------------------------------------ draft head ---

TEST_CASE("forward: repacked q8_0 and q4_0 weights give the file layout's logits bit for bit on each SIMD ISA, "
          "batched, in one-row steps and through a packed draft head",
          "[forward]") {
    for (const char* isa_env : {"avx2", "avx512"}) {
        for (const char* file : {"stories15M-q8_0.gguf", "stories15M-q4_0.gguf"}) {
            INFO(isa_env << " " << file);
            auto model = load(file);
            ThreadPool pool(2);
            ForwardOptions options;
            options.draft_head_tokens = 256;  // whole tiles: the head's rows are packed too
            setenv("SPECD_ISA", isa_env, 1);
            setenv("SPECD_REPACK", "0", 1);
            ForwardPass plain(*model, pool, options);
            setenv("SPECD_REPACK", "1", 1);
            ForwardPass packed(*model, pool, options);
            unsetenv("SPECD_REPACK");
            unsetenv("SPECD_ISA");
            if (std::string(isa_name(packed.isa())) != isa_env) {
                WARN("skipping ISA " << isa_env << ": this CPU lacks it");
                continue;
            }
            REQUIRE(model->packed_weights(packed.isa(), pool).matrices() > 0);
            const int32_t n_ctx = model->hparams().n_ctx_train;
            PagedKvCache kv_plain(plain.kv_shape(n_ctx, 1)), kv_packed(packed.kv_shape(n_ctx, 1));
            // Until the draft head is built, then a few more steps with it.
            for (int64_t fed = 0; fed <= kDraftHeadWarmupTokens; fed += static_cast<int64_t>(kTokens.size())) {
                const int32_t a = kv_plain.create_sequence(), b = kv_packed.create_sequence();
                const std::vector<float> batch_a = forward_one(plain, kv_plain, a, kTokens, true);
                const std::vector<float> batch_b = forward_one(packed, kv_packed, b, kTokens, true);
                REQUIRE(batch_a == batch_b);
                const std::vector<int32_t> next = {263};
                REQUIRE(forward_one(plain, kv_plain, a, next, false) == forward_one(packed, kv_packed, b, next, false));
                kv_plain.free_sequence(a);
                kv_packed.free_sequence(b);
            }
        }
    }
}

TEST_CASE("draft head: after the warm-up the head's ids carry the full head's logits, every other id -inf, and a "
          "burst of new tokens joins the head at once",
          "[forward][draft-head]") {
    auto model = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardOptions headed_options;
    headed_options.draft_head_tokens = 200;  // more than the distinct ids of kTokens, fewer than a story's
    ForwardPass headed(*model, pool, headed_options), full(*model, pool);
    const int32_t n_ctx = model->hparams().n_ctx_train;
    PagedKvCache kv_headed(headed.kv_shape(n_ctx, 3)), kv_full(full.kv_shape(n_ctx, 1));
    const size_t V = static_cast<size_t>(full.n_vocab());

    // Before the warm-up: the full head. Then kTokens, as sequences of their
    // own, until kDraftHeadWarmupTokens tokens have gone through.
    int64_t fed = 0;
    while (fed < kDraftHeadWarmupTokens) {
        const int32_t s = kv_headed.create_sequence();
        const std::vector<float> h = forward_one(headed, kv_headed, s, kTokens, false);
        kv_headed.free_sequence(s);
        if (fed == 0) {
            const int32_t sf = kv_full.create_sequence();
            CHECK(h == forward_one(full, kv_full, sf, kTokens, false));
            kv_full.free_sequence(sf);
        }
        fed += static_cast<int64_t>(kTokens.size());
    }
    const int32_t s_headed = kv_headed.create_sequence(), s_full = kv_full.create_sequence();
    forward_one(headed, kv_headed, s_headed, kTokens, false);
    forward_one(full, kv_full, s_full, kTokens, false);
    const std::vector<int32_t> next = {263};
    const std::vector<float> h = forward_one(headed, kv_headed, s_headed, next, false);
    const std::vector<float> f = forward_one(full, kv_full, s_full, next, false);
    size_t finite = 0;
    for (size_t v = 0; v < V; ++v) {
        if (std::isfinite(h[v])) {
            ++finite;
            CHECK(h[v] == f[v]);  // the same rows through the same kernel
        } else {
            CHECK(h[v] == -INFINITY);
        }
    }
    CHECK(finite == 200);
    for (int32_t id : kTokens) CHECK(std::isfinite(h[static_cast<size_t>(id)]));  // the fed ids are in the head
    // Unfed ids fill the rest, lowest first.
    CHECK(std::isfinite(h[0]));
    CHECK(!std::isfinite(h[V - 1]));

    // forward_greedy: the argmax over the head, equal to forward()'s.
    int32_t g = -1;
    const int32_t g_seq = kv_headed.create_sequence();
    const int32_t g_ref = kv_headed.create_sequence();
    const std::vector<float> ref = forward_one(headed, kv_headed, g_ref, kTokens, false);
    BatchItem item;
    item.seq = g_seq;
    item.tokens = kTokens;
    REQUIRE(headed.forward_greedy(kv_headed, std::span<const BatchItem>(&item, 1), std::span<int32_t>(&g, 1)));
    CHECK(g == argmax(ref.data(), V));

    // A burst of kDraftHeadMissBurst ids never fed joins the head in the call that feeds them.
    std::vector<int32_t> fresh;
    for (int32_t id = 20000; id < 20000 + static_cast<int32_t>(kDraftHeadMissBurst); ++id) fresh.push_back(id);
    const std::vector<float> after = forward_one(headed, kv_headed, s_headed, fresh, false);
    for (int32_t id : fresh) CHECK(std::isfinite(after[static_cast<size_t>(id)]));
    for (int32_t id : kTokens) CHECK(std::isfinite(after[static_cast<size_t>(id)]));

    ForwardOptions bad;
    bad.draft_head_tokens = -1;
    CHECK_THROWS_WITH(ForwardPass(*model, pool, bad), Catch::Contains("draft_head_tokens"));
}

// ------------------------------------------------------------- benchmark ---

// ./engine_test_forward "[.bench]": 16 sequences decoding one token each per
// step, as the verifier's plain steps at concurrency 16, at short and long
// contexts and both KV types: how much of a step attention takes.
TEST_CASE("bench: 16 sequences decoding together at contexts 32 to 224, f32 and f16 KV", "[.bench]") {
    auto model = load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    constexpr int32_t kSeqs = 16, kSteps = 32;
    std::printf("| context | kv | ms per step | tokens/s |\n| ---: | --- | ---: | ---: |\n");
    for (int32_t ctx : {32, 96, 160, 224}) {
        for (TensorType type : {TensorType::F32, TensorType::F16}) {
            KvCacheShape shape = fwd.kv_shape(256, kSeqs);
            shape.type = type;
            PagedKvCache kv(shape);
            std::vector<int32_t> seqs;
            std::vector<int32_t> prompt(static_cast<size_t>(ctx));
            for (int32_t s = 0; s < kSeqs; ++s) {
                for (int32_t i = 0; i < ctx; ++i) prompt[static_cast<size_t>(i)] = 100 + (i * 37 + s * 101) % 20000;
                seqs.push_back(kv.create_sequence());
                forward_one(fwd, kv, seqs.back(), prompt, false);
            }
            std::vector<double> ms;
            for (int rep = 0; rep < 5; ++rep) {
                for (int32_t s : seqs) kv.truncate(s, ctx);
                const auto t0 = std::chrono::steady_clock::now();
                for (int step = 0; step < kSteps; ++step) {
                    const int32_t token = 200 + step;
                    std::vector<BatchItem> items;
                    for (int32_t s : seqs) items.push_back({s, std::span<const int32_t>(&token, 1), false});
                    fwd.forward(kv, items);
                }
                ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kSteps);
            }
            std::sort(ms.begin(), ms.end());
            std::printf("| %d | %s | %.2f | %.0f |\n", ctx + kSteps / 2, tensor_type_name(type), ms[2], kSeqs * 1000.0 / ms[2]);
        }
    }
}
