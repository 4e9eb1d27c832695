// A `specd node`: one role of the runtime (the target's verifier and KV
// manager, or the draft actor) published through CAF's middleman for a
// gateway (`specd serve --target-nodes/--draft-nodes`) to use with the same
// messages as in one process.
//
//   caf::actor_system_config cfg;
//   specd::register_types(cfg);
//   specd::configure_network(cfg);
//   caf::actor_system sys{cfg};
//   auto node = specd::Node::start(sys, config, specd::NodeRole::target, "127.0.0.1", 0);
//   node->port();          // where it listens (0 picked a free one)
//   node->join("gw", 7000) // optional: ask a gateway's cluster port to add it
//   node.reset();          // unpublishes and stops its actors
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <caf/all.hpp>

#include "config/runtime_config.h"

namespace specd {

enum class NodeRole { target, draft };

// The name a role travels under between processes (node_hello::role, the
// join message) and in NodeStatus::role.
constexpr const char* node_role_name(NodeRole role) { return role == NodeRole::target ? "target" : "draft"; }
// The role a name stands for; nullopt for any other name.
inline std::optional<NodeRole> node_role_from_name(std::string_view name) {
    if (name == "target") return NodeRole::target;
    if (name == "draft") return NodeRole::draft;
    return std::nullopt;
}

struct RuntimeShared;  // internal

class Node {
public:
    // Loads config.target_model (the model this node serves: the target, or
    // for the draft role the draft) and publishes the node actor on
    // host:port. specd::Error on a bad model or a port that can't be bound.
    static std::unique_ptr<Node> start(caf::actor_system& system, const RuntimeConfig& config, NodeRole role, const std::string& host,
                                       uint16_t port);
    ~Node();
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;

    uint16_t port() const { return port_; }
    const std::string& host() const { return host_; }
    NodeRole role() const { return role_; }
    // Asks the gateway whose cluster port is gateway_host:gateway_port to
    // add this node (announcing `advertised_host`:port()); specd::Error when
    // the gateway can't be reached.
    void join(const std::string& gateway_host, uint16_t gateway_port, const std::string& advertised_host);
    // Unpublishes and stops the actors; idempotent.
    void stop();

private:
    Node() = default;
    std::shared_ptr<RuntimeShared> shared_;
    caf::actor_system* system_ = nullptr;
    caf::actor node_;
    std::string host_;
    uint16_t port_ = 0;
    NodeRole role_ = NodeRole::target;
    bool stopped_ = false;
};

}  // namespace specd
