// `specd serve` (llama-server's flag names): the runtime behind the HTTP +
// WebSocket front end. `specd bench --concurrency …`: the in-process load
// generator over the actor runtime, speculation on and off side by side.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "config/log.h"
#include "engine/error.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "net/server.h"
#include "tools/specd/bench_load.h"
#include "tools/specd/commands.h"
#include "tools/specd/config_flags.h"

namespace specd::cli {

namespace {

std::atomic<int> g_stop_signals{0};  // SIGTERM / SIGINT received
std::atomic<int> g_last_stop_signal{0};
std::atomic<int> g_reload_requests{0};  // SIGHUP received
void on_stop_signal(int sig) {
    g_last_stop_signal = sig;
    ++g_stop_signals;
}
void on_reload_signal(int) { ++g_reload_requests; }

net::ServerOptions server_options(const RuntimeConfig& rc) {
    net::ServerOptions so;
    so.host = rc.host;
    so.port = static_cast<uint16_t>(rc.port);
    so.io_threads = rc.io_threads;
    so.api_key = rc.api_key;
    so.admin_key = rc.admin_key;
    so.cors_origin = rc.cors_origin;
    so.max_body_bytes = static_cast<size_t>(rc.max_body_bytes);
    so.max_message_bytes = static_cast<size_t>(rc.max_message_bytes);
    so.max_connections = rc.max_connections;
    so.read_timeout_s = rc.read_timeout_s;
    so.idle_timeout_s = rc.idle_timeout_s;
    so.low_acceptance_rate = rc.low_acceptance_rate;
    so.low_acceptance_window = rc.low_acceptance_window;
    so.limits.max_tokens_limit = rc.max_tokens_limit;
    return so;
}

// SIGHUP: reads the configuration again (same file, environment and flags)
// and applies what can change while serving; a bad file keeps the old one.
void reload_config(const ConfigFlags& flags, RuntimeConfig& running, Runtime& rt, net::Server& server) {
    RuntimeConfig next;
    try {
        next = load_config(flags).finish();
    } catch (const std::exception& e) {  // Error for a bad file; anything else must not end the server either
        log::error("config reload failed; keeping the running configuration", {{"error", e.what()}});
        return;
    }
    std::vector<std::string> applied, need_restart;
    for (const std::string& key : changed_fields(running, next)) {
        const ConfigField* f = find_config_field(key);
        (f && f->reloadable ? applied : need_restart).push_back(key);
    }
    // The speculation defaults are set from the file even when unchanged
    // there: SIGHUP undoes a switch made through /admin/speculation.
    rt.set_speculation(SpeculationSettings{next.enable_speculative, next.draft_max, next.adaptive});
    log::set_level(next.log_level);
    server.set_acceptance_watch(next.low_acceptance_rate, next.low_acceptance_window);
    running.enable_speculative = next.enable_speculative;
    running.draft_max = next.draft_max;
    running.adaptive = next.adaptive;
    running.log_level = next.log_level;
    running.low_acceptance_rate = next.low_acceptance_rate;
    running.low_acceptance_window = next.low_acceptance_window;
    log::warn("config reloaded (SIGHUP)", {{"speculative", next.enable_speculative},
                                           {"draft_max", next.draft_max},
                                           {"adaptive", next.adaptive},
                                           {"changed", applied},
                                           {"ignored_until_restart", need_restart}});
}

void run_serve(const ConfigFlags& flags) {
    RuntimeConfig rc = load_config(flags).finish();
    log::configure(rc.log_level, rc.log_format);
    // A busy port is found now, not after the models load (which takes long).
    if (rc.port != 0) net::Server::check_address(rc.host, static_cast<uint16_t>(rc.port));
    log::info("loading models", {{"model", rc.target_model}, {"model_draft", rc.draft_model.empty() ? "n-gram" : rc.draft_model}});
    StandaloneRuntime host(rc);
    Runtime& rt = host.runtime();
    if (!rt.draft_load_error().empty()) {
        // Loud on purpose: the operator asked for a draft and isn't getting one.
        log::error("DRAFT MODEL NOT LOADED: serving in plain mode (no speculative decoding); set require_draft to refuse instead",
                   {{"model_draft", rc.draft_model}, {"error", rt.draft_load_error()}});
        std::fprintf(stderr, "specd: WARNING: draft model %s not loaded (%s): speculative decoding is OFF\n", rc.draft_model.c_str(),
                     rt.draft_load_error().c_str());
    }
    if (!rc.target_nodes.empty()) {
        for (const NodeStatus& n : rt.cluster())
            std::printf("specd: %s node %s: %s\n", n.role.c_str(), n.address.c_str(), n.up ? "up" : ("down (" + n.last_error + ")").c_str());
        if (rt.cluster_port() != 0) std::printf("specd: cluster port %s:%u (specd node --join)\n", rc.host.c_str(), rt.cluster_port());
        std::fflush(stdout);
    }
    net::Server server(rt, server_options(rc));
    const uint16_t port = server.start();
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGHUP, on_reload_signal);
    std::signal(SIGPIPE, SIG_IGN);
    const SpeculationSettings spec = rt.speculation();
    // A gateway drafts on its draft nodes (none: plain decoding); one process with its draft model or the n-gram lookup.
    const std::string drafter = !rc.target_nodes.empty() ? (rc.draft_nodes.empty() ? "none (no draft nodes)" : "nodes " + rc.draft_nodes)
                                : rt.has_draft_model() ? rc.draft_model
                                                       : "n-gram";
    std::printf("specd: serving %s (speculative decoding %s, draft: %s) at http://%s:%u  (chat page /, WebSocket /v1/ws, OpenAI /v1)\n",
                rt.model_name().c_str(), spec.enabled ? "on" : "off", drafter.c_str(), rc.host.c_str(), port);
    std::fflush(stdout);
    log::info("serving", {{"url", "http://" + rc.host + ":" + std::to_string(port)},
                          {"model", rt.model_name()},
                          {"speculative", spec.enabled},
                          {"draft", drafter},
                          {"draft_max", spec.draft_max}});
    while (g_stop_signals == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (g_reload_requests.exchange(0) > 0) reload_config(flags, rc, rt, server);
    }

