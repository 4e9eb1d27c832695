// `specd bench --url ws://HOST:PORT | http://HOST:PORT`: a load generator for
// a running `specd serve` (WebSocket /v1/ws or SSE /v1/completions), with
// concurrency levels and speculation on/off side by side. `--url self`
// starts a server in-process on the runtime that `bench --concurrency` uses
// and measures both paths in one run, so the network front end's cost is a
// ratio from the same process on the same machine.
#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "engine/generate.h"
#include "net/server.h"
#include "tools/specd/bench_load.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

struct Url {
    bool ws = false;
    std::string host;
    std::string port;
};

Url parse_url(const std::string& u) {
    Url out;
    std::string rest;
    if (u.rfind("ws://", 0) == 0) {
        out.ws = true;
        rest = u.substr(5);
    } else if (u.rfind("http://", 0) == 0) {
        rest = u.substr(7);
    } else {
        throw Error("bench: --url must start with ws:// or http://, got \"" + u + "\"");
    }
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) throw Error("bench: --url needs a port, got \"" + u + "\"");
    out.host = rest.substr(0, colon);
    out.port = rest.substr(colon + 1);
    return out;
}

struct Sample {
    std::vector<double> ttft_ms, itl_ms;
    int64_t tokens = 0;
    int errors = 0;
};

// Adds one client's figures to the level's.
void merge(Sample& out, const Sample& local, std::mutex& mu) {
    std::lock_guard<std::mutex> lock(mu);
    out.ttft_ms.insert(out.ttft_ms.end(), local.ttft_ms.begin(), local.ttft_ms.end());
    out.itl_ms.insert(out.itl_ms.end(), local.itl_ms.begin(), local.itl_ms.end());
    out.tokens += local.tokens;
    out.errors += local.errors;
}

json request_body(int i, int n, bool spec) {
    return json{{"prompt", kBenchPrompts[i % kBenchPromptCount]}, {"max_tokens", n}, {"temperature", 0}, {"speculative", {{"enabled", spec}}}};
}

// One WebSocket client: one generation, timings recorded per token frame.
void ws_client(const Url& url, const std::string& key, int i, int n, bool spec, Sample& out, std::mutex& mu) {
    try {
        asio::io_context ioc;
        tcp::resolver resolver(ioc);
        websocket::stream<tcp::socket> ws(ioc);
        asio::connect(ws.next_layer(), resolver.resolve(url.host, url.port));
        ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& req) {
            if (!key.empty()) req.set(beast::http::field::authorization, "Bearer " + key);
        }));
        ws.handshake(url.host, "/v1/ws");
        json body = request_body(i, n, spec);
        body["type"] = "generate";
        body["id"] = "b" + std::to_string(i);
        const double t0 = now_ms();
        ws.write(asio::buffer(body.dump()));
        double last = -1;
        Sample local;
        beast::flat_buffer buf;
        while (true) {
            buf.clear();
            ws.read(buf);
            const double now = now_ms();
            const json f = json::parse(beast::buffers_to_string(buf.data()));
            const std::string type = f.value("type", "");
            if (type == "token") {
                const size_t k = f["token_ids"].size();
                if (last < 0) local.ttft_ms.push_back(now - t0);
                else local.itl_ms.push_back((now - last) / static_cast<double>(std::max<size_t>(1, k)));
                last = now;
                local.tokens += static_cast<int64_t>(k);
            } else {
                if (type == "error") ++local.errors;
                break;
            }
        }
        beast::error_code ec;
        ws.close(websocket::close_code::normal, ec);
        merge(out, local, mu);
    } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        ++out.errors;
        std::fprintf(stderr, "bench: client %d: %s\n", i, e.what());
    }
}

// One SSE client over plain HTTP/1.1: counts tokens from the timings of
// the data: events (one per token event of the server).
void http_client(const Url& url, const std::string& key, int i, int n, bool spec, Sample& out, std::mutex& mu) {
    try {
        asio::io_context ioc;
        tcp::resolver resolver(ioc);
        tcp::socket sock(ioc);
        asio::connect(sock, resolver.resolve(url.host, url.port));
        json body = request_body(i, n, spec);
        body["stream"] = true;
        const std::string payload = body.dump();
        std::string req = "POST /v1/completions HTTP/1.1\r\nHost: " + url.host + "\r\nContent-Type: application/json\r\nConnection: close\r\n";
        if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
        req += "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
        const double t0 = now_ms();
        asio::write(sock, asio::buffer(req));
        std::string pending;
        char chunk[8192];
        double last = -1;
        Sample local;
        bool done = false;
        while (!done) {
            beast::error_code ec;
            const size_t got = sock.read_some(asio::buffer(chunk), ec);
            if (got == 0 && ec) break;
            const double now = now_ms();
            pending.append(chunk, got);
            size_t at;
            while ((at = pending.find("data: ")) != std::string::npos) {
                const size_t end = pending.find("\n\n", at);
                if (end == std::string::npos) break;
                const std::string data = pending.substr(at + 6, end - at - 6);
                pending.erase(0, end + 2);
                if (data == "[DONE]") {
                    done = true;
                    break;
                }
                const json j = json::parse(data);
                if (j.contains("error")) {
                    ++local.errors;
                    continue;
                }
                if (j.contains("usage")) {
                    local.tokens = j["usage"]["completion_tokens"].get<int64_t>();
                    continue;
                }
                if (last < 0) local.ttft_ms.push_back(now - t0);
                else local.itl_ms.push_back(now - last);
                last = now;
            }
        }
        merge(out, local, mu);
    } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        ++out.errors;
        std::fprintf(stderr, "bench: client %d: %s\n", i, e.what());
    }
}

struct Level {
    double tps = 0;
    Sample sample;
};

