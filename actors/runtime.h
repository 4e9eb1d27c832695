// The embedding API: the whole specd runtime (session, draft, verifier and
// KV-cache-manager actors over the engine) inside an application's own
// caf::actor_system, or in a standalone one.
//
//   caf::actor_system_config cfg;
//   specd::register_types(cfg);             // before creating the system
//   caf::actor_system sys{cfg};
//   auto rt = specd::Runtime::create(sys, runtime_config);   // loads the models
//   rt->submit(request, my_actor);           // token_event* then done_event (or error_event)
//   rt->submit(request, callbacks);          // the same through callbacks
//   auto result = rt->generate(request);     // or block until done
//
// Destroying the Runtime (or shutdown()) cancels what is in flight and
// stops its actors, so the host system can exit.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/interfaces.h"
#include "actors/messages.h"
#include "config/runtime_config.h"

namespace specd {

class Tokenizer;

// Registers specd's message types; call on the config before constructing
// the actor_system.
void register_types(caf::actor_system_config& cfg);

// Recommended scheduler settings for a host system: CAF's default
// work-stealing workers back off to 10 ms sleeps when idle, which puts up to
// 10 ms on every hop of a token's propose → verify → emit cycle; the
// "sharing" policy wakes a worker at once. StandaloneRuntime applies it.
void configure_low_latency(caf::actor_system_config& cfg);

struct RuntimeCallbacks {
    std::function<void(const token_event&)> on_token;  // called on a CAF worker thread, in order
    std::function<void(const done_event&)> on_done;
    std::function<void(const error_event&)> on_error;
};

struct GenerateResult {
    bool ok = false;
    error_event error;                 // when !ok
    done_event done;                   // when ok
    std::vector<int32_t> tokens;
    std::vector<uint8_t> from_draft;
    std::string text;
    int32_t token_events = 0;          // token events received
};

struct RuntimeShared;  // internal

class Runtime {
public:
    // Loads the models named by `config` (specd::Error on a bad config or
    // model file) and spawns the runtime's actors in `system`.
    static std::unique_ptr<Runtime> create(caf::actor_system& system, const RuntimeConfig& config);
    ~Runtime();
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    // Starts a generation; its events go to `sink`. Invalid requests get an
    // error_event (never an exception). The returned handle cancels.
    session_actor submit(generate_request request, caf::actor sink);
    session_actor submit(generate_request request, RuntimeCallbacks callbacks);
    // Blocks the calling (non-actor) thread until the generation ends.
    GenerateResult generate(generate_request request);
    void cancel(const session_actor& session);

    // Blocking snapshot of the KV pools and queues.
    runtime_stats stats();
    // Requests whose session is alive.
    int32_t active_sessions() const;

    const RuntimeConfig& config() const;
    std::string model_name() const;
    const Tokenizer& tokenizer() const;
    // The target GGUF's tokenizer.chat_template ("" when it has none).
    std::string chat_template_text() const;
    int32_t n_ctx() const;
    bool has_draft_model() const;
    // The verifier's current handle (it is restarted after a failure).
    verifier_actor verifier() const;
    draft_actor drafter() const;
    // How many times the verifier was restarted.
    int32_t verifier_restarts() const;

    // Stops accepting (new requests get error "draining"), cancels running
    // ones, stops the actors. Idempotent; the destructor calls it.
    void shutdown();
    bool draining() const;

private:
    explicit Runtime(std::shared_ptr<RuntimeShared> shared);
    std::shared_ptr<RuntimeShared> shared_;
};

// A runtime with its own actor system, for applications that don't use CAF.
class StandaloneRuntime {
public:
    explicit StandaloneRuntime(const RuntimeConfig& config);
    ~StandaloneRuntime();
    Runtime& runtime() { return *runtime_; }
    caf::actor_system& system() { return *system_; }

private:
    std::unique_ptr<caf::actor_system_config> cfg_;
    std::unique_ptr<caf::actor_system> system_;
    std::unique_ptr<Runtime> runtime_;
};

}  // namespace specd
