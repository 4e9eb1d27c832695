// The session's protocol (engine/session_protocol.h) without a scheduler:
// events fed by hand, actions checked in order. The failure paths that the
// actors reach only with several processes (a replica lost mid-verify, a
// stale epoch's reply, a verify error) are driven here directly; and the
// whole protocol, driven against a real BatchVerifier and BatchDrafter on
// stories15M, decodes exactly what plain greedy decoding does.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/run_ahead.h"
#include "engine/session_protocol.h"
#include "engine/thread_pool.h"
#include "support/models.h"

using namespace specd;
using P = SessionProtocol;

namespace {

const LlamaModel& target_model() {
    static const std::unique_ptr<LlamaModel> m = test::load("stories15M-f32.gguf");
    return *m;
}
const Tokenizer& tok() { return target_model().tokenizer(); }

// Ordinary word tokens (no byte pieces, no EOS), for outcomes fed by hand.
constexpr int32_t kA = 1001, kB = 1002, kC = 1003, kD = 1004, kE = 1005, kF = 1006, kX = 1010, kY = 1011;

struct Setup {
    int32_t max_tokens = 16;
    int32_t draft_max = 0;                // 0: a plain request
    bool adaptive = false;
    P::Config config{.request = 7};
    bool has_draft = false;
    std::string address = "10.0.0.1:7000";
};

std::unique_ptr<P> make(const Setup& s, std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931}) {
    GenerationParams gp;
    gp.max_tokens = s.max_tokens;
    gp.sampling.temperature = 0.0f;
    SpeculativeParams sp;
    sp.draft_max = s.draft_max;
    sp.adaptive = s.adaptive;
    auto core = std::make_unique<SessionCore>(tok(), std::move(prompt), gp, sp, s.draft_max > 0, 256);
    return std::make_unique<P>(std::move(core), s.config, s.has_draft, s.address);
}

std::vector<P::Action> take(P& p) {
    std::vector<P::Action> out;
    P::Action a;
    while (p.next_action(a)) out.push_back(std::move(a));
    return out;
}

// The kinds of actions, in order, as one string ("AcquireKv Verify ...").
std::string kinds(const std::vector<P::Action>& actions) {
    static const char* names[] = {"AcquireKv", "Verify", "Draft", "Emit", "Finish", "Fail", "ReleaseTarget", "FailOver", "ReleaseDraft"};
    std::string out;
    for (const P::Action& a : actions) {
        if (!out.empty()) out += ' ';
        out += names[a.index()];
    }
    return out;
}

template <class T>
T& get(std::vector<P::Action>& actions, size_t i) {
    REQUIRE(i < actions.size());
    REQUIRE(std::holds_alternative<T>(actions[i]));
    return std::get<T>(actions[i]);
}

VerifyReply ok_reply(int32_t n_accepted, int32_t next, bool continued = false) {
    VerifyReply r;
    r.outcome.n_accepted = n_accepted;
    r.outcome.next = next;
    r.continued = continued;
    return r;
}

VerifyReply failed_reply(std::string error, bool kv_full = false) {
    VerifyReply r;
    r.outcome.ok = false;
    r.outcome.kv_full = kv_full;
    r.outcome.error = std::move(error);
    return r;
}

DraftReply draft_reply(std::vector<int32_t> tokens, const P& p) {
    DraftReply r;
    r.outcome.draft.tokens = std::move(tokens);
    r.outcome.rng = p.rng_state();
    return r;
}

// start → AcquireKv → grant → the prefill's Verify; returns that Verify's epoch.
uint64_t admit(P& p) {
    p.start();
    auto a = take(p);
    REQUIRE(kinds(a) == "AcquireKv");
    const uint64_t epoch = get<P::AcquireKv>(a, 0).epoch;
    p.on_kv_grant(epoch, true, "");
    a = take(p);
    REQUIRE(kinds(a) == "Verify");
    CHECK(get<P::Verify>(a, 0).job.prefill);
    return epoch;
}

}  // namespace