Level run_level(const Url& url, const std::string& key, int concurrency, int n, bool spec) {
    Level l;
    std::mutex mu;
    std::vector<std::thread> threads;
    const double t0 = now_ms();
    for (int i = 0; i < concurrency; ++i) {
        threads.emplace_back([&, i] {
            if (url.ws) ws_client(url, key, i, n, spec, l.sample, mu);
            else http_client(url, key, i, n, spec, l.sample, mu);
        });
    }
    for (auto& t : threads) t.join();
    l.tps = 1000.0 * static_cast<double>(l.sample.tokens) / (now_ms() - t0);
    return l;
}


// The same load through the embedding API, no sockets (EOS ends a request, as on the network paths).
Level run_in_process(Runtime& runtime, int concurrency, int n, bool spec) {
    LoadResult r = run_load(runtime, concurrency, n, spec, /*ignore_eos=*/false);
    Level l;
    l.tps = r.tokens_per_s;
    l.sample.ttft_ms = std::move(r.ttft_ms);
    l.sample.itl_ms = std::move(r.itl_ms);
    l.sample.tokens = r.tokens;
    l.sample.errors = r.errors;
    return l;
}

}  // namespace

void run_bench_net(const std::string& url_text, const std::string& target, const std::string& draft, const std::vector<int>& levels,
                   int n, int reps, int threads, const std::string& api_key, const std::string& device) {
    std::unique_ptr<StandaloneRuntime> host;
    std::unique_ptr<net::Server> server;
    std::vector<Url> urls;
    if (url_text == "self") {
        if (target.empty()) throw Error("bench: --url self needs -m TARGET");
        RuntimeConfig rc;
        rc.target_model = target;
        rc.draft_model = draft;
        rc.threads_target = threads;
        if (!device.empty()) rc.device = device;
        rc.max_sequences = std::max(64, *std::max_element(levels.begin(), levels.end()));
        host = std::make_unique<StandaloneRuntime>(rc);
        net::ServerOptions so;
        so.port = 0;
        server = std::make_unique<net::Server>(host->runtime(), so);
        const uint16_t port = server->start();
        urls.push_back(parse_url("ws://127.0.0.1:" + std::to_string(port)));
        urls.push_back(parse_url("http://127.0.0.1:" + std::to_string(port)));
    } else {
        urls.push_back(parse_url(url_text));
    }
    std::printf("specd bench --url %s: %d tokens per request, greedy, %d rounds; each round runs every path once, in turn;\n"
                "tokens/s is the median of the rounds; TTFT and ITL percentiles pool every round's requests%s\n\n",
                url_text.c_str(), n, reps,
                host ? ";\nthe last two columns pair each round's network run with that round's in-process run (medians of the rounds)" : "");
    std::printf("| path | concurrency | spec | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors |%s\n",
                host ? " tokens/s vs in-process | TTFT added ms |" : "");
    std::printf("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |%s\n", host ? " ---: | ---: |" : "");
    const int first = host ? -1 : 0;  // -1: in-process
    const size_t n_paths = urls.size() + (host ? 1 : 0);
    // One short request per path, not counted: a process's first requests pay
    // one-off costs (page faults, thread and connection start-up) that belong to no path.
    for (int path = first; path < static_cast<int>(urls.size()); ++path) {
        for (int spec = 1; spec >= 0; --spec) {
            if (path < 0) (void)run_in_process(host->runtime(), 1, 8, spec != 0);
            else (void)run_level(urls[static_cast<size_t>(path)], api_key, 1, 8, spec != 0);
        }
    }
    for (int c : levels) {
        for (int spec = 1; spec >= 0; --spec) {
            // Rounds: every path once per round, so that the machine's drift
            // between rounds falls on all paths alike.
            std::vector<std::vector<double>> tps(n_paths), ttft_p50(n_paths);
            std::vector<Sample> pooled(n_paths);
            for (int r = 0; r < reps; ++r) {
                for (int path = first; path < static_cast<int>(urls.size()); ++path) {
                    const size_t slot = static_cast<size_t>(path - first);
                    const Level l = path < 0 ? run_in_process(host->runtime(), c, n, spec != 0)
                                             : run_level(urls[static_cast<size_t>(path)], api_key, c, n, spec != 0);
                    tps[slot].push_back(l.tps);
                    ttft_p50[slot].push_back(percentile(l.sample.ttft_ms, 0.5));
                    std::mutex unused;
                    merge(pooled[slot], l.sample, unused);
                }
            }
            for (int path = first; path < static_cast<int>(urls.size()); ++path) {
                const size_t slot = static_cast<size_t>(path - first);
                const Sample& all = pooled[slot];
                const char* name = path < 0 ? "in-process" : urls[static_cast<size_t>(path)].ws ? "websocket" : "http-sse";
                std::printf("| %s | %d | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %d |", name, c, spec ? "on" : "off", median(tps[slot]),
                            percentile(all.ttft_ms, 0.5), percentile(all.ttft_ms, 0.99), percentile(all.itl_ms, 0.5), percentile(all.itl_ms, 0.99), all.errors);
                if (host && path < 0) std::printf(" 1.00x | 0.00 |");
                if (host && path >= 0) {
                    std::vector<double> ratio, added;
                    for (int r = 0; r < reps; ++r) {
                        const size_t ri = static_cast<size_t>(r);
                        if (tps[0][ri] > 0) ratio.push_back(tps[slot][ri] / tps[0][ri]);
                        added.push_back(ttft_p50[slot][ri] - ttft_p50[0][ri]);
                    }
                    std::printf(" %.3fx | %+.2f |", median(ratio), median(added));
                }
                std::printf("\n");
                std::fflush(stdout);
            }
        }
    }
    if (server) server->stop();
}

}  // namespace specd::cli
