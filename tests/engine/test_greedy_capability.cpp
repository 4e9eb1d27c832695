// ForwardBackend::forward_greedy (only the argmax per logit row comes back
// from the backend) driven on the CPU: HostArgmaxBackend wraps the CPU
// forward pass and offers the capability with the argmax computed on the
// host and counts the calls, so BatchVerifier's greedy-only path (the one
// the CUDA backend takes with its device argmax, and the CPU backend with
// its fused one) must give exactly the outcomes of the full-logits path,
// which test::FullLogitsOnly forces. The CPU pass's own fused argmax is checked
// against the argmax of its logits.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/proposer.h"
#include "support/full_logits_only.h"
#include "support/models.h"

using namespace specd;

namespace {

// The CPU forward pass with the greedy capability (argmax on the host,
// highest logit and lowest id on ties, as the device kernel and the greedy
// sampler choose).
class HostArgmaxBackend : public ForwardBackend {
public:
    explicit HostArgmaxBackend(ForwardPass& inner) : inner_(inner) {}
    std::span<const float> forward(PagedKvCache& kv, std::span<const BatchItem> items) override {
        ++forward_calls;
        return inner_.forward(kv, items);
    }
    bool forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) override {
        ++greedy_calls;
        size_t rows = 0;
        for (const BatchItem& item : items) rows += item.all_logits ? item.tokens.size() : 1;
        REQUIRE(argmax_out.size() >= rows);
        const std::span<const float> logits = inner_.forward(kv, items);
        const size_t V = static_cast<size_t>(n_vocab());
        REQUIRE(logits.size() == rows * V);
        for (size_t r = 0; r < rows; ++r) {
            const float* row = logits.data() + r * V;
            argmax_out[r] = static_cast<int32_t>(std::max_element(row, row + V) - row);  // first of equal maxima
        }
        return true;
    }
    std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheShape& shape) override { return inner_.make_kv_cache(shape); }
    const LlamaModel& model() const override { return inner_.model(); }
    const ForwardOptions& options() const override { return inner_.options(); }
    std::string name() const override { return "cpu+host-argmax"; }

    int forward_calls = 0;
    int greedy_calls = 0;

private:
    ForwardPass& inner_;
};

bool same(const VerifyOutcome& a, const VerifyOutcome& b) {
    return a.request == b.request && a.tag == b.tag && a.ok == b.ok && a.n_accepted == b.n_accepted && a.next == b.next &&
           std::memcmp(a.rng.s, b.rng.s, sizeof a.rng.s) == 0;
}

SamplingParams greedy_params() {
    SamplingParams s;
    s.temperature = 0.0f;
    return s;
}

// Runs the same jobs through `a` and `b`, step by step; returns both outcome lists.
void run_both(BatchVerifier& a, BatchVerifier& b, std::vector<VerifyJob> jobs, std::vector<VerifyOutcome>& out_a,
              std::vector<VerifyOutcome>& out_b) {
    for (VerifyJob& j : jobs) {
        a.submit(j);
        b.submit(std::move(j));
    }
    while (a.has_work() || b.has_work()) {
        a.step(out_a);
        b.step(out_b);
    }
}

}  // namespace

