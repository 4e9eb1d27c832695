// The state the runtime's actors share (RuntimeShared: the models, the
// compute pools, the long-lived actors' handles, the speculation defaults,
// the gateway's replica tables), how a process builds it, and how each
// actor is spawned over it. Internal: actors/*.cpp only.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <caf/all.hpp>

#include "actors/backend_factory.h"
#include "actors/interfaces.h"
#include "actors/node.h"
#include "actors/runtime.h"
#include "config/runtime_config.h"
#include "engine/backend.h"
#include "engine/model.h"
#include "engine/phase_rendezvous.h"
#include "engine/session_core.h"
#include "engine/thread_pool.h"

namespace specd {

// How many of this gateway's sessions run on a replica: changed by the
// sessions as they place themselves (under RuntimeShared::placement_mu),
// shared by every snapshot of the tables.
struct ReplicaLoad {
    std::atomic<int32_t> sessions{0};     // this gateway's requests on it
    std::atomic<int64_t> served{0};       // requests placed on it so far
};

// A target node as the gateway sees it.
struct TargetReplica {
    NodeAddress address_parts;
    std::string address;                  // host:port
    node_actor node;                      // the published actor (health checks)
    verifier_actor verifier;              // valid while up
    kv_manager_actor kv;
    bool up = false;
    bool connecting = false;              // a connect is in flight
    int32_t kv_free = 0, kv_blocks = 0, waiting = 0;   // from its last health check
    int32_t joins = 0;
    std::string last_error;
    std::shared_ptr<ReplicaLoad> load = std::make_shared<ReplicaLoad>();
};

struct DraftReplica {
    NodeAddress address_parts;
    std::string address;
    node_actor node;
    draft_actor drafter;
    bool up = false;
    bool connecting = false;
    int32_t joins = 0;
    std::string last_error;
    std::shared_ptr<ReplicaLoad> load = std::make_shared<ReplicaLoad>();
};

// The gateway's node tables. Only the cluster actor writes them (its own
// copy); after each change it publishes a fresh immutable snapshot
// (RuntimeShared::replicas) that sessions and the API read without a lock.
// Replicas are only ever appended, so an index stays valid across snapshots.
struct ReplicaTables {
    std::vector<TargetReplica> targets;
    std::vector<DraftReplica> drafts;
};

struct RuntimeShared {
    RuntimeConfig config;
    std::unique_ptr<LlamaModel> target;
    std::unique_ptr<LlamaModel> draft;
    std::unique_ptr<ThreadPool> target_pool;
    std::unique_ptr<ThreadPool> draft_pool;
    std::unique_ptr<BackendFactory> backends;  // CPU or CUDA forward passes (--device)
    int32_t n_ctx = 0;
    KvCacheShape target_shape, draft_shape;
    caf::actor_system* system = nullptr;

    // The long-lived actors. The draft actor and the KV manager are spawned
    // before any session and never replaced: read without a lock. The
    // verifier is respawned after a failure (spawn_verifier): each one is
    // published as an immutable snapshot (current_verifier()).
    draft_actor drafter;
    kv_manager_actor kv;
    std::atomic<bool> draining{false};
    std::atomic<bool> stopping{false};
    std::atomic<uint64_t> next_request{1};
    std::atomic<int32_t> active{0};
    std::atomic<int32_t> verifier_restarts{0};
    // The live sessions, for shutdown to cancel: added by spawn_session on
    // the submitter's thread, removed as each session ends on its own.
    std::mutex sessions_mu;
    std::unordered_set<caf::strong_actor_ptr> sessions;
    // The defaults for requests that don't say, switchable while serving
    // (Runtime::set_speculation): one snapshot, so a session never sees
    // half of a change. They start as the config's.
    std::atomic<std::shared_ptr<const SpeculationSettings>> speculation{std::make_shared<const SpeculationSettings>()};
    std::string draft_load_error;  // set once in create(): why the configured draft is not loaded
    // The draft-length controller of the last session that finished
    // speculating, as a snapshot: new sessions start from it
    // (SessionCore::seed_controller); null until one finished.
    std::atomic<std::shared_ptr<const DraftLengthController>> learned_controller;
    // The verifier's single-request steps, for the load policy's measured budget.
    StepCostProbe step_probe;
    // Multi-node. A gateway (clustered) has no local compute actors: its
    // sessions use the replicas' remote actors.
    bool clustered = false;
    bool pipeline = false;         // sessions draft step t+1 while step t verifies
    bool shared_pool = false;      // the draft runs on the target's thread pool (the phases take turns)
    // Holds each compute actor's step until the sessions the last verifier
    // step answered are back (engine/phase_rendezvous.h); null: no holding
    // (multi-node, pipelined drafts).
    std::shared_ptr<PhaseRendezvous> rendezvous;
    // The latest snapshot of the gateway's node tables (empty in one process).
    std::atomic<std::shared_ptr<const ReplicaTables>> replicas{std::make_shared<const ReplicaTables>()};
    // Serialises placement (choose a replica, count the session on it), so
    // concurrent arrivals spread at once.
    std::mutex placement_mu;
    cluster_actor cluster;
    uint16_t cluster_port = 0;
    NodeRole node_role = NodeRole::target;  // a `specd node`: which one

    verifier_actor current_verifier() const {
        const std::shared_ptr<const verifier_actor> v = verifier_.load();
        return v ? *v : verifier_actor{};
    }
    void publish_verifier(verifier_actor v) { verifier_.store(std::make_shared<const verifier_actor>(std::move(v))); }
    draft_actor current_drafter() const { return drafter; }

private:
    std::atomic<std::shared_ptr<const verifier_actor>> verifier_;
};

// What a process runs: everything (one process), a gateway (sessions only;
// it loads the target file for its tokenizer), or one node role.
enum class Build { local, gateway, target_node, draft_node };

// Loads the models this build needs and sizes their thread pools and KV
// pools (actors/capacity_plan.h); spawns nothing.
std::shared_ptr<RuntimeShared> build_shared(caf::actor_system& system, const RuntimeConfig& config, Build build);

// Stops whichever of the runtime's long-lived actors this process has.
void stop_actors(RuntimeShared& rt, caf::scoped_actor& self);

// Spawns the verifier (detached: its own thread), publishes it
// (RuntimeShared::publish_verifier), and
// again whenever it dies of a failure (actors/verifier.cpp).
void spawn_verifier(const std::shared_ptr<RuntimeShared>& rt);
// The draft actor (detached), over the draft model or the n-gram lookup (actors/draft.cpp).
draft_actor spawn_draft(const std::shared_ptr<RuntimeShared>& rt);
// The KV manager: admission over both pools (actors/kv_manager.cpp).
kv_manager_actor spawn_kv_manager(const std::shared_ptr<RuntimeShared>& rt);
// The gateway's membership and health checks (actors/cluster.cpp); it
// starts from the published tables (rt->replicas).
cluster_actor spawn_cluster(const std::shared_ptr<RuntimeShared>& rt);
// Adds a node to a copy of the gateway's tables (idempotent per address);
// the cluster actor connects it on its next check.
void cluster_add(ReplicaTables& tables, bool target, const NodeAddress& a);
// What a `specd node` publishes (actors/node.cpp).
node_actor spawn_node(const std::shared_ptr<RuntimeShared>& rt);

}  // namespace specd
