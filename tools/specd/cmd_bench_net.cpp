// `specd bench --url ws://HOST:PORT | http://HOST:PORT`: a load generator for
// a running `specd serve` (WebSocket /v1/ws or SSE /v1/completions), with
// concurrency levels and speculation on/off side by side. `--url self`
// starts a server in-process on the runtime that `bench --concurrency` uses
// and measures both paths in one run, so the network front end's cost is a
// ratio from the same process on the same machine.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

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

// Adds one run's figures to the pooled ones.
void merge(Sample& out, const Sample& local) {
    out.ttft_ms.insert(out.ttft_ms.end(), local.ttft_ms.begin(), local.ttft_ms.end());
    out.itl_ms.insert(out.itl_ms.end(), local.itl_ms.begin(), local.itl_ms.end());
    out.tokens += local.tokens;
    out.errors += local.errors;
}

// The token count of a specd token frame, found without a JSON parser:
// {"type":"token",…,"token_ids":[a,b,…],…} (net::ws_token_frame writes
// type first). A load generator's own CPU is taken from the server it
// measures on a shared machine, so the common frame skips the parse; false
// for any other frame, which gets a full parse.
bool token_frame_size(std::string_view frame, size_t& tokens) {
    if (frame.rfind(R"({"type":"token",)", 0) != 0) return false;
    const size_t at = frame.find(R"("token_ids":[)");
    if (at == std::string_view::npos) return false;
    const size_t open = at + 13, close = frame.find(']', open);
    if (close == std::string_view::npos) return false;
    const std::string_view ids = frame.substr(open, close - open);
    tokens = ids.empty() ? 0 : 1 + static_cast<size_t>(std::count(ids.begin(), ids.end(), ','));
    return true;
}

json request_body(int i, int n, bool spec) {
    return json{{"prompt", kBenchPrompts[i % kBenchPromptCount]}, {"max_tokens", n}, {"temperature", 0}, {"speculative", {{"enabled", spec}}}};
}

// The clients of one level run as state machines on one event loop in one
// thread, as load generators such as wrk do: a thread per client would put
// 16 threads' wake-ups per token on a 2-core machine that also runs the
// server, and charge them to the network path.
class LoadClient : public std::enable_shared_from_this<LoadClient> {
public:
    LoadClient(asio::io_context& ioc, const Url& url, const std::string& key, int i, int n, bool spec, Sample& out)
        : resolver_(ioc), ws_(ioc), url_(url), key_(key), i_(i), n_(n), spec_(spec), out_(out) {}

    void start() {
        auto self = shared_from_this();
        resolver_.async_resolve(url_.host, url_.port, [self](beast::error_code ec, tcp::resolver::results_type results) {
            if (ec) return self->fail("resolve", ec);
            asio::async_connect(self->ws_.next_layer(), results, [self](beast::error_code ec, const tcp::endpoint&) {
                if (ec) return self->fail("connect", ec);
                self->ws_.next_layer().set_option(tcp::no_delay(true), ec);  // best effort
                if (self->url_.ws) self->ws_handshake();
                else self->sse_request();
            });
        });
    }

private:
    // ---- WebSocket /v1/ws
    void ws_handshake() {
        auto self = shared_from_this();
        ws_.set_option(websocket::stream_base::decorator([key = key_](websocket::request_type& req) {
            if (!key.empty()) req.set(beast::http::field::authorization, "Bearer " + key);
        }));
        ws_.async_handshake(url_.host, "/v1/ws", [self](beast::error_code ec) {
            if (ec) return self->fail("handshake", ec);
            json body = request_body(self->i_, self->n_, self->spec_);
            body["type"] = "generate";
            body["id"] = "b" + std::to_string(self->i_);
            self->payload_ = body.dump();
            self->t0_ = now_ms();
            self->ws_.async_write(asio::buffer(self->payload_), [self](beast::error_code ec, size_t) {
                if (ec) return self->fail("write", ec);
                self->ws_read();
            });
        });
    }