TEST_CASE("greedy verification through forward_greedy equals the full-logits path", "[batch][greedy]") {
    auto target = test::load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass plain_cpu(*target, pool);
    test::FullLogitsOnly plain(plain_cpu);
    ForwardPass inner(*target, pool);
    HostArgmaxBackend argmax(inner);
    const int32_t n_ctx = 256;
    PagedKvCache kv_plain(plain.kv_shape(n_ctx, 4));
    PagedKvCache kv_argmax(argmax.kv_shape(n_ctx, 4));
    BatchVerifier ref(plain, kv_plain);
    BatchVerifier dev(argmax, kv_argmax);

    const std::vector<int32_t> prompt_a = target->tokenizer().encode("Once upon a time", true);
    const std::vector<int32_t> prompt_b = target->tokenizer().encode("The little dog", true);
    std::vector<VerifyOutcome> oa, ob;
    std::vector<VerifyJob> prefills(2);
    for (int i = 0; i < 2; ++i) {
        prefills[i].request = static_cast<uint64_t>(i + 1);
        prefills[i].tag = static_cast<uint64_t>(100 + i);
        prefills[i].prefill = true;
        prefills[i].tokens = i == 0 ? prompt_a : prompt_b;
        prefills[i].sampling = greedy_params();
    }
    run_both(ref, dev, prefills, oa, ob);
    REQUIRE(oa.size() == 2);
    REQUIRE(ob.size() == 2);
    for (size_t i = 0; i < 2; ++i) CHECK(same(oa[i], ob[i]));

    // The greedy continuation of each request, learnt first on a third
    // verifier one token per step, so the drafts below can be right.
    std::vector<std::vector<int32_t>> greedy(2);
    {
        ForwardPass learn_fwd(*target, pool);
        PagedKvCache learn_kv(learn_fwd.kv_shape(n_ctx, 4));
        BatchVerifier learn(learn_fwd, learn_kv);
        std::vector<VerifyOutcome> lo;
        for (VerifyJob j : prefills) learn.submit(std::move(j));
        while (learn.has_work()) learn.step(lo);
        REQUIRE(lo.size() == 2);
        for (size_t i = 0; i < 2; ++i) greedy[i].push_back(lo[i].next);
        for (int t = 0; t < 70; ++t) {
            for (size_t i = 0; i < 2; ++i) {
                VerifyJob j;
                j.request = i + 1;
                j.sampling = greedy_params();
                j.tokens = {greedy[i].back()};
                learn.submit(std::move(j));
            }
            lo.clear();
            while (learn.has_work()) learn.step(lo);
            REQUIRE(lo.size() == 2);
            for (size_t i = 0; i < 2; ++i) greedy[i].push_back(lo[i].next);
        }
    }

    // Verification rounds for both requests in one step each: the drafts
    // are the next greedy tokens (accepted), with one changed in even
    // rounds (rejected there: the recovered token is the argmax).
    std::vector<size_t> pos = {0, 0};  // index of the pending token in greedy[i]
    int accepted_total = 0, rejected_total = 0;
    for (int round = 0; round < 12; ++round) {
        std::vector<VerifyJob> jobs(2);
        for (size_t i = 0; i < 2; ++i) {
            VerifyJob& j = jobs[i];
            j.request = i + 1;
            j.tag = static_cast<uint64_t>(1000 + round * 10) + i;
            j.sampling = greedy_params();
            j.tokens = {greedy[i][pos[i]]};
            const int32_t k = 1 + round % 4;
            for (int32_t d = 0; d < k; ++d) {
                int32_t t = greedy[i][pos[i] + 1 + static_cast<size_t>(d)];
                if (round % 2 == 0 && d == k / 2) t = (t + 7) % target->hparams().n_vocab;
                j.tokens.push_back(t);
            }
            j.n_draft = k;
        }
        std::vector<VerifyOutcome> ra, rb;
        run_both(ref, dev, jobs, ra, rb);
        REQUIRE(ra.size() == 2);
        REQUIRE(rb.size() == 2);
        for (size_t i = 0; i < 2; ++i) {
            INFO("round " << round << " request " << i + 1);
            REQUIRE(ra[i].ok);
            CHECK(same(ra[i], rb[i]));
            accepted_total += ra[i].n_accepted;
            rejected_total += ra[i].n_accepted < jobs[i].n_draft ? 1 : 0;
            pos[i] += static_cast<size_t>(ra[i].n_accepted) + 1;
            // Lossless: the next token is the greedy continuation's.
            CHECK(ra[i].next == greedy[i][pos[i]]);
        }
        CHECK(kv_plain.length(0) == kv_argmax.length(0));
        CHECK(kv_plain.length(1) == kv_argmax.length(1));
    }
    // Both branches of the acceptance rule ran.
    CHECK(rejected_total > 0);
    CHECK(accepted_total > 0);
    // Every step of the argmax backend went through forward_greedy; none of the plain one could.
    CHECK(dev.greedy_steps() == argmax.greedy_calls);
    CHECK(argmax.greedy_calls == 13);  // one prefill step for both prompts, then 12 rounds
    CHECK(argmax.forward_calls == 0);
    CHECK(ref.greedy_steps() == 0);
}

