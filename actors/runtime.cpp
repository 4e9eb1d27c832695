// The embedding API (actors/runtime.h): creating the runtime (its actors,
// in one process or as a multi-node gateway), submitting requests, stats
// and settings, shutdown. The actors live in actors/*.cpp over the state of
// actors/runtime_shared.h.
#include "actors/runtime.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include <caf/io/all.hpp>

#include "actors/runtime_shared.h"
#include "actors/session.h"
#include "engine/tokenizer.h"

namespace specd {

void register_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::specd>(); }

void configure_network(caf::actor_system_config& cfg) { cfg.load<caf::io::middleman>(); }

Runtime::Runtime(std::shared_ptr<RuntimeShared> shared) : shared_(std::move(shared)) {}

std::unique_ptr<Runtime> Runtime::create(caf::actor_system& system, const RuntimeConfig& config) {
    const bool clustered = !parse_node_list(config.target_nodes, "target_nodes").empty();
    if (clustered && !system.has_middleman())
        throw Error("a multi-node gateway needs CAF's network layer: call specd::configure_network(cfg) before creating the actor system");
    auto rt = build_shared(system, config, clustered ? Build::gateway : Build::local);
    const bool draft_nodes = !parse_node_list(config.draft_nodes, "draft_nodes").empty();
    rt->pipeline = config.pipeline_drafts == "on" || (config.pipeline_drafts == "auto" && clustered && draft_nodes);
    if (!clustered) {
        if (!rt->pipeline) rt->rendezvous = std::make_shared<PhaseRendezvous>(rt->shared_pool);
        spawn_verifier(rt);
        rt->drafter = spawn_draft(rt);
        rt->kv = spawn_kv_manager(rt);
        return std::unique_ptr<Runtime>(new Runtime(rt));
    }
    rt->clustered = true;
    // Nodes key sequences by request id, and several gateways may share
    // them: each gateway numbers its requests from a random 32-bit prefix.
    rt->next_request = (static_cast<uint64_t>(std::random_device{}()) << 32) | 1u;
    ReplicaTables listed;
    for (const NodeAddress& a : parse_node_list(config.target_nodes, "target_nodes")) cluster_add(listed, true, a);
    for (const NodeAddress& a : parse_node_list(config.draft_nodes, "draft_nodes")) cluster_add(listed, false, a);
    rt->replicas.store(std::make_shared<const ReplicaTables>(std::move(listed)));
    rt->cluster = spawn_cluster(rt);
    if (config.cluster_port >= 0) {
        auto port = system.middleman().publish(rt->cluster, static_cast<uint16_t>(config.cluster_port), config.host.c_str(), true);
        if (!port) {
            caf::anon_send_exit(rt->cluster, caf::exit_reason::user_shutdown);
            throw Error("cannot open the cluster port " + config.host + ":" + std::to_string(config.cluster_port) + ": " +
                        system.render(port.error()));
        }
        rt->cluster_port = *port;
    }
    // Give the listed nodes one health interval (at least 2 s) to connect,
    // so the first requests find them.
    const double deadline = now_ms() + std::max(2000, config.health_interval_ms);
    while (now_ms() < deadline) {
        bool all = true;
        const std::shared_ptr<const ReplicaTables> tables = rt->replicas.load();
        for (auto& r : tables->targets) all = all && (r.up || (!r.connecting && r.last_error != "not connected yet"));
        for (auto& r : tables->drafts) all = all && (r.up || (!r.connecting && r.last_error != "not connected yet"));
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::unique_ptr<Runtime>(new Runtime(rt));
}

Runtime::~Runtime() { shutdown(); }

session_actor Runtime::submit(generate_request request, caf::actor sink) {
    return spawn_session(shared_, std::move(request), EventSink{std::move(sink), nullptr});
}

session_actor Runtime::submit(generate_request request, RuntimeCallbacks callbacks) {
    return spawn_session(shared_, std::move(request),
                         EventSink{caf::actor{}, std::make_shared<const RuntimeCallbacks>(std::move(callbacks))});
}

GenerateResult Runtime::generate(generate_request request) {
    caf::scoped_actor self{*shared_->system};
    submit(std::move(request), caf::actor{self});
    GenerateResult result;
    bool running = true;
    while (running) {
        self->receive(
            [&](token_event& e) {
                ++result.token_events;
                result.tokens.insert(result.tokens.end(), e.tokens.begin(), e.tokens.end());
                result.from_draft.insert(result.from_draft.end(), e.from_draft.begin(), e.from_draft.end());
                result.text += e.text;
                for (size_t i = 0; i < e.logprobs.size(); ++i) result.logprobs.append(e.logprobs, i);
            },
            [&](done_event& e) {
                result.ok = true;
                result.done = std::move(e);
                running = false;
            },
            [&](error_event& e) {
                result.error = std::move(e);
                running = false;
            });
    }
    return result;
}

void Runtime::cancel(const session_actor& session) {
    if (session) caf::anon_send(session, cancel_atom::value);
}

runtime_stats Runtime::stats() {
    runtime_stats out;
    if (shared_->clustered) {
        // The targets' figures from their last health check, summed.
        const std::shared_ptr<const ReplicaTables> tables = shared_->replicas.load();
        for (const auto& r : tables->targets) {
            if (!r.up) continue;
            out.kv_target_blocks += r.kv_blocks;
            out.kv_target_free += r.kv_free;
            out.running += r.load->sessions;
            out.waiting += r.waiting;
        }
        return out;
    }
    caf::scoped_actor self{*shared_->system};
    self->request(shared_->kv, std::chrono::seconds(10), stats_atom::value)
        .receive([&](runtime_stats& s) { out = s; }, [&](caf::error&) {});
    return out;
}

int32_t Runtime::active_sessions() const { return shared_->active; }
std::vector<gpu::GpuDeviceStats> Runtime::gpu_stats() const {
    return shared_->backends ? shared_->backends->gpu_stats() : std::vector<gpu::GpuDeviceStats>{};
}
const RuntimeConfig& Runtime::config() const { return shared_->config; }
std::string Runtime::model_name() const { return shared_->config.effective_model_name(); }
const Tokenizer& Runtime::tokenizer() const { return shared_->target->tokenizer(); }
std::string Runtime::chat_template_text() const {
    return shared_->target->file().get_string_opt("tokenizer.chat_template").value_or("");
}
ChatTemplate Runtime::chat_template() const { return ChatTemplate::from_gguf_template(chat_template_text()); }
int32_t Runtime::n_ctx() const { return shared_->n_ctx; }
bool Runtime::has_draft_model() const {
    return shared_->draft != nullptr || !shared_->replicas.load()->drafts.empty();
}

std::vector<NodeStatus> Runtime::cluster() const {
    std::vector<NodeStatus> out;
    const std::shared_ptr<const ReplicaTables> tables = shared_->replicas.load();
    for (const auto& r : tables->targets)
        out.push_back(NodeStatus{r.address, node_role_name(NodeRole::target), r.up, r.load->sessions, r.load->served, r.kv_free, r.kv_blocks,
                                 r.waiting, r.joins, r.last_error});
    for (const auto& r : tables->drafts)
        out.push_back(NodeStatus{r.address, node_role_name(NodeRole::draft), r.up, r.load->sessions, r.load->served, 0, 0, 0, r.joins,
                                 r.last_error});
    return out;
}

uint16_t Runtime::cluster_port() const { return shared_->cluster_port; }
verifier_actor Runtime::verifier() const { return shared_->current_verifier(); }
draft_actor Runtime::drafter() const { return shared_->current_drafter(); }
int32_t Runtime::verifier_restarts() const { return shared_->verifier_restarts; }
bool Runtime::draining() const { return shared_->draining; }
const std::string& Runtime::draft_load_error() const { return shared_->draft_load_error; }

void Runtime::set_speculation(const SpeculationSettings& s) {
    if (s.draft_max < 0 || s.draft_max > kMaxDraftTokens)
        throw Error("draft_max must be in 0.." + std::to_string(kMaxDraftTokens) + ", got " + std::to_string(s.draft_max));
    shared_->speculation.store(std::make_shared<const SpeculationSettings>(s));
}

SpeculationSettings Runtime::speculation() const {
    return *shared_->speculation.load();
}

void Runtime::shutdown() {
    if (shared_->stopping.exchange(true)) return;
    shared_->draining = true;
    std::vector<caf::strong_actor_ptr> sessions;
    {
        std::lock_guard<std::mutex> lock(shared_->sessions_mu);
        sessions.assign(shared_->sessions.begin(), shared_->sessions.end());
    }
    for (auto& s : sessions) caf::anon_send(caf::actor_cast<session_actor>(s), cancel_atom::value);
    caf::scoped_actor self{*shared_->system};
    // Sessions end at once on cancel (they flush a done event); wait a little for them.
    for (auto& s : sessions) {
        auto h = caf::actor_cast<caf::actor>(s);
        self->monitor(h);
    }
    size_t remaining = sessions.size();
    while (remaining > 0) {
        bool timed_out = false;
        self->receive([&](caf::down_msg&) { --remaining; },
                      caf::after(std::chrono::seconds(5)) >> [&] { timed_out = true; });
        if (timed_out) break;
    }
    stop_actors(*shared_, self);
}

StandaloneRuntime::StandaloneRuntime(const RuntimeConfig& config) {
    cfg_ = std::make_unique<caf::actor_system_config>();
    register_types(*cfg_);
    configure_low_latency(*cfg_);
    if (!config.target_nodes.empty()) configure_network(*cfg_);
    system_ = std::make_unique<caf::actor_system>(*cfg_);
    runtime_ = Runtime::create(*system_, config);
}

StandaloneRuntime::~StandaloneRuntime() {
    runtime_.reset();
}

}  // namespace specd
