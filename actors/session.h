// The session actor's entry point and where its events go. Internal.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <type_traits>

#include <caf/all.hpp>

#include "actors/runtime.h"
#include "config/log.h"

namespace specd {

struct RuntimeShared;

// Where a session's events go: a sink actor, or the submitter's callbacks,
// called by the session itself. A callback sink of its own would be one
// more actor to wake per step, and on a machine whose cores the compute
// threads fill that wake-up preempts the model in mid-step.
struct EventSink {
    caf::actor actor;
    std::shared_ptr<const RuntimeCallbacks> callbacks;

    template <class Event>
    void deliver(Event&& e, const std::function<void(const std::decay_t<Event>&)>& callback) const {
        if (!callbacks) return caf::anon_send(actor, std::forward<Event>(e));
        if (!callback) return;
        try {
            callback(e);
        } catch (const std::exception& ex) {
            log::warn("a runtime callback threw; the generation goes on", {{"request", e.id}, {"error", ex.what()}});
        }
    }
    void token(token_event e) const { deliver(std::move(e), callbacks ? callbacks->on_token : nullptr); }
    void done(done_event e) const { deliver(std::move(e), callbacks ? callbacks->on_done : nullptr); }
    void error(error_event e) const { deliver(std::move(e), callbacks ? callbacks->on_error : nullptr); }
};

// Spawns the session of one request (its events go to `sink`) and counts it
// among the runtime's live sessions until it ends (actors/session.cpp).
session_actor spawn_session(const std::shared_ptr<RuntimeShared>& shared, generate_request request, EventSink sink);

}  // namespace specd