TEST_CASE("a step with a sampled or penalised job takes the full-logits path", "[batch][greedy]") {
    auto target = test::load("stories15M-f32.gguf");
    ThreadPool pool(1);
    ForwardPass plain_cpu(*target, pool);
    test::FullLogitsOnly plain(plain_cpu);
    ForwardPass inner(*target, pool);
    HostArgmaxBackend argmax(inner);
    PagedKvCache kv_plain(plain.kv_shape(128, 4));
    PagedKvCache kv_argmax(argmax.kv_shape(128, 4));
    BatchVerifier ref(plain, kv_plain);
    BatchVerifier dev(argmax, kv_argmax);
    const std::vector<int32_t> prompt = target->tokenizer().encode("Once upon a time", true);

    std::vector<VerifyJob> jobs(3);
    for (size_t i = 0; i < jobs.size(); ++i) {
        jobs[i].request = i + 1;
        jobs[i].prefill = true;
        jobs[i].tokens = prompt;
        jobs[i].sampling = greedy_params();
        jobs[i].rng = Rng(42 + i).state();
    }
    jobs[1].sampling.temperature = 0.8f;    // sampled: needs the whole distribution
    jobs[2].sampling.repeat_penalty = 1.3f;  // greedy, but the penalty moves the argmax
    CHECK(BatchVerifier::argmax_suffices(jobs[0].sampling));
    CHECK_FALSE(BatchVerifier::argmax_suffices(jobs[1].sampling));
    CHECK_FALSE(BatchVerifier::argmax_suffices(jobs[2].sampling));
    std::vector<VerifyOutcome> oa, ob;
    run_both(ref, dev, jobs, oa, ob);
    REQUIRE(oa.size() == 3);
    REQUIRE(ob.size() == 3);
    for (size_t i = 0; i < 3; ++i) CHECK(same(oa[i], ob[i]));
    CHECK(argmax.greedy_calls == 0);
    CHECK(argmax.forward_calls >= 1);
    CHECK(dev.greedy_steps() == 0);
}

TEST_CASE("the CPU forward pass's fused argmax equals the argmax of its logits on every row and thread count",
          "[batch][greedy]") {
    auto target = test::load("stories15M-f32.gguf");
    const std::vector<int32_t> prompt_a = target->tokenizer().encode("Once upon a time, there was a", true);
    const std::vector<int32_t> prompt_b = target->tokenizer().encode("The little dog", true);
    const std::vector<int32_t> verify = {278, 2217, 8023, 1058, 29892};  // a 5-token "verification"
    for (int threads : {1, 2, 3}) {
        INFO(threads << " threads");
        ThreadPool pool(threads);
        ForwardPass a(*target, pool), b(*target, pool);
        PagedKvCache kv_a(a.kv_shape(128, 2)), kv_b(b.kv_shape(128, 2));
        for (PagedKvCache* kv : {&kv_a, &kv_b}) {
            kv->create_sequence();
            kv->create_sequence();
        }
        // Two batches: prefills (the last row of each), then a verification
        // (every row) beside a one-token step.
        std::vector<std::vector<BatchItem>> batches(2, std::vector<BatchItem>(2));
        batches[0][0] = {0, prompt_a, false};
        batches[0][1] = {1, prompt_b, false};
        batches[1][0] = {0, verify, true};
        batches[1][1] = {1, std::span<const int32_t>(verify).first(1), false};
        for (const std::vector<BatchItem>& batch : batches) {
            const std::span<const float> logits = a.forward(kv_a, batch);
            const size_t V = static_cast<size_t>(target->hparams().n_vocab);
            const size_t rows = logits.size() / V;
            std::vector<int32_t> fused(rows + 1, -7);
            REQUIRE(b.forward_greedy(kv_b, batch, fused));
            for (size_t r = 0; r < rows; ++r) {
                const float* row = logits.data() + r * V;
                CHECK(fused[r] == static_cast<int32_t>(std::max_element(row, row + V) - row));  // first of equal maxima
            }
            CHECK(fused[rows] == -7);  // nothing past the rows written
        }
        CHECK(kv_a.length(0) == kv_b.length(0));
        CHECK(kv_a.length(1) == kv_b.length(1));
    }
}