TEST_CASE("session protocol: a plain request acquires, prefills with run-ahead, emits each chained step, and finishes at max_tokens",
          "[session_protocol]") {
    Setup s;
    s.max_tokens = 4;
    s.config.run_ahead = 8;
    auto p = make(s);
    p->start();
    auto a = take(*p);
    REQUIRE(kinds(a) == "AcquireKv");
    CHECK(get<P::AcquireKv>(a, 0).target_positions == 5 + 4);
    CHECK(get<P::AcquireKv>(a, 0).draft_positions == 0);
    p->on_kv_grant(0, true, "");
    a = take(*p);
    REQUIRE(kinds(a) == "Verify");
    P::Verify& v = get<P::Verify>(a, 0);
    CHECK(v.job.prefill);
    CHECK(v.job.request == 7);
    CHECK(v.job.tokens == std::vector<int32_t>{1, 9038, 2501, 263, 931});
    CHECK(v.run_ahead == 3);  // the prefill emits one token; three more fit max_tokens
    CHECK(p->kv_held());

    // The verifier chains the steps itself: each result streams, no new job goes out.
    p->on_verify_reply(0, true, ok_reply(0, kA, true));
    CHECK(kinds(take(*p)) == "Emit");
    p->on_run_ahead(ok_reply(0, kB, true));
    CHECK(kinds(take(*p)) == "Emit");
    p->on_run_ahead(ok_reply(0, kC, true));
    CHECK(kinds(take(*p)) == "Emit");
    p->on_run_ahead(ok_reply(0, kD, false));
    a = take(*p);
    REQUIRE(kinds(a) == "Emit Finish");
    CHECK(get<P::Emit>(a, 0).emitted.tokens == std::vector<int32_t>{kD});
    CHECK(p->core().output() == std::vector<int32_t>{kA, kB, kC, kD});
    CHECK(p->core().stop_reason() == StopReason::Length);
    CHECK(p->ended());
}

TEST_CASE("session protocol: the step after a chain that stops goes out before its tokens, and a run-ahead result with no chain running is dropped",
          "[session_protocol]") {
    Setup s;
    s.config.run_ahead = 2;
    auto p = make(s);
    admit(*p);
    p->on_verify_reply(0, true, ok_reply(0, kA, false));  // the verifier did not chain
    auto a = take(*p);
    REQUIRE(kinds(a) == "Verify Emit");  // the next job first: the compute actors wait for it
    CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kA});
    CHECK(get<P::Verify>(a, 0).run_ahead == 2);
    p->on_run_ahead(ok_reply(0, kB, false));  // nothing chained: not ours to take
    CHECK(take(*p).empty());
    CHECK(p->core().output() == std::vector<int32_t>{kA});
}

TEST_CASE("session protocol: a replica lost mid-verify before anything streamed fails over to another in a new epoch, and the lost one's late reply is dropped",
          "[session_protocol][failover]") {
    Setup s;
    s.config.clustered = true;
    s.config.run_ahead = 8;  // never across nodes
    auto p = make(s);
    const uint64_t first = admit(*p);
    p->on_verify_error(first, "request timed out");
    auto a = take(*p);
    REQUIRE(kinds(a) == "ReleaseTarget");
    CHECK(get<P::ReleaseTarget>(a, 0).why == "request timed out");
    CHECK_FALSE(p->kv_held());
    p->on_target_released(2);
    a = take(*p);
    REQUIRE(kinds(a) == "FailOver");
    p->on_failover(true, "10.0.0.2:7000");
    a = take(*p);
    REQUIRE(kinds(a) == "AcquireKv");
    const uint64_t second = get<P::AcquireKv>(a, 0).epoch;
    CHECK(second == first + 1);
    CHECK(p->resumes() == 1);

    // The lost target answers after all: an old epoch, dropped.
    p->on_verify_reply(first, true, ok_reply(0, kX));
    CHECK(take(*p).empty());
    p->on_kv_grant(first, true, "");
    CHECK(take(*p).empty());

    p->on_kv_grant(second, true, "");
    a = take(*p);
    REQUIRE(kinds(a) == "Verify");
    CHECK(get<P::Verify>(a, 0).epoch == second);
    CHECK(get<P::Verify>(a, 0).run_ahead == 0);
    p->on_verify_reply(second, true, ok_reply(0, kA));
    a = take(*p);
    REQUIRE(kinds(a) == "Verify Emit");
    CHECK(p->core().output() == std::vector<int32_t>{kA});
}

