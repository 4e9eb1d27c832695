// A `specd node`'s published actor (it names the node's verifier and KV
// manager, or its draft actor, to a gateway) and the Node API (actors/node.h).
#include "actors/node.h"

#include <caf/io/all.hpp>

#include "actors/runtime_shared.h"

namespace specd {

namespace {

node_actor::behavior_type node_fun(node_actor::pointer, std::shared_ptr<RuntimeShared> rt) {
    return {
        [rt](hello_atom) -> node_hello {
            node_hello h;
            h.role = node_role_name(rt->node_role);
            h.model = rt->config.effective_model_name();
            const LlamaModel& m = rt->target ? *rt->target : *rt->draft;
            h.n_vocab = m.tokenizer().n_vocab();
            h.n_ctx = rt->n_ctx;
            if (auto v = rt->current_verifier()) h.verifier = caf::actor_cast<caf::actor>(v);
            if (rt->kv) h.kv = caf::actor_cast<caf::actor>(rt->kv);
            if (auto d = rt->current_drafter()) h.drafter = caf::actor_cast<caf::actor>(d);
            return h;
        },
    };
}

}  // namespace

node_actor spawn_node(const std::shared_ptr<RuntimeShared>& rt) { return rt->system->spawn(node_fun, rt); }

std::unique_ptr<Node> Node::start(caf::actor_system& system, const RuntimeConfig& config, NodeRole role, const std::string& host,
                                  uint16_t port) {
    if (!system.has_middleman())
        throw Error("a node needs CAF's network layer: call specd::configure_network(cfg) before creating the actor system");
    auto rt = build_shared(system, config, role == NodeRole::target ? Build::target_node : Build::draft_node);
    rt->node_role = role;
    if (role == NodeRole::target) {
        spawn_verifier(rt);
        rt->kv = spawn_kv_manager(rt);
    } else {
        rt->drafter = spawn_draft(rt);
    }
    std::unique_ptr<Node> node(new Node());
    node->shared_ = rt;
    node->system_ = &system;
    node->host_ = host;
    node->role_ = role;
    node->node_ = caf::actor_cast<caf::actor>(spawn_node(rt));
    auto bound = system.middleman().publish(node->node_, port, host.c_str(), true);
    if (!bound) {
        const std::string why = system.render(bound.error());
        node->stop();
        throw Error("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
    }
    node->port_ = *bound;
    return node;
}

Node::~Node() { stop(); }

void Node::join(const std::string& gateway_host, uint16_t gateway_port, const std::string& advertised_host) {
    auto gateway = system_->middleman().remote_actor<cluster_actor>(gateway_host, gateway_port);
    if (!gateway)
        throw Error("cannot reach the gateway's cluster port " + gateway_host + ":" + std::to_string(gateway_port) + ": " +
                    system_->render(gateway.error()));
    caf::anon_send(*gateway, join_atom::value, std::string(node_role_name(shared_->node_role)), advertised_host, port_);
}

void Node::stop() {
    if (stopped_) return;
    stopped_ = true;
    shared_->stopping = true;
    if (port_ != 0) (void)system_->middleman().unpublish(node_, port_);
    caf::scoped_actor self{*system_};
    self->send_exit(node_, caf::exit_reason::user_shutdown);
    stop_actors(*shared_, self);
}

}  // namespace specd