TEST_CASE("the CPU forward pass refuses too few argmax slots before running anything", "[batch][greedy]") {
    auto target = test::load("stories15M-f32.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(64, 1));
    const int32_t seq = kv.create_sequence();
    const std::vector<int32_t> tokens = {1, 2, 3};
    BatchItem item;
    item.seq = seq;
    item.tokens = tokens;
    item.all_logits = true;
    std::vector<int32_t> out(2, -1);
    CHECK_THROWS_WITH(fwd.forward_greedy(kv, std::span<const BatchItem>(&item, 1), out), Catch::Contains("argmax slots"));
    CHECK(kv.length(seq) == 0);  // nothing ran
}

TEST_CASE("greedy drafts through forward_greedy equal the full-logits drafts", "[batch][greedy]") {
    auto draft = test::load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass plain_cpu(*draft, pool);
    test::FullLogitsOnly plain(plain_cpu);
    ForwardPass inner(*draft, pool);
    HostArgmaxBackend argmax(inner);
    PagedKvCache kv_plain(plain.kv_shape(128, 4));
    PagedKvCache kv_argmax(argmax.kv_shape(128, 4));
    BatchDrafter ref(&plain, &kv_plain);
    BatchDrafter dev(&argmax, &kv_argmax);

    std::vector<DraftJob> jobs(2);
    jobs[0].context = draft->tokenizer().encode("Once upon a time", true);
    jobs[1].context = draft->tokenizer().encode("The little dog", true);
    for (size_t i = 0; i < 2; ++i) {
        jobs[i].request = i + 1;
        jobs[i].k = 6;
        jobs[i].sampling = greedy_params();
    }
    for (int round = 0; round < 3; ++round) {
        std::vector<DraftOutcome> a, b;
        ref.draft(jobs, a);
        dev.draft(jobs, b);
        REQUIRE(a.size() == 2);
        REQUIRE(b.size() == 2);
        for (size_t i = 0; i < 2; ++i) {
            CHECK(a[i].draft.tokens.size() == 6);
            CHECK(a[i].draft.tokens == b[i].draft.tokens);
            CHECK_FALSE(b[i].draft.has_probs);
            // Accept half of the draft, as a verifier might, for the next round.
            jobs[i].context.insert(jobs[i].context.end(), a[i].draft.tokens.begin(), a[i].draft.tokens.begin() + 3);
        }
    }
    CHECK(dev.greedy_forwards() > 0);
    CHECK(argmax.forward_calls == 0);
    CHECK(ref.greedy_forwards() == 0);

    // A p_min needs the top probability: the full logits again.
    jobs[0].p_min = 0.01f;
    const int greedy_before = argmax.greedy_calls;
    std::vector<DraftOutcome> a, b;
    ref.draft(jobs, a);
    dev.draft(jobs, b);
    for (size_t i = 0; i < 2; ++i) CHECK(a[i].draft.tokens == b[i].draft.tokens);
    CHECK(argmax.greedy_calls == greedy_before);
    CHECK(argmax.forward_calls > 0);
}

TEST_CASE("the single-sequence draft proposer uses forward_greedy for greedy drafts", "[batch][greedy]") {
    auto target = test::load("stories15M-f32.gguf");
    auto draft = test::load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    auto inner = std::make_unique<ForwardPass>(*draft, pool);
    auto wrapped = std::make_unique<HostArgmaxBackend>(*inner);
    HostArgmaxBackend* counts = wrapped.get();
    DraftModelProposer dev(*target, std::move(wrapped), 128);
    DraftModelProposer ref(*target, *draft, pool, 128);
    const std::vector<int32_t> prompt = target->tokenizer().encode("Once upon a time", true);
    const SamplingParams sp = greedy_params();
    Rng rng_a(1), rng_b(1);
    dev.begin(prompt);
    ref.begin(prompt);
    const int forward_after_begin = counts->forward_calls;  // begin() prefills with forward(): one row, not a proposal
    ProposeRequest req;
    req.context = prompt;
    req.k = 5;
    req.sampling = &sp;
    Draft da, db;
    req.rng = &rng_a;
    ref.propose(req, da);
    req.rng = &rng_b;
    dev.propose(req, db);
    CHECK(da.tokens.size() == 5);
    CHECK(da.tokens == db.tokens);
    CHECK(counts->greedy_calls == 5);
    CHECK(counts->forward_calls == forward_after_begin);
    dev.end();
    ref.end();
}