    // Graceful shutdown: /health turns 503 and new generations are refused
    // at once; running ones get drain_timeout_s to finish, then are cancelled.
    log::info("draining", {{"signal", g_last_stop_signal.load()}, {"drain_timeout_s", rc.drain_timeout_s},
                           {"running", server.active_generations()}});
    server.drain();
    const double deadline = now_ms() + 1000.0 * rc.drain_timeout_s;
    while (server.active_generations() > 0 && now_ms() < deadline && g_stop_signals < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int32_t left = server.active_generations();
    if (left > 0) {
        log::warn("drain timeout: cancelling running generations",
                  {{"cancelled", left}, {"reason", g_stop_signals >= 2 ? "second signal" : "drain_timeout_s"}});
        rt.shutdown();  // each session ends with finish_reason "cancelled", which its client receives
        const double cancel_deadline = now_ms() + 5000.0;
        while (server.active_generations() > 0 && now_ms() < cancel_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The last frames were handed to the connections' strands; give the
    // writes a moment before the network threads stop.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server.stop();
    log::info("stopped", {{"cancelled", left}});
}


}  // namespace

LoadResult run_load(Runtime& rt, int concurrency, int n, bool spec, bool ignore_eos) {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = concurrency;
    LoadResult r;
    int64_t tokens = 0, drafted = 0, accepted = 0;
    const double t0 = now_ms();
    for (int i = 0; i < concurrency; ++i) {
        generate_request req;
        req.id = std::to_string(i);
        req.prompt = kBenchPrompts[i % kBenchPromptCount];
        req.max_tokens = n;
        req.sampling.temperature = 0.0f;
        req.stop_at_eos = !ignore_eos;
        req.speculative = spec ? 1 : 0;
        auto last = std::make_shared<double>(-1.0);
        const double submitted = now_ms();
        RuntimeCallbacks cb;
        cb.on_token = [&, last, submitted](const token_event& e) {
            const double now = now_ms();
            std::lock_guard<std::mutex> lock(mu);
            if (*last < 0) r.ttft_ms.push_back(now - submitted);
            else r.itl_ms.push_back((now - *last) / static_cast<double>(std::max<size_t>(1, e.tokens.size())));
            *last = now;
            tokens += static_cast<int64_t>(e.tokens.size());
        };
        cb.on_done = [&](const done_event& d) {
            std::lock_guard<std::mutex> lock(mu);
            drafted += d.drafted;
            accepted += d.accepted;
            r.load_capped += d.load_capped;
            r.steps += d.steps;
            r.draft_ms += d.draft_ms;
            r.verify_ms += d.verify_ms;
            if (--remaining == 0) cv.notify_all();
        };
        cb.on_error = [&](const error_event& e) {
            std::lock_guard<std::mutex> lock(mu);
            std::fprintf(stderr, "bench: request %s failed: %s\n", e.id.c_str(), e.message.c_str());
            ++r.errors;
            if (--remaining == 0) cv.notify_all();
        };
        rt.submit(req, cb);
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
    const double ms = now_ms() - t0;
    r.wall_ms = ms;
    r.tokens_per_s = 1000.0 * static_cast<double>(tokens) / ms;
    r.acceptance = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
    r.tokens = tokens;
    r.drafted = drafted;
    return r;
}

void run_bench_concurrency(const std::string& target, const std::string& draft, const std::vector<int>& levels, int n, int reps,
                           int threads, const std::string& device) {
    ConfigLoader loader;
    loader.load_environment();  // SPECD_SPEC_TOKEN_BUDGET, KV_CACHE_RATIO, ... as for serve
    RuntimeConfig rc = loader.config();
    rc.target_model = target;
    rc.draft_model = draft;
    rc.threads_target = threads;
    if (!device.empty()) rc.device = device;
    rc.max_sequences = std::max(64, *std::max_element(levels.begin(), levels.end()));
    StandaloneRuntime host(rc);
    Runtime& rt = host.runtime();
    // Warm-up. Each round feeds the draft the prompt, the accepted tokens
    // and its drafts (> n tokens): enough rounds that its learned head
    // (draft_vocab) is built before anything is timed, on both paths.
    const int warm_rounds = static_cast<int>(2 * kDraftHeadWarmupTokens / std::max(16, n)) + 1;
    for (int i = 0; i < warm_rounds; ++i) run_load(rt, 1, std::max(16, n), true);

    // The engine called directly at concurrency 1, for the actor layer's
    // cost: the same prompt, greedy, n tokens; one speculative decoder kept
    // across runs (its controller learns as the runtime's sessions do).
    auto tm = LlamaModel::load(target);
    std::unique_ptr<LlamaModel> dm = draft.empty() ? nullptr : LlamaModel::load(draft);
    // Pinned as the runtime's shared pool is, so the ratio below is the
    // actor layer's and not the pinning's.
    const int n_threads = threads > 0 ? threads : ThreadPool::hardware_threads();
    ThreadPool pool(n_threads, 0, ThreadPool::affinity_cpus(rc.cpu_affinity, n_threads, 0, n_threads));
    ForwardPass fwd(*tm, pool);
    KvCacheShape kv_shape = fwd.kv_shape(tm->hparams().n_ctx_train, 1);
    kv_shape.type = *tensor_type_from_name(rc.kv_cache_type);  // as the runtime's target cache
    PagedKvCache kv(kv_shape);
    std::unique_ptr<Proposer> proposer;
    if (dm) proposer = std::make_unique<DraftModelProposer>(*tm, *dm, pool, tm->hparams().n_ctx_train, rc.draft_vocab);
    else proposer = std::make_unique<NgramProposer>(1, 4);
    GenerationParams gp;
    gp.max_tokens = n;
    gp.sampling.temperature = 0.0f;
    gp.stop_at_eos = false;
    const auto prompt_ids = tm->tokenizer().encode(kBenchPrompts[0], true);
    SpeculativeDecoder direct_off(fwd, kv, nullptr), direct_on(fwd, kv, proposer.get());
    // Summed over the paired rounds, [spec]: what each path spent per target step.
    struct PathTotals {
        int64_t steps = 0, tokens = 0, drafted = 0;
        double wall_ms = 0, draft_ms = 0, verify_ms = 0;
        double per_step(double v) const { return steps > 0 ? v / static_cast<double>(steps) : 0.0; }
        void add(int64_t run_steps, int64_t run_tokens, int64_t run_drafted, double run_wall_ms, double run_draft_ms, double run_verify_ms) {
            steps += run_steps;
            tokens += run_tokens;
            drafted += run_drafted;
            wall_ms += run_wall_ms;
            draft_ms += run_draft_ms;
            verify_ms += run_verify_ms;
        }
    };
    PathTotals direct_totals[2], runtime_totals[2];
    auto run_direct = [&](bool spec) {
        const double t0 = now_ms();
        const auto out = (spec ? direct_on : direct_off).generate(prompt_ids, gp, SpeculativeParams{});
        const double ms = now_ms() - t0;
        direct_totals[spec].add(out.stats.n_steps, static_cast<int64_t>(out.tokens.size()), out.stats.n_drafted, ms, out.stats.draft_ms,
                                out.stats.verify_ms);
        return 1000.0 * static_cast<double>(out.tokens.size()) / ms;
    };
    for (int i = 0; i < warm_rounds; ++i) (void)run_direct(true);  // warm-up, as the runtime's above

    std::printf("specd bench --concurrency: %s, draft %s, %d tokens per request, greedy, median of %d runs\n\n", target.c_str(),
                draft.empty() ? "n-gram" : draft.c_str(), n, reps);
    std::printf("| concurrency | spec | tokens/s | x one session | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | acceptance | load-capped steps |\n");
    std::printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    double single[2] = {0, 0};
    for (int c : levels) {
        for (int spec = 0; spec < 2; ++spec) {
            std::vector<double> tps;
            LoadResult last;
            for (int i = 0; i < reps; ++i) {
                last = run_load(rt, c, n, spec != 0);
                tps.push_back(last.tokens_per_s);
            }
            const double m = median(tps);
            if (c == levels.front()) single[spec] = m;
            std::printf("| %d | %s | %.0f | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f | %lld |\n", c, spec ? "on" : "off", m,
                        single[spec] > 0 ? m / single[spec] : 0.0, percentile(last.ttft_ms, 0.5), percentile(last.ttft_ms, 0.99),
                        percentile(last.itl_ms, 0.5), percentile(last.itl_ms, 0.99), last.acceptance,
                        static_cast<long long>(last.load_capped));
            std::fflush(stdout);
        }
    }
    // Paired rounds: the runtime with one request, then the engine, so that
    // the machine's drift falls on both alike.
    std::vector<double> ratio[2], via_runtime[2], direct[2];
    direct_totals[0] = direct_totals[1] = PathTotals{};
    for (int i = 0; i < reps; ++i) {
        for (int spec = 0; spec < 2; ++spec) {
            const LoadResult lr = run_load(rt, 1, n, spec != 0);
            runtime_totals[spec].add(lr.steps, lr.tokens, lr.drafted, lr.wall_ms, lr.draft_ms, lr.verify_ms);
            const double r = lr.tokens_per_s;
            const double d = run_direct(spec != 0);
            via_runtime[spec].push_back(r);
            direct[spec].push_back(d);
            ratio[spec].push_back(r / d);
        }
    }
    std::printf("\nactor layer at concurrency 1 (runtime / engine called directly, median of %d paired rounds): "
                "plain %.3fx (%.0f / %.0f tokens/s), speculative %.3fx (%.0f / %.0f tokens/s)\n",
                reps, median(ratio[0]), median(via_runtime[0]), median(direct[0]), median(ratio[1]), median(via_runtime[1]),
                median(direct[1]));
    // Wall time per step minus the compute the step reported is what lies
    // between the steps: the messages, the holds, prefill and sampling.
    std::printf("per target step, over all paired rounds:\n");
    std::printf("| path | mode | tokens | drafted | wall ms | drafting ms | verifying ms | other ms |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int spec = 0; spec < 2; ++spec) {
        for (const PathTotals* t : {&runtime_totals[spec], &direct_totals[spec]}) {
            const double wall = t->per_step(t->wall_ms), dr = t->per_step(t->draft_ms), ve = t->per_step(t->verify_ms);
            std::printf("| %s | %s | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f |\n", t == &direct_totals[spec] ? "engine" : "runtime",
                        spec ? "speculative" : "plain", t->per_step(static_cast<double>(t->tokens)), t->per_step(static_cast<double>(t->drafted)),
                        wall, dr, ve, wall - dr - ve);
        }
    }
}

void register_serve_command(CLI::App& app) {
    auto flags = std::make_shared<ConfigFlags>();
    CLI::App* s = app.add_subcommand("serve", "serve the model over HTTP (OpenAI API, SSE) and WebSocket, with a chat page at /; "
                                              "settings: `specd config` lists them with their environment variables");
    add_config_flags(s, *flags);
    s->callback([flags] { run_serve(*flags); });
}

}  // namespace specd::cli
