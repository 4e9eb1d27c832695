// The gateway's cluster actor (membership and health checks of the target
// and draft nodes) and placement over the replica tables it keeps
// (actors/placement.h).
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <caf/io/all.hpp>

#include "actors/placement.h"
#include "actors/runtime_shared.h"
#include "config/log.h"

namespace specd {

// ------------------------------------------------------- placement ---

bool place_target(RuntimeShared& rt, Placement& p, int32_t exclude) {
    if (!rt.clustered) {
        p.target = -1;
        p.verifier = rt.current_verifier();
        p.kv = rt.kv;
        return true;
    }
    const std::shared_ptr<const ReplicaTables> tables = rt.replicas.load();
    std::lock_guard<std::mutex> lock(rt.placement_mu);
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(tables->targets.size()); ++i) {
        const TargetReplica& t = tables->targets[static_cast<size_t>(i)];
        if (!t.up || i == exclude) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const TargetReplica& b = tables->targets[static_cast<size_t>(best)];
        const int32_t load = t.load->sessions + t.waiting, best_load = b.load->sessions + b.waiting;
        if (load < best_load || (load == best_load && t.kv_free > b.kv_free)) best = i;
    }
    if (best < 0) return false;
    const TargetReplica& t = tables->targets[static_cast<size_t>(best)];
    ++t.load->sessions;
    ++t.load->served;
    p.target = best;
    p.target_load = t.load;
    p.verifier = t.verifier;
    p.kv = t.kv;
    p.target_address = t.address;
    return true;
}

void place_draft(RuntimeShared& rt, Placement& p) {
    if (!rt.clustered) {
        p.drafter = rt.current_drafter();
        return;
    }
    const std::shared_ptr<const ReplicaTables> tables = rt.replicas.load();
    std::lock_guard<std::mutex> lock(rt.placement_mu);
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(tables->drafts.size()); ++i) {
        const DraftReplica& d = tables->drafts[static_cast<size_t>(i)];
        if (d.up && (best < 0 || d.load->sessions < tables->drafts[static_cast<size_t>(best)].load->sessions)) best = i;
    }
    if (best < 0) return;
    const DraftReplica& d = tables->drafts[static_cast<size_t>(best)];
    ++d.load->sessions;
    ++d.load->served;
    p.draft = best;
    p.draft_load = d.load;
    p.drafter = d.drafter;
    p.remote = true;
    p.draft_address = d.address;
}

void unplace_target(RuntimeShared& rt, Placement& p) {
    std::lock_guard<std::mutex> lock(rt.placement_mu);
    if (p.target_load) --p.target_load->sessions;
    p.target_load.reset();
    p.target = -1;
    p.verifier = verifier_actor{};
    p.kv = kv_manager_actor{};
}

void unplace_draft(RuntimeShared& rt, Placement& p) {
    std::lock_guard<std::mutex> lock(rt.placement_mu);
    if (p.draft_load) --p.draft_load->sessions;
    p.draft_load.reset();
    p.draft = -1;
    p.drafter = draft_actor{};
}

// -------------------------------------------------------- cluster ---
// The gateway's membership and health checks. Each tick it connects to the
// nodes that are down (a restarted node rejoins this way), and asks the up
// ones for a health answer within node_timeout_ms (a target's KV stats,
// which also feed placement). A node is down on a down message of any of
// its actors (CAF sees the connection close), a failed check, or an
// unanswered one (cut off).

