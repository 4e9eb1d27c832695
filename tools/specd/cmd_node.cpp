// `specd node --role target|draft -m MODEL --listen HOST:PORT [--join GW]`:
// one role of the runtime published through CAF's middleman for a gateway
// (`specd serve --target-nodes … --draft-nodes …`). Runs until SIGTERM or
// SIGINT. `specd delay-proxy`: a TCP relay that adds a fixed delay each way
// (an emulated round trip on loopback, for benchmarks and tests).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "actors/node.h"
#include "actors/runtime.h"
#include "config/log.h"
#include "engine/error.h"
#include "engine/generate.h"
#include "net/delay_proxy.h"
#include "tools/specd/commands.h"
#include "tools/specd/config_flags.h"

namespace specd::cli {

namespace {

std::atomic<int> g_node_stop{0};
void on_node_signal(int) { ++g_node_stop; }

struct NodeFlags {
    ConfigFlags config;
    std::string role = "target";
    std::string listen = "127.0.0.1:0";
    std::string join;
    std::string advertise;
};

NodeAddress parse_one(const std::string& text, const char* flag, bool allow_port_zero) {
    // "host:0" is allowed for --listen (any free port); parse_node_list wants 1..65535.
    if (allow_port_zero && text.size() > 2 && text.compare(text.size() - 2, 2, ":0") == 0)
        return NodeAddress{text.substr(0, text.size() - 2), 0};
    auto list = parse_node_list(text, flag);
    if (list.size() != 1) throw Error(std::string(flag) + ": want one host:port, got \"" + text + "\"");
    return list.front();
}

void run_node(const NodeFlags& f) {
    if (f.role != "target" && f.role != "draft") throw Error("--role must be target or draft, got \"" + f.role + "\"");
    RuntimeConfig rc = load_config(f.config).finish();
    log::configure(rc.log_level, rc.log_format);
    const NodeAddress listen = parse_one(f.listen, "--listen", true);
    const NodeRole role = f.role == "target" ? NodeRole::target : NodeRole::draft;

    caf::actor_system_config cfg;
    register_types(cfg);
    configure_low_latency(cfg);
    configure_network(cfg);
    caf::actor_system system{cfg};
    std::unique_ptr<Node> node = Node::start(system, rc, role, listen.host, listen.port);
    std::signal(SIGINT, on_node_signal);
    std::signal(SIGTERM, on_node_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::printf("specd: node %s (%s) listening at %s:%u\n", f.role.c_str(), rc.effective_model_name().c_str(), listen.host.c_str(),
                node->port());
    std::fflush(stdout);
    log::info("node listening", {{"role", f.role}, {"model", rc.target_model}, {"port", node->port()}});

    // --join: ask the gateway to add this node, retrying until it answers
    // (the gateway may start later).
    bool joined = f.join.empty();
    NodeAddress gateway;
    if (!joined) gateway = parse_one(f.join, "--join", false);
    const std::string advertised = !f.advertise.empty() ? f.advertise : listen.host;
    double next_try = 0.0;
    while (g_node_stop == 0) {
        if (!joined && now_ms() >= next_try) {
            try {
                node->join(gateway.host, gateway.port, advertised);
                joined = true;
                log::info("joined gateway", {{"gateway", gateway.text()}});
            } catch (const Error& e) {
                log::warn("join failed; retrying", {{"gateway", gateway.text()}, {"error", e.what()}});
                next_try = now_ms() + 1000.0;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    log::info("node stopping", {{"role", f.role}});
    node.reset();  // unpublish and stop the actors, or the process would never exit
}

void run_delay_proxy(const std::string& listen_text, const std::string& to_text, double rtt_ms) {
    if (rtt_ms < 0.0 || rtt_ms > 10000.0) throw Error("--rtt-ms must be in 0..10000");
    const NodeAddress listen = parse_one(listen_text, "--listen", true);
    const NodeAddress to = parse_one(to_text, "--to", false);
    net::DelayProxy proxy(net::DelayProxyOptions{listen.host, listen.port, to.host, to.port, rtt_ms / 2.0});
    const uint16_t port = proxy.start();
    std::signal(SIGINT, on_node_signal);
    std::signal(SIGTERM, on_node_signal);
    std::printf("specd: delay proxy listening at %s:%u → %s, round trip +%.3f ms\n", listen.host.c_str(), port, to.text().c_str(), rtt_ms);
    std::fflush(stdout);
    while (g_node_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    proxy.stop();
}

}  // namespace

void register_node_command(CLI::App& app) {
    {
        auto listen = std::make_shared<std::string>("127.0.0.1:0");
        auto to = std::make_shared<std::string>();
        auto rtt = std::make_shared<double>(1.0);
        CLI::App* p = app.add_subcommand("delay-proxy", "TCP relay adding RTT/2 each way (emulated network latency on loopback)");
        p->add_option("--listen", *listen, "HOST:PORT to listen on (port 0: any, printed)");
        p->add_option("--to", *to, "upstream HOST:PORT (an IP address)")->required();
        p->add_option("--rtt-ms", *rtt, "added round-trip time in ms");
        p->callback([listen, to, rtt] { run_delay_proxy(*listen, *to, *rtt); });
    }
    auto flags = std::make_shared<NodeFlags>();
    CLI::App* n = app.add_subcommand("node", "serve one role (target verifier or draft) to a gateway over CAF's network layer");
    n->add_option("--role", flags->role, "target (verifier + KV manager of -m) or draft (draft actor of -m)")->required();
    n->add_option("--listen", flags->listen, "HOST:PORT to publish on (port 0: any free one, printed)");
    n->add_option("--join", flags->join, "gateway HOST:PORT (its --cluster-port) to announce this node to");
    n->add_option("--advertise", flags->advertise, "host the gateway should connect to (default: the --listen host)");
    add_config_flags(n, flags->config);
    n->callback([flags] { run_node(*flags); });
}

}  // namespace specd::cli