TEST_CASE("session protocol: a down message for the target is a lost target too, as is a failed result on a cluster, but a full KV pool is not",
          "[session_protocol][failover]") {
    Setup s;
    s.config.clustered = true;
    SECTION("down message") {
        auto p = make(s);
        admit(*p);
        p->on_target_lost("node down: connection lost");
        CHECK(kinds(take(*p)) == "ReleaseTarget");
    }
    SECTION("a failed result") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_verify_reply(e, true, failed_reply("the request was closed"));
        CHECK(kinds(take(*p)) == "ReleaseTarget");
    }
    SECTION("the KV pool ran out: overloaded, wherever it runs") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_verify_reply(e, true, failed_reply("no free KV blocks", true));
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::overloaded);
    }
    SECTION("the KV manager does not answer") {
        auto p = make(s);
        p->start();
        take(*p);
        p->on_kv_error(0, "request timed out");
        CHECK(kinds(take(*p)) == "ReleaseTarget");
    }
}

TEST_CASE("session protocol: a target lost after tokens streamed ends with one unavailable error naming the node and the streamed count",
          "[session_protocol][failover]") {
    Setup s;
    s.config.clustered = true;
    auto p = make(s);
    const uint64_t e = admit(*p);
    p->on_verify_reply(e, true, ok_reply(0, kA));
    CHECK(kinds(take(*p)) == "Verify Emit");
    CHECK(p->streamed());
    p->on_target_lost("node down: connection reset");
    CHECK(kinds(take(*p)) == "ReleaseTarget");
    p->on_target_released(2);
    auto a = take(*p);
    REQUIRE(kinds(a) == "Fail");
    const P::Fail& f = get<P::Fail>(a, 0);
    CHECK(f.code == ErrorCode::unavailable);
    CHECK(f.message == "target node 10.0.0.1:7000 was lost (node down: connection reset) after 1 streamed tokens; retry the request");
    CHECK(p->ended());
    p->on_target_lost("again");
    p->on_cancel();
    CHECK(take(*p).empty());
}

TEST_CASE("session protocol: failover tries each replica once, and fails when none takes the request", "[session_protocol][failover]") {
    Setup s;
    s.config.clustered = true;
    SECTION("every replica tried") {
        auto p = make(s);
        admit(*p);
        p->on_target_lost("down");
        take(*p);
        p->on_target_released(1);
        REQUIRE(kinds(take(*p)) == "FailOver");
        p->on_failover(true, "10.0.0.2:7000");
        auto a = take(*p);
        p->on_kv_error(get<P::AcquireKv>(a, 0).epoch, "request timed out");
        CHECK(kinds(take(*p)) == "ReleaseTarget");
        p->on_target_released(1);  // one replica, already tried
        a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::unavailable);
        CHECK(get<P::Fail>(a, 0).message.find("target node 10.0.0.2:7000 was lost (request timed out)") == 0);
    }
    SECTION("no replica up") {
        auto p = make(s);
        admit(*p);
        p->on_target_lost("down");
        take(*p);
        p->on_target_released(2);
        take(*p);
        p->on_failover(false, "");
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::unavailable);
        CHECK(get<P::Fail>(a, 0).message.find("target node 10.0.0.1:7000 was lost (down) after 0 streamed tokens") == 0);
    }
}

