// Keeps the sessions of one runtime in step, so that the verifier and the
// drafter batch them together instead of taking them one by one.
//
// Why: each compute actor steps as soon as its first job arrives. After a
// verifier step answers sessions A and B, A's next message often arrives
// alone, A steps alone, and from then on A and B alternate, each step
// holding one session (measured: 2 sessions decoding plain on 2 cores ran
// 277 of 389 verifier steps with one session). The rendezvous remembers who
// the last verifier step answered and lets a compute actor hold its step
// until they are back (or have gone to the other phase, or ended), with a
// time limit in case one never returns.
//
// A request the verifier answered is `Returning` until its next message
// reaches the drafter (`AtDraft`) or the verifier (forgotten: it is in the
// step the verifier is gathering). The verifier waits for `Returning`
// requests and, in strict mode, also for those `AtDraft`: strict is for a
// draft and a verifier that share one thread pool, where the verifier could
// not run during the draft anyway. The drafter waits for `Returning` ones.
// Thread-safe: the two actors run on different threads.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>

namespace specd {

enum class Phase { Draft, Verify };

class PhaseRendezvous {
public:
    explicit PhaseRendezvous(bool strict) : strict_(strict) {}

    // The verifier's step answered these requests: they will come back.
    void answered(std::span<const uint64_t> requests);
    // A request's message reached `phase`. Returns true when the other
    // phase is holding its step and may have been waiting for it (it
    // should look again); false spares a wake-up of its thread.
    bool arrived(Phase phase, uint64_t request);
    // The request ended (closed): nobody waits for it.
    void closed(uint64_t request);
    // Whether `phase` should hold its step for a request still on its way.
    bool should_wait(Phase phase) { return waiting_for(phase) != Wait::None; }
    // What `phase` waits for: nobody, a request returning from the last
    // verifier step (a short hold), or, strict verifier only, none returning
    // but some still drafting (a hold as long as a draft). Asked by the
    // phase itself before it steps: an answer other than None marks it as
    // holding until it asks again.
    enum class Wait { None, Returning, Drafting };
    Wait waiting_for(Phase phase);
    // `phase` held long enough: it stops waiting for those it was waiting for
    // (they join whichever step they reach).
    void give_up(Phase phase);

    bool strict() const { return strict_; }
    size_t tracked() const;  // requests being waited for in either phase

private:
    enum class Where { Returning, AtDraft };
    bool waits_for(Phase phase, Where where) const {
        return where == Where::Returning || (phase == Phase::Verify && strict_);
    }

    const bool strict_;
    bool holding_[2] = {false, false};  // [Phase]: its last waiting_for() said to hold
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, Where> expected_;
};

}  // namespace specd
