// `specd bench-wire`: what each multi-node message costs on the wire: its
// size as CAF serialises it, and the round trip of each request/reply pair
// between two actor systems over loopback TCP (CAF's middleman), as a table.
// Benchmark, not test: the figures depend on the machine and its load. The
// node side is a forked child process with its own actor system.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/interfaces.h"
#include "actors/messages.h"
#include "actors/runtime.h"
#include "engine/error.h"
#include "engine/generate.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

struct WireShape {
    int k = 8;              // drafted tokens per step
    int entries = 40;       // entries per draft distribution (top-k 40 after the sampling filters)
    int context = 200;      // tokens of context (prompt + output so far)
};

std::vector<std::vector<TokenProb>> fake_distributions(int n, int entries) {
    std::vector<std::vector<TokenProb>> d(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
        for (int e = 0; e < entries; ++e) d[static_cast<size_t>(i)].push_back(TokenProb{1000 + e * 7 + i, 1.0f / static_cast<float>(entries)});
    return d;
}

std::vector<int32_t> tokens(int n, int32_t base) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + i * 13;
    return t;
}

verify_msg make_verify(const WireShape& w, bool sampled) {
    verify_msg m;
    m.request = 42;
    m.tokens = tokens(w.k + 1, 100);
    m.n_draft = w.k;
    m.has_probs = sampled;
    if (sampled) m.probs = pack_probs(fake_distributions(w.k, w.entries));
    m.sampling.temperature = sampled ? 0.8f : 0.0f;
    m.rng = {1, 2, 3, 4};
    return m;
}

draft_msg make_draft(const WireShape& w, bool incremental, bool sampled) {
    draft_msg m;
    m.request = 42;
    m.keep = incremental ? w.context - 1 : 0;
    m.tail = incremental ? tokens(w.k + 1, 500) : tokens(w.context, 500);  // incremental: the accepted tokens and the new pending one
    m.k = w.k + 1;
    m.sampling.temperature = sampled ? 0.8f : 0.0f;
    m.rng = {1, 2, 3, 4};
    return m;
}

draft_result make_draft_result(const WireShape& w, bool sampled) {
    draft_result r;
    r.tokens = tokens(w.k + 1, 700);
    r.has_probs = sampled;
    if (sampled) r.probs = pack_probs(fake_distributions(w.k + 1, w.entries));
    r.rng = {1, 2, 3, 4};
    r.step_ms = 1.5;
    return r;
}

verify_result make_verify_result() {
    verify_result r;
    r.n_accepted = 5;
    r.next = 1234;
    r.rng = {1, 2, 3, 4};
    r.batch_requests = 3;
    r.open_requests = 3;
    r.step_ms = 4.0;
    return r;
}

template <class T>
size_t wire_bytes(caf::actor_system& sys, T value) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    if (auto err = sink(value)) throw Error("bench-wire: cannot serialise: " + sys.render(err));
    return buf.size();
}

// Serialisation throughput (MiB/s) of `value`, repeated.
template <class T>
double serialise_mib_s(caf::actor_system& sys, const T& value) {
    std::vector<char> buf;
    const double t0 = now_ms();
    size_t bytes = 0;
    int reps = 0;
    while (now_ms() - t0 < 200.0) {
        buf.clear();
        caf::binary_serializer sink{sys, buf};
        T copy = value;
        (void)sink(copy);
        bytes += buf.size();
        ++reps;
    }
    return static_cast<double>(bytes) / (1024.0 * 1024.0) / ((now_ms() - t0) / 1000.0);
}

// The node side: answers each request type with a reply of the real shape.
caf::behavior echo_node(caf::event_based_actor*, WireShape w) {
    return {
        [](verify_msg& m) { return m.has_probs ? make_verify_result() : make_verify_result(); },
        [w](draft_msg& m) { return make_draft_result(w, m.sampling.temperature > 0.0f); },
        [](kv_acquire&) { return kv_grant{true, {}}; },
        [](hello_atom) {
            node_hello h;
            h.role = "target";
            h.model = "stories15M-f32";
            h.n_vocab = 32000;
            h.n_ctx = 256;
            return h;
        },
    };
}

struct RoundTrip {
    double p50_us = 0, p99_us = 0;
};

