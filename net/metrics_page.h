// The /metrics page: every figure the server exports, in one registry
// (net/metrics.h), rendered without blocking a network thread. Counters and
// histograms are updated where things happen (requests, tokens, finished
// generations); the runtime's figures (KV pools, queues, speculation, GPU)
// and the process' are read by a collector thread of its own when a scrape
// asks for them, and the page goes to the scrape's callback when they
// arrive: the connection waits, the network thread serves others.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "net/metrics.h"

namespace specd::net {

// The server's own gauges (its connections and generations), read at each render.
struct ServerGauges {
    std::function<double()> open_connections;    // open HTTP and WebSocket connections
    std::function<double()> draining;            // 1 while the server drains
    std::function<double()> active_generations;  // generations running or queued through the server
};

class MetricsPage {
public:
    // Registers every family (the page lists them in this order) and starts
    // the collector thread. `runtime` must outlive the page.
    MetricsPage(Runtime& runtime, ServerGauges server);
    ~MetricsPage();  // stop()
    MetricsPage(const MetricsPage&) = delete;
    MetricsPage& operator=(const MetricsPage&) = delete;

    // Renders the page on the collector thread and calls `done` there with
    // it; scrapes that arrive while one is collected share the next round.
    // After stop() nothing is called.
    void scrape(std::function<void(const std::string& page)> done);
    // Ends the collector thread (waits for a round in progress: up to the
    // runtime's stats timeout, 10 s). Idempotent.
    void stop();

    // Numbering and counting in one: the new total (HTTP request and
    // WebSocket connection ids are made from it).
    uint64_t count_http_request() { return ++http_requests_; }
    uint64_t count_ws_connection() { return ++ws_connections_; }
    uint64_t http_requests() const { return http_requests_.load(); }

    // A generation ended: its tokens, speculation figures per draft position, a cancellation.
    void record_done(const done_event& d);
    void record_error() { generation_errors_->inc(); }
    void record_low_acceptance_window() { low_acceptance_windows_->inc(); }
    // `n` tokens of a generation arrived: its first ones `seconds` after
    // it was submitted (`first`), or `seconds` per token after the last ones.
    void record_tokens(size_t n, bool first, double seconds);

    // The registry (tests and additions).
    MetricsRegistry& registry() { return registry_; }

private:
    void collect_loop();
    void collect();  // the runtime's and the process' figures into the gauges

    Runtime& runtime_;
    MetricsRegistry registry_;
    std::atomic<uint64_t> http_requests_{0}, ws_connections_{0};
    // The registry's metrics (registered in the constructor, in the page's order).
    Counter *generations_, *generations_cancelled_, *generation_errors_, *prompt_tokens_, *prompt_tokens_cached_, *completion_tokens_;
    Counter *drafted_, *accepted_, *low_acceptance_windows_;
    Histogram *ttft_, *itl_;
    std::mutex position_mu_;
    std::vector<uint64_t> drafted_pos_, accepted_pos_;  // (positions seen) per draft position, under position_mu_
    // Set by collect() on the collector thread.
    Gauge *kv_total_, *kv_used_, *kv_free_, *draft_kv_used_, *queue_depth_, *active_sessions_;
    Gauge *speculation_enabled_, *draft_max_, *draft_model_loaded_;
    Gauge *resident_bytes_, *virtual_bytes_, *open_fds_, *threads_;
    std::atomic<double> cpu_seconds_{0.0};
    std::mutex gpu_mu_;
    std::vector<gpu::GpuDeviceStats> gpu_;  // the last round's devices, under gpu_mu_

    std::mutex mu_;
    std::condition_variable wake_;
    std::vector<std::function<void(const std::string&)>> waiting_;  // under mu_
    bool stopping_ = false;                                         // under mu_
    std::thread collector_;  // last: starts once the rest is built
};

// One generation's timing for the latency histograms.
class GenerationTiming {
public:
    void on_tokens(MetricsPage& page, size_t n);

private:
    static double now_s();  // steady clock
    double t_submit_ = now_s();
    double t_last_ = -1.0;
};

// specd_gpu_memory_used_bytes, specd_gpu_memory_free_bytes,
// specd_gpu_memory_total_bytes (one series per device, label
// device="<ordinal>") and specd_gpu_utilization_ratio for the devices that
// have a utilisation (no family at all when none has), read from
// `devices()` at each render; no GPU family at all while it is empty (a
// CPU backend).
void register_gpu_metrics(MetricsRegistry& registry, std::function<std::vector<gpu::GpuDeviceStats>()> devices);

}  // namespace specd::net
