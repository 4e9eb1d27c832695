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
#include "engine/generate.h"
#include "engine/speculative.h"
#include "net/server.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

struct ServeOptions {
    RuntimeConfig config;
    net::ServerOptions server;
    std::string config_file;
    bool no_spec = false;
};

void add_runtime_flags(CLI::App* c, RuntimeConfig& rc) {
    c->add_option("-m,--model", rc.target_model, "target GGUF model");
    c->add_option("--model-draft", rc.draft_model, "draft GGUF model (default: n-gram lookup)");
    c->add_option("--draft-max", rc.draft_max, "MAX_DRAFT_TOKENS: tokens drafted per step at most")->capture_default_str();
    c->add_option("-c,--ctx-size", rc.n_ctx, "context per request (0: the model's)")->capture_default_str();
    c->add_option("--parallel", rc.max_sequences, "requests decoding at once")->capture_default_str();
    c->add_option("-t,--threads", rc.threads_target, "target compute threads (0: all)")->capture_default_str();
    c->add_option("--threads-draft", rc.threads_draft, "draft compute threads")->capture_default_str();
    c->add_option("--kv-cache-ratio", rc.kv_cache_ratio, "KV_CACHE_RATIO of the memory budget for the KV pools")->capture_default_str();
    c->add_option("--memory-budget", rc.memory_budget_bytes, "memory budget in bytes (0: available RAM)")->capture_default_str();
    c->add_option("--spec-token-budget", rc.verify_token_budget, "load policy: tokens per verify step (k <= budget / requests - 1); 0: off")
        ->capture_default_str();
}

void run_serve(ServeOptions& o) {
    RuntimeConfig& rc = o.config;
    if (!o.config_file.empty()) {
        RuntimeConfig from_file = rc;
        load_config_file(o.config_file, from_file);
        if (rc.target_model.empty()) rc = from_file;
    }
    apply_environment(rc);
    if (o.no_spec) rc.enable_speculative = false;
    rc.validate();
    std::fprintf(stderr, "specd: loading %s%s%s\n", rc.target_model.c_str(), rc.draft_model.empty() ? "" : " with draft ",
                 rc.draft_model.c_str());
    StandaloneRuntime host(rc);
    net::Server server(host.runtime(), o.server);
    const uint16_t port = server.start();
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::printf("specd: serving %s (speculative decoding %s, draft: %s) at http://%s:%u  (chat page /, WebSocket /v1/ws, OpenAI /v1)\n",
                host.runtime().model_name().c_str(), rc.enable_speculative ? "on" : "off",
                rc.draft_model.empty() ? "n-gram" : rc.draft_model.c_str(), o.server.host.c_str(), port);
    std::fflush(stdout);
    while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::fprintf(stderr, "specd: signal %d, draining\n", g_signal.load());
    server.drain();
    server.stop();
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
    return v[i];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

struct LoadResult {
    double tokens_per_s = 0.0;
    std::vector<double> ttft_ms, itl_ms;
    double acceptance = 0.0;
    int64_t load_capped = 0;
};

const char* kBenchPrompts[] = {"Once upon a time", "Lily and Ben went to the park.", "One day, a little girl named Sue found a shiny rock.",
                               "The sun was hot", "Max the dog liked to run", "Anna saw a big bird in the tree. She"};

// `concurrency` requests at once, all greedy, n tokens each.
LoadResult run_load(Runtime& rt, int concurrency, int n, bool spec) {
    std::mutex mu;
    std::condition_variable cv;
    int remaining = concurrency;
    LoadResult r;
    int64_t tokens = 0, drafted = 0, accepted = 0;
    const double t0 = now_ms();
    for (int i = 0; i < concurrency; ++i) {
        generate_request req;
        req.id = std::to_string(i);
        req.prompt = kBenchPrompts[i % 6];
        req.max_tokens = n;
        req.sampling.temperature = 0.0f;
        req.stop_at_eos = false;
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
            if (--remaining == 0) cv.notify_all();
        };
        cb.on_error = [&](const error_event& e) {
            std::lock_guard<std::mutex> lock(mu);
            std::fprintf(stderr, "bench: request %s failed: %s\n", e.id.c_str(), e.message.c_str());
            if (--remaining == 0) cv.notify_all();
        };
        rt.submit(req, cb);
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
    const double ms = now_ms() - t0;
    r.tokens_per_s = 1000.0 * static_cast<double>(tokens) / ms;
    r.acceptance = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
    return r;
}

}  // namespace

