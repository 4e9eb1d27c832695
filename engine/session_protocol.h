// One request's protocol with the runtime's compute actors, sans-IO: events
// in (a method per event), actions out (next_action), no messages, threads
// or clocks. The session actor (actors/session.cpp) turns CAF replies and
// down messages into these events and the actions into messages; a test
// drives it by hand.
//
//   start ─▶ AcquireKv ─on_kv_grant─▶ Verify(prefill) ─on_verify_reply─▶
//   { [Draft ─on_draft_reply─▶] Verify ─on_verify_reply─▶ Emit }* ─▶ Finish
//
// What it adds to SessionCore (the decoding state) is the conversation:
//  - pipelining: while step t verifies, the draft for step t+1 is asked for
//    (a prefetch) as if every drafted token is accepted and the target's
//    bonus token is the draft's own next guess; it is used only when that
//    came true, else discarded;
//  - resync: the draft actor keeps each request's context and is sent only
//    what changed (make_context_update); one that lost it answers resync and
//    is sent the whole context again;
//  - epochs: a target abandoned for another replica may still answer; its
//    replies carry the epoch they were asked in and are dropped;
//  - run-ahead: after a job that drafts nothing, the verifier may chain plain
//    steps on its own (RunAheadChains) and send their results unasked;
//  - failover: a lost draft drops the request to plain decoding; a lost
//    target before anything streamed moves it to another replica, after
//    that fails it (its KV state and the stream's position are gone).
//
// Every event is ignored once the protocol has ended (Finish or Fail).
// ReleaseTarget and FailOver need an answer (on_target_released,
// on_failover) before the next event.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/error_code.h"
#include "engine/session_core.h"

namespace specd {

// A verifier's answer for one step of the request: the reply to a job, or
// a step it ran ahead on its own.
struct VerifyReply {
    VerifyOutcome outcome;                // ok, kv_full and error say whether it ran
    bool continued = false;               // the verifier chained the next plain step; its result follows unasked
};

// A draft actor's answer to a Draft action.
struct DraftReply {
    bool resync = false;                  // it lacks the request's context: send it whole
    DraftOutcome outcome;                 // when !resync
};

class SessionProtocol {
public:
    struct Config {
        uint64_t request = 0;             // the request's key on the compute actors
        bool clustered = false;           // targets are remote replicas: a target's failure is a lost target (failover), and no run-ahead
        bool pipelined = false;           // prefetch step t+1's draft while step t verifies
        int32_t run_ahead = 0;            // plain steps a verifier may chain after a job that drafts nothing (0: none)
        bool kv_admits_draft = false;     // the KV manager also admits the draft's blocks (one process with a draft model)
    };

    // ---- actions (what the driver does, in order) ----

    // Ask the KV manager for the request's blocks; answer on_kv_grant / on_kv_error.
    struct AcquireKv {
        uint64_t epoch = 0;
        int32_t target_positions = 0;
        int32_t draft_positions = 0;      // 0: the KV manager admits no draft blocks for it
    };
    // Send a job to the verifier; answer on_verify_reply(epoch, job.prefill, ...) / on_verify_error.
    struct Verify {
        uint64_t epoch = 0;
        VerifyJob job;                    // prefill, or [pending, d1..dk]; request set
        int32_t run_ahead = 0;            // plain steps the verifier may chain (0 for a job with drafts)
        bool stop_at_eos = true;          // the chain stops after an end-of-generation token
    };
    // Ask the draft actor for a proposal; answer on_draft_reply(id, prefetch, ...) / on_draft_error.
    struct Draft {
        uint64_t id = 0;                  // this draft request's number (1, 2, ...)
        bool prefetch = false;            // for the step after the one being verified
        DraftJob job;                     // request, p_min, sampling (job.context is what `update` leads to)
        ContextUpdate update;             // only what changed since the last Draft
        int32_t k = 0;                    // tokens wanted (pipelined: one more, the guess of the bonus token)
        RngState rng;                     // the stream it samples with (pipelined: its own per draft request)
    };
    // Stream these tokens to the client.
    struct Emit {
        SessionCore::Emitted emitted;
    };
    // The request finished (core().stop_reason(), core().stats()): send the done event and end.
    struct Finish {};
    // The request failed: send one error event and end.
    struct Fail {
        ErrorCode code = ErrorCode::internal;
        std::string message;              // one line
    };
    // The target is lost: give its placement back, then answer on_target_released.
    struct ReleaseTarget {
        std::string why;
    };
    // Place the request on another target replica (not the lost one); answer on_failover.
    struct FailOver {};
    // The draft is lost: give its placement back (the request goes on plainly).
    struct ReleaseDraft {
        std::string why;
    };
    using Action = std::variant<AcquireKv, Verify, Draft, Emit, Finish, Fail, ReleaseTarget, FailOver, ReleaseDraft>;