TEST_CASE("session protocol: in one process a verify error is exactly one internal error, a refused KV grant one overloaded error, and nothing follows",
          "[session_protocol]") {
    Setup s;
    SECTION("the verifier failed") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_verify_error(e, "actor exited");
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::internal);
        CHECK(get<P::Fail>(a, 0).message == "the verifier failed: actor exited");
        p->on_verify_reply(e, true, ok_reply(0, kA));
        p->on_verify_error(e, "again");
        p->on_deadline();
        CHECK(take(*p).empty());
    }
    SECTION("a failed result") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_verify_reply(e, true, failed_reply("the verifier stopped before this step ran"));
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::internal);
        CHECK(get<P::Fail>(a, 0).message == "the verifier stopped before this step ran");
    }
    SECTION("KV refused") {
        auto p = make(s);
        p->start();
        take(*p);
        p->on_kv_grant(0, false, "the request needs 40 blocks; the pool has 32");
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::overloaded);
        CHECK(get<P::Fail>(a, 0).message == "the request needs 40 blocks; the pool has 32");
    }
    SECTION("the KV manager failed") {
        auto p = make(s);
        p->start();
        take(*p);
        p->on_kv_error(0, "actor exited");
        auto a = take(*p);
        REQUIRE(kinds(a) == "Fail");
        CHECK(get<P::Fail>(a, 0).code == ErrorCode::internal);
        CHECK(get<P::Fail>(a, 0).message == "the KV cache manager failed: actor exited");
    }
}

TEST_CASE("session protocol: cancel while a verify is in flight finishes at once as cancelled, and the verify's late reply is ignored",
          "[session_protocol]") {
    Setup s;
    auto p = make(s);
    const uint64_t e = admit(*p);
    p->on_verify_reply(e, true, ok_reply(0, kA));
    CHECK(kinds(take(*p)) == "Verify Emit");
    p->on_cancel();
    auto a = take(*p);
    REQUIRE(kinds(a) == "Finish");
    CHECK(p->core().stop_reason() == StopReason::Cancelled);
    p->on_verify_reply(e, false, ok_reply(0, kB));
    CHECK(take(*p).empty());
    CHECK(p->core().output() == std::vector<int32_t>{kA});
}

TEST_CASE("session protocol: the deadline is one timeout error", "[session_protocol]") {
    Setup s;
    auto p = make(s);
    admit(*p);
    p->on_deadline();
    auto a = take(*p);
    REQUIRE(kinds(a) == "Fail");
    CHECK(get<P::Fail>(a, 0).code == ErrorCode::timeout);
    p->on_deadline();
    CHECK(take(*p).empty());
}