namespace {

struct cluster_state {
    ReplicaTables tables;  // the actor's own copy: it alone writes them
    static inline const char* name = "specd.cluster";
};
using cluster_ptr = cluster_actor::stateful_pointer<cluster_state>;

// After each change: sessions and the API see the tables as of now.
void publish(cluster_ptr self, RuntimeShared& rt) {
    rt.replicas.store(std::make_shared<const ReplicaTables>(self->state.tables));
}

template <class Replica>
void mark_down(Replica& r, NodeRole role, const std::string& why) {
    if (r.up) log::warn("node down", {{"node", r.address}, {"role", node_role_name(role)}, {"error", why}});
    r.up = false;
    r.last_error = why;
}

void cluster_connect(cluster_ptr self, const std::shared_ptr<RuntimeShared>& rt, bool target, size_t index) {
    NodeAddress where;
    ReplicaTables& tables = self->state.tables;
    if (target) {
        auto& r = tables.targets[index];
        if (r.up || r.connecting) return;
        r.connecting = true;
        where = r.address_parts;
    } else {
        auto& r = tables.drafts[index];
        if (r.up || r.connecting) return;
        r.connecting = true;
        where = r.address_parts;
    }
    publish(self, *rt);
    const auto timeout = std::chrono::milliseconds(rt->config.node_timeout_ms);
    auto failed = [self, rt, target, index](const std::string& why) {
        ReplicaTables& tables = self->state.tables;
        if (target) {
            auto& r = tables.targets[index];
            r.connecting = false;
            if (r.last_error != why) log::debug("node unreachable", {{"node", r.address}, {"error", why}});
            mark_down(r, NodeRole::target, why);
        } else {
            auto& r = tables.drafts[index];
            r.connecting = false;
            mark_down(r, NodeRole::draft, why);
        }
        publish(self, *rt);
    };
    auto mm = self->system().middleman().actor_handle();
    self->request(mm, timeout, caf::connect_atom::value, where.host, where.port)
        .then(
            [self, rt, target, index, failed, timeout](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
                if (!ptr) return failed("no actor is published there");
                auto node = caf::actor_cast<node_actor>(ptr);
                self->request(node, timeout, hello_atom::value)
                    .then(
                        [self, rt, target, index, failed, node](node_hello& h) {
                            const NodeRole want = target ? NodeRole::target : NodeRole::draft;
                            if (node_role_from_name(h.role) != want)
                                return failed("it is a " + h.role + " node, listed as a " + node_role_name(want) + " node");
                            const int32_t n_vocab = rt->target->tokenizer().n_vocab();
                            if (h.n_vocab != n_vocab)
                                return failed("its model " + h.model + " has " + std::to_string(h.n_vocab) + " tokens; the gateway's has " +
                                              std::to_string(n_vocab));
                            if (target && (!h.verifier || !h.kv)) return failed("it sent no verifier / KV manager");
                            if (!target && !h.drafter) return failed("it sent no draft actor");
                            ReplicaTables& tables = self->state.tables;
                            if (target) {
                                auto& r = tables.targets[index];
                                r.node = node;
                                r.verifier = caf::actor_cast<verifier_actor>(h.verifier);
                                r.kv = caf::actor_cast<kv_manager_actor>(h.kv);
                                r.connecting = false;
                                r.up = true;
                                r.last_error.clear();
                                ++r.joins;
                                self->monitor(r.verifier);
                                self->monitor(r.kv);
                                log::info("node up", {{"node", r.address}, {"role", "target"}, {"model", h.model}, {"n_ctx", h.n_ctx}});
                            } else {
                                auto& r = tables.drafts[index];
                                r.node = node;
                                r.drafter = caf::actor_cast<draft_actor>(h.drafter);
                                r.connecting = false;
                                r.up = true;
                                r.last_error.clear();
                                ++r.joins;
                                self->monitor(r.drafter);
                                log::info("node up", {{"node", r.address}, {"role", "draft"}, {"model", h.model}});
                            }
                            self->monitor(node);
                            publish(self, *rt);
                        },
                        [self, failed](caf::error& e) { failed("no answer to hello: " + self->system().render(e)); });
            },
            [self, failed](caf::error& e) { failed(self->system().render(e)); });
}

void cluster_check(cluster_ptr self, const std::shared_ptr<RuntimeShared>& rt) {
    const auto timeout = std::chrono::milliseconds(rt->config.node_timeout_ms);
    std::vector<std::pair<size_t, kv_manager_actor>> targets;
    std::vector<std::pair<size_t, node_actor>> drafts;
    const ReplicaTables& tables = self->state.tables;
    const size_t n_targets = tables.targets.size(), n_drafts = tables.drafts.size();
    for (size_t i = 0; i < n_targets; ++i)
        if (tables.targets[i].up) targets.emplace_back(i, tables.targets[i].kv);
    for (size_t i = 0; i < n_drafts; ++i)
        if (tables.drafts[i].up) drafts.emplace_back(i, tables.drafts[i].node);
    for (size_t i = 0; i < n_targets; ++i) cluster_connect(self, rt, true, i);
    for (size_t i = 0; i < n_drafts; ++i) cluster_connect(self, rt, false, i);
    for (auto& [i, kv] : targets) {
        self->request(kv, timeout, stats_atom::value)
            .then(
                [self, rt, i = i](runtime_stats& st) {
                    auto& r = self->state.tables.targets[i];
                    r.kv_free = st.kv_target_free;
                    r.kv_blocks = st.kv_target_blocks;
                    r.waiting = st.waiting;
                    publish(self, *rt);
                },
                [self, rt, i = i](caf::error& e) {
                    mark_down(self->state.tables.targets[i], NodeRole::target, "health check: " + self->system().render(e));
                    publish(self, *rt);
                });
    }
    for (auto& [i, node] : drafts) {
        self->request(node, timeout, hello_atom::value)
            .then([](node_hello&) {},
                  [self, rt, i = i](caf::error& e) {
                      mark_down(self->state.tables.drafts[i], NodeRole::draft, "health check: " + self->system().render(e));
                      publish(self, *rt);
                  });
    }
}

cluster_actor::behavior_type cluster_fun(cluster_ptr self, std::shared_ptr<RuntimeShared> rt) {
    self->state.tables = *rt->replicas.load();
    self->set_down_handler([self, rt](caf::down_msg& dm) {
        const std::string why = "connection lost: " + self->system().render(dm.reason);
        for (auto& r : self->state.tables.targets)
            if (r.up && (dm.source == r.verifier.address() || dm.source == r.kv.address() || dm.source == r.node.address()))
                mark_down(r, NodeRole::target, why);
        for (auto& r : self->state.tables.drafts)
            if (r.up && (dm.source == r.drafter.address() || dm.source == r.node.address())) mark_down(r, NodeRole::draft, why);
        publish(self, *rt);
    });
    self->send(self, tick_atom::value);
    return {
        [self, rt](tick_atom) {
            if (rt->stopping) return;
            cluster_check(self, rt);
            self->delayed_send(self, std::chrono::milliseconds(rt->config.health_interval_ms), tick_atom::value);
        },
        [self, rt](join_atom, const std::string& role, const std::string& host, uint16_t port) {
            const std::optional<NodeRole> as = node_role_from_name(role);
            if (!as) return;
            log::info("node asks to join", {{"node", host + ":" + std::to_string(port)}, {"role", role}});
            cluster_add(self->state.tables, *as == NodeRole::target, NodeAddress{host, port});
            publish(self, *rt);
            cluster_check(self, rt);
        },
    };
}

}  // namespace

namespace {
template <class Replica>
void add_replica(std::vector<Replica>& replicas, const NodeAddress& a) {
    for (auto& r : replicas)
        if (r.address == a.text()) return;
    Replica r;
    r.address_parts = a;
    r.address = a.text();
    r.last_error = "not connected yet";
    replicas.push_back(std::move(r));
}
}  // namespace

void cluster_add(ReplicaTables& tables, bool target, const NodeAddress& a) {
    if (target) add_replica(tables.targets, a);
    else add_replica(tables.drafts, a);
}

cluster_actor spawn_cluster(const std::shared_ptr<RuntimeShared>& rt) { return rt->system->spawn(cluster_fun, rt); }

}  // namespace specd