    void ws_read() {
        auto self = shared_from_this();
        buf_.clear();
        ws_.async_read(buf_, [self](beast::error_code ec, size_t) {
            if (ec) return self->fail("read", ec);
            const double now = now_ms();
            const std::string_view frame(static_cast<const char*>(self->buf_.data().data()), self->buf_.size());
            size_t k = 0;
            if (token_frame_size(frame, k)) {
                self->record(now, k);
                self->out_.tokens += static_cast<int64_t>(k);
                return self->ws_read();
            }
            const json f = json::parse(frame, nullptr, false);
            const std::string type = f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
            if (type == "token" && f.contains("token_ids") && f["token_ids"].is_array()) {
                const size_t k = f["token_ids"].size();
                self->record(now, k);
                self->out_.tokens += static_cast<int64_t>(k);
                return self->ws_read();
            }
            if (type != "done") {
                ++self->out_.errors;
                std::fprintf(stderr, "bench: client %d: %s\n", self->i_, beast::buffers_to_string(self->buf_.data()).c_str());
            }
            self->ws_.async_close(websocket::close_code::normal, [self](beast::error_code) {});
        });
    }

    // ---- HTTP POST /v1/completions with "stream": true (SSE)
    void sse_request() {
        json body = request_body(i_, n_, spec_);
        body["stream"] = true;
        const std::string payload = body.dump();
        payload_ = "POST /v1/completions HTTP/1.1\r\nHost: " + url_.host + "\r\nContent-Type: application/json\r\nConnection: close\r\n";
        if (!key_.empty()) payload_ += "Authorization: Bearer " + key_ + "\r\n";
        payload_ += "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
        t0_ = now_ms();
        auto self = shared_from_this();
        asio::async_write(ws_.next_layer(), asio::buffer(payload_), [self](beast::error_code ec, size_t) {
            if (ec) return self->fail("write", ec);
            self->sse_read();
        });
    }

    void sse_read() {
        auto self = shared_from_this();
        ws_.next_layer().async_read_some(asio::buffer(chunk_), [self](beast::error_code ec, size_t got) {
            if (got == 0 && ec) return self->fail("read", ec);  // the server closes only after [DONE]
            const double now = now_ms();
            self->pending_.append(self->chunk_.data(), got);
            size_t at;
            while ((at = self->pending_.find("data: ")) != std::string::npos) {
                const size_t end = self->pending_.find("\n\n", at);
                if (end == std::string::npos) break;
                const std::string data = self->pending_.substr(at + 6, end - at - 6);
                self->pending_.erase(0, end + 2);
                if (data == "[DONE]") return;  // the socket closes with this client
                // A content chunk (net::content_chunk_json) ends so; the last
                // chunk, with usage, and errors get a full parse.
                static constexpr std::string_view kContentEnd = R"("finish_reason":null}]})";
                if (data.size() >= kContentEnd.size() && data.compare(data.size() - kContentEnd.size(), kContentEnd.size(), kContentEnd) == 0 &&
                    data.find(R"("usage")") == std::string::npos) {
                    self->record(now, 1);
                    continue;
                }
                const json j = json::parse(data, nullptr, false);
                if (!j.is_object() || j.contains("error")) {
                    ++self->out_.errors;
                    std::fprintf(stderr, "bench: client %d: %s\n", self->i_, data.c_str());
                    continue;
                }
                if (j.contains("usage")) {
                    const json& usage = j["usage"];
                    if (usage.is_object() && usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
                        self->out_.tokens += usage["completion_tokens"].get<int64_t>();
                    } else {
                        ++self->out_.errors;
                        std::fprintf(stderr, "bench: client %d: usage without completion_tokens: %s\n", self->i_, data.c_str());
                    }
                    continue;
                }
                self->record(now, 1);  // one event per token event of the server; usage counts the tokens
            }
            self->sse_read();
        });
    }

    // Time to the first event, then the gap per token of each later one.
    void record(double now, size_t tokens) {
        if (last_ < 0) out_.ttft_ms.push_back(now - t0_);
        else out_.itl_ms.push_back((now - last_) / static_cast<double>(std::max<size_t>(1, tokens)));
        last_ = now;
    }

    void fail(const char* what, const beast::error_code& ec) {
        ++out_.errors;
        std::fprintf(stderr, "bench: client %d: %s: %s\n", i_, what, ec.message().c_str());
    }

    tcp::resolver resolver_;
    websocket::stream<tcp::socket> ws_;  // its next_layer() is the plain socket of the SSE client
    Url url_;
    std::string key_;
    int i_, n_;
    bool spec_;
    Sample& out_;  // the level's figures: one thread writes them
    std::string payload_;
    beast::flat_buffer buf_;
    std::array<char, 8192> chunk_{};
    std::string pending_;
    double t0_ = 0, last_ = -1;
};