TEST_CASE("session protocol: drafts send only the changed context: a resync resends it whole, and a resync of a whole send verifies without a draft",
          "[session_protocol][draft]") {
    Setup s;
    s.draft_max = 2;
    s.has_draft = true;
    auto p = make(s);
    const uint64_t e = admit(*p);
    p->on_verify_reply(e, true, ok_reply(0, kA));
    auto a = take(*p);
    REQUIRE(kinds(a) == "Draft Emit");
    P::Draft& d1 = get<P::Draft>(a, 0);
    const auto d1_id = d1.id;  // d1 lives in `a`, which the next take() replaces
    CHECK_FALSE(d1.prefetch);
    CHECK(d1.k == 2);
    CHECK(d1.update.keep == 0);
    CHECK(d1.update.tail == std::vector<int32_t>{1, 9038, 2501, 263, 931, kA});
    p->on_draft_reply(d1.id, false, draft_reply({kB, kC}, *p));
    a = take(*p);
    REQUIRE(kinds(a) == "Verify");
    CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kA, kB, kC});
    CHECK(get<P::Verify>(a, 0).run_ahead == 0);
    p->on_verify_reply(e, false, ok_reply(1, kD));  // kB accepted, kD the recovered token
    a = take(*p);
    REQUIRE(kinds(a) == "Draft Emit");
    P::Draft& d2 = get<P::Draft>(a, 0);
    CHECK(d2.update.keep == 6);  // the prompt and kA still hold
    CHECK(d2.update.tail == std::vector<int32_t>{kB, kD});
    CHECK(get<P::Emit>(a, 1).emitted.tokens == std::vector<int32_t>{kB, kD});

    // The draft actor lost the context: the same step's draft goes out whole.
    DraftReply resync;
    resync.resync = true;
    p->on_draft_reply(d2.id, false, resync);
    a = take(*p);
    REQUIRE(kinds(a) == "Draft");
    P::Draft& d3 = get<P::Draft>(a, 0);
    CHECK(d3.update.keep == 0);
    CHECK(d3.update.tail == std::vector<int32_t>{1, 9038, 2501, 263, 931, kA, kB, kD});
    // Refused even in full: no draft this step, the pending token verifies alone.
    p->on_draft_reply(d3.id, false, resync);
    a = take(*p);
    REQUIRE(kinds(a) == "Verify");
    CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kD});
    // A reply to a draft request nobody waits for is ignored.
    p->on_draft_reply(d1_id, false, draft_reply({kE}, *p));
    CHECK(take(*p).empty());
}

TEST_CASE("session protocol: a draft lost mid-step releases it and verifies the pending token alone, and the request stays plain",
          "[session_protocol][draft]") {
    Setup s;
    s.draft_max = 2;
    s.has_draft = true;
    SECTION("its request fails") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_verify_reply(e, true, ok_reply(0, kA));
        auto a = take(*p);
        const uint64_t id = get<P::Draft>(a, 0).id;
        p->on_draft_error(id, false, "request timed out");
        a = take(*p);
        REQUIRE(kinds(a) == "ReleaseDraft Verify");
        CHECK(get<P::ReleaseDraft>(a, 0).why == "request timed out");
        CHECK(get<P::Verify>(a, 1).job.tokens == std::vector<int32_t>{kA});
        CHECK_FALSE(p->has_draft());
        CHECK_FALSE(p->core().speculative());
        p->on_verify_reply(e, false, ok_reply(0, kB));
        CHECK(kinds(take(*p)) == "Verify Emit");  // plain from here on
    }
    SECTION("a down message while a verify is in flight: released, nothing resent") {
        auto p = make(s);
        const uint64_t e = admit(*p);
        p->on_draft_lost("node down");
        CHECK(kinds(take(*p)) == "ReleaseDraft");
        p->on_draft_lost("node down");  // already released
        CHECK(take(*p).empty());
        p->on_verify_reply(e, true, ok_reply(0, kA));
        CHECK(kinds(take(*p)) == "Verify Emit");
    }
}