    // `core`: the request's decoding state, built from its validated
    // parameters. `has_draft`: a draft actor is placed (else the core must
    // not be speculative). `target_address`: where the target runs, named
    // in a lost target's error.
    SessionProtocol(std::unique_ptr<SessionCore> core, const Config& config, bool has_draft, std::string target_address);

    // ---- events ----

    // The prompt is admitted and placed: acquire its KV blocks.
    void start();
    void on_kv_grant(uint64_t epoch, bool ok, const std::string& error);
    // The KV manager did not answer (it failed, or timed out on a node).
    void on_kv_error(uint64_t epoch, const std::string& why);
    // The verifier's reply to a Verify of `epoch` (a reply of an earlier
    // epoch, from an abandoned target, is dropped).
    void on_verify_reply(uint64_t epoch, bool prefill, const VerifyReply& reply);
    // A step the verifier ran ahead (sent unasked, in order after the reply
    // it chained from); dropped unless a chain of this epoch is running.
    void on_run_ahead(const VerifyReply& reply);
    // The verifier did not answer a Verify of `epoch`.
    void on_verify_error(uint64_t epoch, const std::string& why);
    void on_draft_reply(uint64_t id, bool prefetch, DraftReply reply);
    // The draft actor did not answer Draft `id`.
    void on_draft_error(uint64_t id, bool prefetch, const std::string& why);
    // The target's actors are gone (a down message).
    void on_target_lost(const std::string& why);
    // After ReleaseTarget: how many target replicas there are (each is tried once).
    void on_target_released(int32_t replicas);
    // After FailOver: whether another replica took the request, and its address.
    void on_failover(bool placed, const std::string& address);
    // The draft's actor is gone (a down message).
    void on_draft_lost(const std::string& why);
    void on_cancel();
    // The request's deadline passed.
    void on_deadline();

    // Moves the next action, in order, into `out`; false when none is left.
    bool next_action(Action& out);

    bool ended() const { return ended_; }
    const SessionCore& core() const { return *core_; }
    // The acceptance stream now (a malformed draft reply falls back to it).
    const RngState& rng_state() const { return core_->rng_state(); }
    uint64_t epoch() const { return verify_epoch_; }
    bool kv_held() const { return kv_held_; }
    bool has_draft() const { return has_draft_; }
    bool streamed() const { return streamed_; }
    int32_t resumes() const { return resumes_; }

private:
    // A draft asked for while the previous step is still being verified.
    struct Prefetch {
        bool active = false;              // asked for and not discarded
        bool ready = false;               // its reply is here
        uint64_t id = 0;                  // the draft request it answers
        std::vector<int32_t> assumed;     // tokens assumed after the history: d1..dk, then the bonus guess
        DraftOutcome outcome;
    };

    void acquire();
    void step();
    void send_verify();
    void send_draft(int32_t k, bool prefetch);
    void take_draft(DraftOutcome o, int32_t k);
    void run_job(VerifyJob job, int32_t run_ahead);
    int32_t run_ahead() const;
    void on_result(const VerifyReply& reply, bool prefill);
    void target_lost(const std::string& why);
    void draft_lost(const std::string& why);
    void flush();
    void fail(ErrorCode code, std::string message);
    std::string lost_message() const;

    std::unique_ptr<SessionCore> core_;
    Config cfg_;
    std::vector<Action> out_;             // actions not yet taken, from out_head_ on
    size_t out_head_ = 0;
    bool ended_ = false;
    bool kv_held_ = false;
    bool streamed_ = false;               // an Emit went out: the target can no longer change
    bool has_draft_ = false;
    std::string target_address_;
    std::string lost_address_, lost_why_; // the target being given up
    SessionCore::Emitted emitted_;
    std::vector<int32_t> draft_sent_;     // the context the draft actor holds for this request (what was sent)
    uint64_t draft_jobs_ = 0;             // draft requests sent (each gets its own random stream when pipelined)
    uint64_t waiting_draft_ = 0;          // id of the draft request the next step waits for (0: none)
    int32_t waiting_k_ = 0;               // and its k
    bool waiting_whole_ = false;          // and whether it sent the whole context (keep 0)
    uint64_t verify_epoch_ = 0;           // bumped when a target is abandoned: its late replies are dropped
    Prefetch prefetch_;
    bool awaiting_prefetch_ = false;      // the next step waits for the prefetch's reply
    int32_t prefetch_k_ = 0;              // the k that step wants
    std::vector<int32_t> verifying_;      // drafted tokens of the step being verified
    int32_t bonus_guess_ = -1;            // the draft's guess of that step's bonus token (-1: none)
    int32_t resumes_ = 0;                 // times moved to another target before streaming
    bool running_ahead_ = false;          // the verifier chains this request's plain steps (on_run_ahead)
    uint64_t run_ahead_epoch_ = 0;        // the epoch of the job it chains from
};

}  // namespace specd