// Where the CPU goes: run time of this process's threads, summed by role.
// Thread names come from ThreadPool::set_current_thread_name; the main
// thread runs the load clients. Linux only: schedstat's first field is the
// nanoseconds on CPU; status counts the voluntary context switches (the
// thread went to sleep, so each is followed by a wake-up, which on a VM
// costs an interrupt between CPUs) and the involuntary ones (preempted).
enum CpuRole { kCpuCompute, kCpuActors, kCpuServerNet, kCpuClient, kCpuOther, kCpuRoles };
constexpr const char* kCpuRoleNames[kCpuRoles] = {"compute", "actors", "server network", "bench client", "other"};
struct ThreadRun {
    CpuRole role = kCpuOther;
    double ms = 0;         // on CPU so far
    double sleeps = 0;     // voluntary context switches so far
    double preempted = 0;  // involuntary context switches so far
};
using ThreadCpu = std::map<long, ThreadRun>;  // by tid

ThreadCpu thread_cpu() {
    ThreadCpu out;
    std::error_code ec;
    const long main_tid = static_cast<long>(getpid());
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
        const long tid = std::strtol(entry.path().filename().c_str(), nullptr, 10);
        std::ifstream comm_in(entry.path() / "comm"), sched_in(entry.path() / "schedstat"), status_in(entry.path() / "status");
        std::string comm;
        double run_ns = 0, sleeps = -1, preempted = -1;
        if (!std::getline(comm_in, comm) || !(sched_in >> run_ns)) continue;  // the thread just exited
        constexpr std::string_view kSleeps = "voluntary_ctxt_switches:", kPreempted = "nonvoluntary_ctxt_switches:";
        for (std::string line; std::getline(status_in, line);) {
            if (line.rfind(kSleeps, 0) == 0) sleeps = std::strtod(line.c_str() + kSleeps.size(), nullptr);
            else if (line.rfind(kPreempted, 0) == 0) preempted = std::strtod(line.c_str() + kPreempted.size(), nullptr);
        }
        if (sleeps < 0 || preempted < 0) continue;
        CpuRole role = kCpuOther;
        if (tid == main_tid) role = kCpuClient;
        else if (comm == "specd.compute" || comm == "specd.verifier" || comm == "specd.draft") role = kCpuCompute;
        else if (comm == "specd.net") role = kCpuServerNet;
        else if (comm.rfind("caf.", 0) == 0) role = kCpuActors;
        out[tid] = {role, run_ns / 1e6, sleeps, preempted};
    }
    return out;
}

using PerRole = std::array<double, kCpuRoles>;
struct RoleUse {
    PerRole ms{};         // CPU time by role
    PerRole sleeps{};     // voluntary context switches by role
    PerRole preempted{};  // involuntary context switches by role
    RoleUse& operator+=(const RoleUse& other) {
        for (int role = 0; role < kCpuRoles; ++role) {
            ms[role] += other.ms[role];
            sleeps[role] += other.sleeps[role];
            preempted[role] += other.preempted[role];
        }
        return *this;
    }
};

// CPU use per role between two snapshots (threads that started in between count from zero).
RoleUse cpu_between(const ThreadCpu& before, const ThreadCpu& after) {
    RoleUse use;
    for (const auto& [tid, now] : after) {
        const auto it = before.find(tid);
        const ThreadRun then = it == before.end() ? ThreadRun{} : it->second;
        use.ms[now.role] += now.ms - then.ms;
        use.sleeps[now.role] += now.sleeps - then.sleeps;
        use.preempted[now.role] += now.preempted - then.preempted;
    }
    return use;
}

struct Level {
    double tps = 0;
    Sample sample;
    RoleUse cpu;  // the run's CPU use by role
};

Level run_level(const Url& url, const std::string& key, int concurrency, int n, bool spec) {
    Level l;
    asio::io_context ioc(1);
    const ThreadCpu cpu0 = thread_cpu();
    const double t0 = now_ms();
    for (int i = 0; i < concurrency; ++i) std::make_shared<LoadClient>(ioc, url, key, i, n, spec, l.sample)->start();
    ioc.run();
    l.tps = 1000.0 * static_cast<double>(l.sample.tokens) / (now_ms() - t0);
    l.cpu = cpu_between(cpu0, thread_cpu());
    return l;
}