TEST_CASE("session protocol: pipelined, the prefetched draft is used when every drafted token and the bonus guess hold, and discarded otherwise",
          "[session_protocol][draft]") {
    Setup s;
    s.draft_max = 2;
    s.has_draft = true;
    s.config.pipelined = true;
    auto p = make(s);
    const uint64_t e = admit(*p);
    p->on_verify_reply(e, true, ok_reply(0, kA));
    auto a = take(*p);
    REQUIRE(kinds(a) == "Draft Emit");
    P::Draft d1 = get<P::Draft>(a, 0);
    CHECK(d1.k == 3);  // one more: the guess of the bonus token
    CHECK_FALSE(std::equal(std::begin(d1.rng.s), std::end(d1.rng.s), std::begin(p->rng_state().s)));  // its own random stream
    p->on_draft_reply(d1.id, false, draft_reply({kB, kC, kD}, *p));
    a = take(*p);
    // Verify [kA, kB, kC] and, meanwhile, the next step's draft after kA kB kC + the guess kD.
    REQUIRE(kinds(a) == "Verify Draft");
    CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kA, kB, kC});
    P::Draft d2 = get<P::Draft>(a, 1);
    CHECK(d2.prefetch);
    CHECK(d2.update.keep == 6);
    CHECK(d2.update.tail == std::vector<int32_t>{kB, kC, kD});

    SECTION("the guess held: the prefetch (here before the verdict) is the next step's draft") {
        p->on_draft_reply(d2.id, true, draft_reply({kE, kF, kX}, *p));
        CHECK(take(*p).empty());
        p->on_verify_reply(e, false, ok_reply(2, kD));
        a = take(*p);
        REQUIRE(kinds(a) == "Verify Draft Emit");
        CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kD, kE, kF});
        CHECK(get<P::Draft>(a, 1).prefetch);
        CHECK(get<P::Emit>(a, 2).emitted.tokens == std::vector<int32_t>{kB, kC, kD});
    }
    SECTION("the guess held: a prefetch still on its way is waited for") {
        p->on_verify_reply(e, false, ok_reply(2, kD));
        CHECK(kinds(take(*p)) == "Emit");
        p->on_draft_reply(d2.id, true, draft_reply({kE, kF, kX}, *p));
        a = take(*p);
        REQUIRE(kinds(a) == "Verify Draft");
        CHECK(get<P::Verify>(a, 0).job.tokens == std::vector<int32_t>{kD, kE, kF});
    }
    SECTION("the bonus differs: the prefetch is discarded and the step drafts anew") {
        p->on_draft_reply(d2.id, true, draft_reply({kE, kF, kX}, *p));
        take(*p);
        p->on_verify_reply(e, false, ok_reply(2, kY));
        a = take(*p);
        REQUIRE(kinds(a) == "Draft Emit");
        P::Draft& d3 = get<P::Draft>(a, 0);
        CHECK_FALSE(d3.prefetch);
        CHECK(d3.update.keep == 8);  // up to kC: the assumed kD is replaced
        CHECK(d3.update.tail == std::vector<int32_t>{kY});
        // The discarded prefetch's reply, had it come late, is ignored.
        p->on_draft_reply(d2.id, true, draft_reply({kE}, *p));
        CHECK(take(*p).empty());
    }
    SECTION("a drafted token rejected, even with the recovered token equal to the guess: the prefetch is discarded") {
        p->on_draft_reply(d2.id, true, draft_reply({kE, kF, kX}, *p));
        take(*p);
        p->on_verify_reply(e, false, ok_reply(1, kD));  // kB accepted, kC rejected, kD recovered
        a = take(*p);
        REQUIRE(kinds(a) == "Draft Emit");
        CHECK_FALSE(get<P::Draft>(a, 0).prefetch);
        CHECK(get<P::Draft>(a, 0).update.keep == 7);  // up to kB
        CHECK(get<P::Draft>(a, 0).update.tail == std::vector<int32_t>{kD});
    }
    SECTION("a prefetch the draft actor answers with resync while the step waits: the step's draft goes out whole") {
        p->on_verify_reply(e, false, ok_reply(2, kD));
        take(*p);
        DraftReply resync;
        resync.resync = true;
        p->on_draft_reply(d2.id, true, resync);
        a = take(*p);
        REQUIRE(kinds(a) == "Draft");
        CHECK_FALSE(get<P::Draft>(a, 0).prefetch);
        CHECK(get<P::Draft>(a, 0).update.keep == 0);
    }
}

// ------------------------------------------------------------------------
// The whole protocol against the real engine: a BatchVerifier over
// stories15M f32 (with RunAheadChains, as the verifier actor), and a
// BatchDrafter over its q8_0 copy behind a ContextMirror (as the draft
// actor). Replies are delivered in a chosen order: the draft's before or
// after the verifier's, so a prefetch arrives both before and after its
// verdict.