void run_bench_concurrency(const std::string& target, const std::string& draft, const std::vector<int>& levels, int n, int reps,
                           int threads) {
    RuntimeConfig rc;
    apply_environment(rc);
    if (const char* b = std::getenv("SPECD_SPEC_TOKEN_BUDGET")) rc.verify_token_budget = std::atoi(b);
    rc.target_model = target;
    rc.draft_model = draft;
    rc.threads_target = threads;
    rc.max_sequences = std::max(64, *std::max_element(levels.begin(), levels.end()));
    StandaloneRuntime host(rc);
    Runtime& rt = host.runtime();
    run_load(rt, 1, 16, true);  // warm-up

    // The engine called directly at concurrency 1, for the actor layer's cost.
    double direct_plain = 0, direct_spec = 0;
    {
        auto tm = LlamaModel::load(target);
        std::unique_ptr<LlamaModel> dm = draft.empty() ? nullptr : LlamaModel::load(draft);
        ThreadPool pool(threads > 0 ? threads : ThreadPool::hardware_threads());
        ForwardPass fwd(*tm, pool);
        PagedKvCache kv(fwd.kv_shape(tm->hparams().n_ctx_train, 1));
        std::unique_ptr<Proposer> proposer;
        if (dm) proposer = std::make_unique<DraftModelProposer>(*tm, *dm, pool, tm->hparams().n_ctx_train);
        else proposer = std::make_unique<NgramProposer>(1, 4);
        GenerationParams gp;
        gp.max_tokens = n;
        gp.sampling.temperature = 0.0f;
        gp.stop_at_eos = false;
        std::vector<double> p, s;
        for (int i = 0; i < reps; ++i) {
            const auto ids = tm->tokenizer().encode(kBenchPrompts[0], true);
            SpeculativeDecoder off(fwd, kv, nullptr);
            SpeculativeDecoder on(fwd, kv, proposer.get());
            double t0 = now_ms();
            auto a = off.generate(ids, gp, SpeculativeParams{});
            p.push_back(1000.0 * static_cast<double>(a.tokens.size()) / (now_ms() - t0));
            t0 = now_ms();
            auto b = on.generate(ids, gp, SpeculativeParams{});
            s.push_back(1000.0 * static_cast<double>(b.tokens.size()) / (now_ms() - t0));
        }
        direct_plain = median(p);
        direct_spec = median(s);
    }

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
    std::printf("\nengine called directly (concurrency 1): plain %.0f tokens/s, speculative %.0f tokens/s\n", direct_plain, direct_spec);
}

void register_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* s = app.add_subcommand("serve", "serve the model over HTTP (OpenAI API, SSE) and WebSocket, with a chat page at /");
    add_runtime_flags(s, o->config);
    s->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
    s->add_option("--port", o->server.port, "port (0: any free one)")->capture_default_str();
    s->add_option("--api-key", o->server.api_key, "require Authorization: Bearer KEY on every endpoint but /health");
    s->add_option("--cors-origin", o->server.cors_origin, "Access-Control-Allow-Origin value (empty: no CORS)");
    s->add_option("--config", o->config_file, "JSON runtime configuration (keys as config/runtime_config.h)");
    s->add_option("--max-body", o->server.max_body_bytes, "largest request body in bytes")->capture_default_str();
    s->add_option("--max-message", o->server.max_message_bytes, "largest WebSocket message in bytes")->capture_default_str();
    s->add_option("--max-connections", o->server.max_connections, "open connections at most")->capture_default_str();
    s->add_option("--max-tokens-limit", o->server.limits.max_tokens_limit, "largest max_tokens a request may ask for")->capture_default_str();
    s->add_flag("--no-spec", o->no_spec, "plain decoding by default (ENABLE_SPECULATIVE_DECODING=false)");
    s->callback([o] { run_serve(*o); });
}

}  // namespace specd::cli