template <class Reply, class Msg>
RoundTrip round_trip(caf::actor_system& sys, const caf::actor& node, const Msg& msg, int n) {
    caf::scoped_actor self{sys};
    std::vector<double> us;
    us.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n + n / 10; ++i) {  // the first tenth warms up
        const auto t0 = std::chrono::steady_clock::now();
        bool ok = false;
        std::string why;
        self->request(node, std::chrono::seconds(5), msg).receive([&](Reply&) { ok = true; }, [&](caf::error& e) { why = sys.render(e); });
        const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        if (!ok) throw Error("bench-wire: a round trip failed: " + why);
        if (i >= n / 10) us.push_back(t);
    }
    std::sort(us.begin(), us.end());
    return RoundTrip{us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

// The node side runs in a child process: two actor systems in one process
// share a CAF node id, and the middleman won't connect a node to itself.
// Returns the child's pid; its published port arrives through `port_out`.
pid_t start_echo_process(const WireShape& w, uint16_t& port_out) {
    int fds[2];
    if (pipe(fds) != 0) throw Error("bench-wire: pipe failed");
    const pid_t child = fork();
    if (child < 0) throw Error("bench-wire: fork failed");
    if (child == 0) {
        close(fds[0]);
        caf::actor_system_config cfg;
        register_types(cfg);
        configure_low_latency(cfg);
        configure_network(cfg);
        caf::actor_system sys{cfg};
        auto echo = sys.spawn(echo_node, w);
        auto port = sys.middleman().publish(echo, 0, "127.0.0.1", true);
        const uint16_t p = port ? *port : 0;
        if (write(fds[1], &p, sizeof p) != static_cast<ssize_t>(sizeof p)) _exit(1);
        close(fds[1]);
        // Until the parent kills it (SIGTERM); the parent's exit also ends it.
        while (getppid() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        _exit(0);
    }
    close(fds[1]);
    uint16_t p = 0;
    const ssize_t got = read(fds[0], &p, sizeof p);
    close(fds[0]);
    if (got != static_cast<ssize_t>(sizeof p) || p == 0) {
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        throw Error("bench-wire: the echo node could not publish on loopback");
    }
    port_out = p;
    return child;
}

void run_bench_wire(const WireShape& w, int n) {
    uint16_t port = 0;
    const pid_t child = start_echo_process(w, port);
    struct Reap {
        pid_t pid;
        ~Reap() {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    } reap{child};
    caf::actor_system_config gw_cfg;
    register_types(gw_cfg);
    configure_low_latency(gw_cfg);
    configure_network(gw_cfg);
    caf::actor_system gw_sys{gw_cfg};
    auto remote = gw_sys.middleman().remote_actor(std::string("127.0.0.1"), port);
    if (!remote) throw Error("bench-wire: cannot connect: " + gw_sys.render(remote.error()));

    std::printf("specd bench-wire: k = %d drafted tokens, %d entries per draft distribution, %d tokens of context; "
                "round trips over loopback TCP to a CAF system in a child process, %d each\n\n",
                w.k, w.entries, w.context, n);
    std::printf("| message | bytes | what it carries |\n| --- | ---: | --- |\n");
    auto row = [](const char* name, size_t bytes, const char* what) { std::printf("| %s | %zu | %s |\n", name, bytes, what); };
    row("draft_msg, incremental", wire_bytes(gw_sys, make_draft(w, true, false)), "keep + the k+1 new tokens (this protocol)");
    row("draft_msg, whole context", wire_bytes(gw_sys, make_draft(w, false, false)), "the context every step (before issue 7)");
    row("draft_result, greedy", wire_bytes(gw_sys, make_draft_result(w, false)), "k+1 tokens (the last: bonus guess)");
    row("draft_result, sampled", wire_bytes(gw_sys, make_draft_result(w, true)), "+ k+1 packed distributions, 8 bytes per entry");
    row("verify_msg, greedy", wire_bytes(gw_sys, make_verify(w, false)), "pending + k drafted tokens");
    row("verify_msg, sampled", wire_bytes(gw_sys, make_verify(w, true)), "+ k packed distributions");
    row("verify_result", wire_bytes(gw_sys, make_verify_result()), "accepted count, next token, random state, load");
    row("kv_acquire", wire_bytes(gw_sys, kv_acquire{42, 300, 0}), "admission");
    row("kv_grant", wire_bytes(gw_sys, kv_grant{true, {}}), "");

    // Why the distributions travel as bytes.
    std::vector<float> as_floats;
    for (const auto& d : fake_distributions(w.k, w.entries))
        for (const TokenProb& t : d) {
            as_floats.push_back(static_cast<float>(t.id));
            as_floats.push_back(t.p);
        }
    const std::string packed = pack_probs(fake_distributions(w.k, w.entries));
    std::printf("\nserialising %d draft distributions: as std::vector<float> %.0f MiB/s, packed as bytes %.0f MiB/s\n", w.k,
                serialise_mib_s(gw_sys, as_floats), serialise_mib_s(gw_sys, packed));

    std::printf("\n| round trip | p50 µs | p99 µs |\n| --- | ---: | ---: |\n");
    auto rt_row = [](const char* name, RoundTrip r) { std::printf("| %s | %.0f | %.0f |\n", name, r.p50_us, r.p99_us); };
    rt_row("draft_msg → draft_result, greedy, incremental", round_trip<draft_result>(gw_sys, *remote, make_draft(w, true, false), n));
    rt_row("draft_msg → draft_result, greedy, whole context", round_trip<draft_result>(gw_sys, *remote, make_draft(w, false, false), n));
    rt_row("draft_msg → draft_result, sampled", round_trip<draft_result>(gw_sys, *remote, make_draft(w, true, true), n));
    rt_row("verify_msg → verify_result, greedy", round_trip<verify_result>(gw_sys, *remote, make_verify(w, false), n));
    rt_row("verify_msg → verify_result, sampled", round_trip<verify_result>(gw_sys, *remote, make_verify(w, true), n));
    rt_row("kv_acquire → kv_grant", round_trip<kv_grant>(gw_sys, *remote, kv_acquire{42, 300, 0}, n));
    rt_row("hello → node_hello", round_trip<node_hello>(gw_sys, *remote, hello_atom::value, n));

    std::fflush(stdout);
}

}  // namespace

void register_bench_wire_command(CLI::App& app) {
    auto w = std::make_shared<WireShape>();
    auto n = std::make_shared<int>(2000);
    CLI::App* b = app.add_subcommand("bench-wire", "size and loopback round trip of each multi-node message type (a table)");
    b->add_option("--draft-max", w->k, "drafted tokens per step");
    b->add_option("--entries", w->entries, "entries per draft distribution");
    b->add_option("--context", w->context, "context tokens");
    b->add_option("-n,--round-trips", *n, "round trips per message type");
    b->callback([w, n] {
        if (w->k < 1 || w->entries < 1 || w->context < w->k + 2 || *n < 10) throw Error("bench-wire: bad sizes");
        run_bench_wire(*w, *n);
    });
}

}  // namespace specd::cli