namespace {

struct Engine {
    std::unique_ptr<LlamaModel> draft_model = test::load("stories15M-q8_0.gguf");
    ThreadPool pool{2};
    ForwardPass fwd{target_model(), pool};
    ForwardPass dfwd{*draft_model, pool};
    PagedKvCache kv{fwd.kv_shape(256, 2)};
    PagedKvCache dkv{dfwd.kv_shape(256, 2)};
    BatchVerifier verifier{fwd, kv};
    BatchDrafter drafter{&dfwd, &dkv};
    ContextMirror mirror;
    RunAheadChains<int> chains;
    uint64_t next_tag = 1;
};

struct PendingVerify {
    uint64_t epoch;
    bool prefill;
    uint64_t tag;
};
struct PendingDraft {
    P::Draft d;
};

// Runs one request to its end; returns its tokens.
// `forget_before`: the draft actor forgets the request's context before
// that draft request (1-based; 0: never), as a restarted one would.
std::vector<int32_t> run(Engine& eng, P& p, bool draft_first, int32_t* resyncs_sent = nullptr, int32_t forget_before = 0) {
    int32_t n_drafts = 0;
    std::deque<PendingVerify> verifies;
    std::deque<PendingDraft> drafts;
    std::vector<int32_t> tokens;
    bool finished = false;
    auto drain = [&] {
        P::Action a;
        while (p.next_action(a)) {
            if (auto* acq = std::get_if<P::AcquireKv>(&a)) {
                p.on_kv_grant(acq->epoch, true, "");
            } else if (auto* v = std::get_if<P::Verify>(&a)) {
                const uint64_t tag = eng.next_tag++;
                v->job.tag = tag;
                if (v->run_ahead > 0 && v->job.n_draft == 0)
                    eng.chains.begin(tag, v->job.request, 1, v->run_ahead, v->stop_at_eos, v->job.sampling);
                verifies.push_back({v->epoch, v->job.prefill, tag});
                eng.verifier.submit(std::move(v->job));
            } else if (auto* d = std::get_if<P::Draft>(&a)) {
                drafts.push_back({std::move(*d)});
            } else if (auto* e = std::get_if<P::Emit>(&a)) {
                tokens.insert(tokens.end(), e->emitted.tokens.begin(), e->emitted.tokens.end());
            } else if (std::holds_alternative<P::Finish>(a)) {
                finished = true;
            } else {
                FAIL("unexpected action " << a.index());
            }
        }
    };
    auto step_draft = [&] {
        while (!drafts.empty()) {
            P::Draft d = std::move(drafts.front().d);
            drafts.pop_front();
            if (++n_drafts == forget_before) eng.mirror.close(d.job.request);
            const std::vector<int32_t>* ctx = eng.mirror.apply(d.job.request, d.update.keep, d.update.tail);
            DraftReply r;
            if (!ctx) {
                r.resync = true;
                if (resyncs_sent) ++*resyncs_sent;
            } else {
                DraftJob job = d.job;
                job.context = *ctx;
                job.k = d.k;
                job.rng = d.rng;
                std::vector<DraftOutcome> out;
                eng.drafter.draft(std::span<const DraftJob>(&job, 1), out);
                REQUIRE(out.size() == 1);
                r.outcome = std::move(out[0]);
            }
            p.on_draft_reply(d.id, d.prefetch, std::move(r));
            drain();
        }
    };
    auto step_verify = [&] {
        if (!eng.verifier.has_work()) return;
        std::vector<VerifyOutcome> outs;
        eng.verifier.step(outs);
        std::vector<VerifyJob> chained;
        std::vector<uint8_t> continued;
        std::vector<int> routes;
        eng.chains.after_step(
            outs, [](int32_t t) { return tok().is_end_of_generation(t); }, [&](uint64_t r) { return eng.verifier.is_open(r); },
            eng.next_tag, chained, continued, routes);
        for (VerifyJob& j : chained) eng.verifier.submit(std::move(j));
        for (size_t i = 0; i < outs.size(); ++i) {
            VerifyReply r{outs[i], continued[i] != 0};
            if (!verifies.empty() && verifies.front().tag == outs[i].tag) {
                const PendingVerify pv = verifies.front();
                verifies.pop_front();
                p.on_verify_reply(pv.epoch, pv.prefill, r);
            } else {
                REQUIRE(routes[i] == 1);
                p.on_run_ahead(r);
            }
            drain();
        }
    };
    p.start();
    drain();
    // Each round answers whatever is asked; a round with nothing to answer
    // before the request finished is a protocol that stalled.
    while (!finished && (!drafts.empty() || eng.verifier.has_work())) {
        if (draft_first) {
            step_draft();
            step_verify();
        } else {
            step_verify();
            step_draft();
        }
    }
    REQUIRE(finished);
    eng.verifier.close(7);
    eng.drafter.close(7);
    eng.mirror.close(7);
    return tokens;
}

std::vector<int32_t> plain(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    ThreadPool pool(2);
    ForwardPass fwd(target_model(), pool);
    PagedKvCache kv(fwd.kv_shape(256, 1));
    PlainDecoder dec(fwd, kv);
    GenerationParams gp;
    gp.max_tokens = max_tokens;
    gp.sampling.temperature = 0.0f;
    return dec.generate(prompt, gp).tokens;
}

}  // namespace