// The same load through the embedding API, no sockets (EOS ends a request, as on the network paths).
Level run_in_process(Runtime& runtime, int concurrency, int n, bool spec) {
    const ThreadCpu cpu0 = thread_cpu();
    LoadResult r = run_load(runtime, concurrency, n, spec, /*ignore_eos=*/false);
    Level l;
    l.cpu = cpu_between(cpu0, thread_cpu());
    l.tps = r.tokens_per_s;
    l.sample.ttft_ms = std::move(r.ttft_ms);
    l.sample.itl_ms = std::move(r.itl_ms);
    l.sample.tokens = r.tokens;
    l.sample.errors = r.errors;
    return l;
}

// The cells of a role table's row: each role's figure per 1,000 tokens, then their sum.
std::string per_thousand_tokens(const PerRole& by_role, int64_t tokens, const char* format) {
    std::string cells;
    double total = 0;
    char cell[32];
    for (double value : by_role) {
        const double per_k = tokens > 0 ? 1000.0 * value / static_cast<double>(tokens) : 0.0;
        total += per_k;
        std::snprintf(cell, sizeof(cell), format, per_k);
        cells += " " + std::string(cell) + " |";
    }
    std::snprintf(cell, sizeof(cell), format, total);
    return cells + " " + cell + " |";
}

void print_role_table(const char* title, const std::vector<std::string>& rows) {
    std::printf("\n%s\n\n| path | concurrency | spec |", title);
    for (const char* role : kCpuRoleNames) std::printf(" %s |", role);
    std::printf(" all |\n| --- | ---: | --- |");
    for (int role = 0; role <= kCpuRoles; ++role) std::printf(" ---: |");
    std::printf("\n");
    for (const std::string& row : rows) std::printf("%s\n", row.c_str());
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
    std::vector<std::string> cpu_rows, sleep_rows, preempt_rows;  // the CPU tables, printed after the main one
    for (int c : levels) {
        for (int spec = 1; spec >= 0; --spec) {
            // Rounds: every path once per round, so that the machine's drift
            // between rounds falls on all paths alike.
            std::vector<std::vector<double>> tps(n_paths), ttft_p50(n_paths);
            std::vector<Sample> pooled(n_paths);
            std::vector<RoleUse> cpu(n_paths);  // summed over the rounds
            for (int r = 0; r < reps; ++r) {
                for (int path = first; path < static_cast<int>(urls.size()); ++path) {
                    const size_t slot = static_cast<size_t>(path - first);
                    const Level l = path < 0 ? run_in_process(host->runtime(), c, n, spec != 0)
                                             : run_level(urls[static_cast<size_t>(path)], api_key, c, n, spec != 0);
                    tps[slot].push_back(l.tps);
                    ttft_p50[slot].push_back(percentile(l.sample.ttft_ms, 0.5));
                    merge(pooled[slot], l.sample);
                    cpu[slot] += l.cpu;
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
                const std::string head = "| " + std::string(name) + " | " + std::to_string(c) + " | " + (spec ? "on" : "off") + " |";
                cpu_rows.push_back(head + per_thousand_tokens(cpu[slot].ms, all.tokens, "%.1f"));
                sleep_rows.push_back(head + per_thousand_tokens(cpu[slot].sleeps, all.tokens, "%.0f"));
                preempt_rows.push_back(head + per_thousand_tokens(cpu[slot].preempted, all.tokens, "%.0f"));
            }
        }
    }
    // CPU time by thread role, per 1,000 tokens, over all rounds: what each
    // path costs the machine, apart from the noise that moves tokens/s.
    // Then how often each role's threads slept (and so were woken) and were
    // preempted: on 2 cores, every network or client thread that wakes takes
    // a CPU from a compute thread in the middle of a step, whose partner
    // then spins at the next barrier.
    print_role_table("CPU ms per 1000 tokens by thread role (this process; the main thread runs the load clients):", cpu_rows);
    print_role_table("Sleeps (each followed by a wake-up) per 1000 tokens by thread role (voluntary context switches):", sleep_rows);
    print_role_table("Preemptions per 1000 tokens by thread role (involuntary context switches):", preempt_rows);
    if (server) server->stop();
}

}  // namespace specd::cli
