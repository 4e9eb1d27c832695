// When a compute actor (verifier, draft) runs its next batched step: at
// once when no session is on its way back with more work, else held until
// those sessions arrive or a short window expires (engine/phase_rendezvous.h
// decides who is expected). Internal.
#pragma once

#include <chrono>

#include "actors/messages.h"
#include "engine/phase_rendezvous.h"

namespace specd {

// How long a compute actor holds its step for sessions on their way back:
// a session's next message follows its result within microseconds; a strict
// verifier (shared pool) also waits out the sessions' drafting.
constexpr auto kHoldForReturning = std::chrono::milliseconds(2);
constexpr auto kHoldForDrafting = std::chrono::milliseconds(30);

// When a compute actor's step runs: queued at once when nobody is on the
// way back, else held (a timer re-checks) until they arrive or the hold
// expires. `step_queued`: a step_atom for a real step is in the mailbox.
struct StepHold {
    bool step_queued = false;
    bool holding = false;
    std::chrono::steady_clock::time_point since;  // when the hold began
};

// Queues the actor's next step (a step_atom to itself) unless one is queued,
// there is no work, or the rendezvous says to hold; a held step has a timer
// (a delayed step_atom) re-check it.
template <class Self>
void queue_step(Self* self, StepHold& h, bool has_work, PhaseRendezvous* rendezvous, Phase phase) {
    if (h.step_queued || !has_work) return;
    const PhaseRendezvous::Wait wait = rendezvous ? rendezvous->waiting_for(phase) : PhaseRendezvous::Wait::None;
    if (wait != PhaseRendezvous::Wait::None) {
        const auto now = std::chrono::steady_clock::now();
        const auto window = wait == PhaseRendezvous::Wait::Drafting ? kHoldForDrafting : kHoldForReturning;
        if (!h.holding) {
            h.holding = true;
            h.since = now;
            self->delayed_send(self, window, step_atom::value);
            return;
        }
        // Measured from the hold's start: a returning request that reached
        // the drafter meanwhile extends a 2 ms hold to a draft's length.
        if (now < h.since + window) {
            if (wait == PhaseRendezvous::Wait::Drafting && now >= h.since + kHoldForReturning) {
                const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(h.since + window - now);
                self->delayed_send(self, left + std::chrono::milliseconds(1), step_atom::value);
            }
            return;
        }
        rendezvous->give_up(phase);  // they join whichever step they reach
    }
    h.holding = false;
    h.step_queued = true;
    self->send(self, step_atom::value);
}

}  // namespace specd