TEST_CASE("session protocol driven against a real verifier and drafter decodes exactly plain greedy decoding: plain, run-ahead, speculative, "
          "pipelined with the prefetch before and after its verdict",
          "[session_protocol][model]") {
    const std::vector<int32_t> prompt = tok().encode("Once upon a time", true);
    const int32_t n = 40;
    const std::vector<int32_t> want = plain(prompt, n);
    REQUIRE(static_cast<int32_t>(want.size()) == n);
    Engine eng;
    struct Case {
        const char* name;
        int32_t draft_max;
        bool pipelined;
        int32_t run_ahead;
        bool draft_first;
    };
    const Case cases[] = {{"plain", 0, false, 0, true},       {"plain, run-ahead 8", 0, false, 8, true},
                          {"speculative k=4", 4, false, 0, true}, {"pipelined, draft answers first", 4, true, 0, true},
                          {"pipelined, verdict first", 4, true, 0, false}};
    for (const Case& c : cases) {
        INFO(c.name);
        Setup s;
        s.max_tokens = n;
        s.draft_max = c.draft_max;
        s.has_draft = c.draft_max > 0;
        s.config.pipelined = c.pipelined;
        s.config.run_ahead = c.run_ahead;
        s.config.kv_admits_draft = true;
        auto p = make(s, prompt);
        CHECK(run(eng, *p, c.draft_first) == want);
        CHECK(p->core().stop_reason() == StopReason::Length);
        if (c.draft_max > 0) {
            CHECK(p->core().stats().n_drafted > 0);
            CHECK(p->core().stats().n_accepted > 0);
        }
    }
}

TEST_CASE("session protocol: a draft actor that forgets the context mid-request (a restart) is sent it whole again, and the output stays plain greedy's",
          "[session_protocol][model]") {
    const std::vector<int32_t> prompt = tok().encode("Lily and Ben went to the park.", true);
    const std::vector<int32_t> want = plain(prompt, 24);
    Engine eng;
    for (bool pipelined : {false, true}) {
        INFO("pipelined " << pipelined);
        Setup s;
        s.max_tokens = 24;
        s.draft_max = 3;
        s.has_draft = true;
        s.config.pipelined = pipelined;
        auto p = make(s, prompt);
        int32_t resyncs = 0;
        CHECK(run(eng, *p, true, &resyncs, 3) == want);
        CHECK(resyncs == 1);
    }
}
