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
#include "engine/chat_template.h"  // ChatTemplate, ChatMessage: chat_template()
#include "engine/tokenizer.h"      // Tokenizer: tokenizer() (llama-server's /tokenize, embedders)
#include "gpu/gpu_metrics.h"

namespace specd {

class Tokenizer;

// Registers specd's message types; call on the config before constructing
// the actor_system.
void register_types(caf::actor_system_config& cfg);

// Loads CAF's network layer (io::middleman); needed before creating a
// system that runs a multi-node gateway (config.target_nodes) or a Node.
void configure_network(caf::actor_system_config& cfg);

// Recommended scheduler settings for a host system: CAF's default
// work-stealing workers back off to 10 ms sleeps when idle, which puts up to
// 10 ms on every hop of a token's propose → verify → emit cycle. This loads
// specd's work-sharing scheduler instead (CAF's "sharing" policy, except
// that one worker is woken at a time, after the queue's lock is released),
// which wakes a worker at once without costing the compute threads extra
// wake-ups. StandaloneRuntime applies it; a host that loads its own
// scheduler module after this call replaces it.
void configure_low_latency(caf::actor_system_config& cfg);

// Called on the session actor's CAF worker thread, in order, right after
// the session has sent its next step (so a slow callback delays that
// request's next tokens, never the model). They must not block for long.
// An exception from one is logged and the generation goes on.
struct RuntimeCallbacks {
    std::function<void(const token_event&)> on_token;
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
    TokenLogprobs logprobs;            // (tokens) when request.sampling.logprobs >= 0
};

// The speculation defaults for requests that don't set their own; a
// request's own "speculative" settings always win.
struct SpeculationSettings {
    bool enabled = true;    // speculate (config: ENABLE_SPECULATIVE_DECODING)
    int32_t draft_max = 8;  // tokens drafted per step at most, 0..kMaxDraftTokens (MAX_DRAFT_TOKENS)
    bool adaptive = true;   // per-request draft length from measured acceptance
};

struct RuntimeShared;  // internal

// One target or draft node as the gateway sees it (Runtime::cluster()).
struct NodeStatus {
    std::string address;               // host:port as listed or joined
    std::string role;                  // "target" or "draft"
    bool up = false;                   // connected and answering health checks
    int32_t sessions = 0;              // requests this gateway runs on it now
    int64_t served = 0;                // requests placed on it so far
    int32_t kv_free = 0;               // target: free KV blocks at the last health check
    int32_t kv_blocks = 0;
    int32_t waiting = 0;               // target: requests queued for KV blocks there
    int32_t joins = 0;                 // times it (re)joined
    std::string last_error;            // why it is down ("" when up)
};

class Runtime {
public:
    // With config.target_nodes the runtime is a gateway: it loads only the
    // target's tokenizer and metadata (config.target_model) and runs each
    // request's session here against remote verifier / KV-manager / draft
    // actors of `specd node` processes (the system needs configure_network).
    //
    // Checks and loads the models named by `config` and spawns the
    // runtime's actors in `system`. specd::Error on a bad config or target
    // file (truncated, sha256 mismatch: see engine/model_integrity.h). A
    // draft that fails the same checks or doesn't match the target's
    // vocabulary is an error only with config.require_draft; otherwise the
    // runtime starts without it, speculation off, and draft_load_error()
    // says why.
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
    // Memory and utilisation of the GPU the models run on (one entry per
    // device in use); empty on the CPU. Asks the driver on each call.
    std::vector<gpu::GpuDeviceStats> gpu_stats() const;
    // Requests whose session is alive.
    int32_t active_sessions() const;

    const RuntimeConfig& config() const;
    std::string model_name() const;
    const Tokenizer& tokenizer() const;
    // The target GGUF's tokenizer.chat_template ("" when it has none).
    std::string chat_template_text() const;
    // That template as the engine renders it (llama.cpp's detection; the
    // plain transcript when it is not recognised or absent). Rendering chat
    // messages into a prompt is the front end's step (as llama-server and
    // vLLM's OpenAI layer do it), with the model's template from here.
    ChatTemplate chat_template() const;
    int32_t n_ctx() const;
    bool has_draft_model() const;
    // The verifier's current handle (it is restarted after a failure).
    verifier_actor verifier() const;
    draft_actor drafter() const;
    // Gateway: the nodes and their state (empty in one process).
    std::vector<NodeStatus> cluster() const;
    // Gateway: the CAF port nodes --join (0 when none).
    uint16_t cluster_port() const;
    // How many times the verifier was restarted.
    int32_t verifier_restarts() const;

    // Why the configured draft model is not loaded ("" when it is, or none was configured).
    const std::string& draft_load_error() const;
    // Switches the defaults for new requests at run time (running ones keep
    // theirs); specd::Error for a draft_max outside 0..kMaxDraftTokens.
    void set_speculation(const SpeculationSettings& settings);
    SpeculationSettings speculation() const;

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
