// The /metrics page; see metrics_page.h.
#include "net/metrics_page.h"

#include <chrono>

#include <pthread.h>

namespace specd::net {

namespace {

// Latency buckets in seconds (1 ms .. 10 s).
const std::vector<double> kLatencyBounds = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};

double unix_time_s() {
    return static_cast<double>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace

MetricsPage::MetricsPage(Runtime& runtime, ServerGauges server) : runtime_(runtime) {
    MetricsRegistry& r = registry_;
    r.counter_fn("specd_http_requests_total", "HTTP requests received (WebSocket upgrades included).",
                 [this] { return static_cast<double>(http_requests_.load()); });
    r.counter_fn("specd_websocket_connections_total", "WebSocket connections accepted.",
                 [this] { return static_cast<double>(ws_connections_.load()); });
    generations_ = &r.counter("specd_generations_total", "Generations that finished (any finish reason).");
    generations_cancelled_ = &r.counter("specd_generations_cancelled_total", "Generations cancelled by the client or a disconnect.");
    generation_errors_ = &r.counter("specd_generation_errors_total", "Generations that ended with an error.");
    prompt_tokens_ = &r.counter("specd_prompt_tokens_total", "Prompt tokens processed.");
    prompt_tokens_cached_ = &r.counter("specd_prompt_tokens_cached_total", "Prompt tokens whose keys and values came from the prefix cache.");
    completion_tokens_ = &r.counter("specd_completion_tokens_total", "Tokens generated.");
    drafted_ = &r.counter("specd_spec_drafted_tokens_total", "Drafted tokens verified by the target.");
    accepted_ = &r.counter("specd_spec_accepted_tokens_total", "Drafted tokens the target accepted.");
    r.gauge_family_fn("specd_spec_position_acceptance_ratio", "Share of drafts reaching position i that were accepted there.",
                      {"position"}, [this] {
                          MetricsRegistry::LabelledValues out;
                          std::lock_guard<std::mutex> lock(position_mu_);
                          for (size_t i = 0; i < drafted_pos_.size(); ++i) {
                              const double ratio =
                                  drafted_pos_[i] ? static_cast<double>(accepted_pos_[i]) / static_cast<double>(drafted_pos_[i]) : 0.0;
                              out.push_back({{std::to_string(i)}, ratio});
                          }
                          return out;
                      });
    ttft_ = &r.histogram("specd_time_to_first_token_seconds", "Time from request to first token.", kLatencyBounds);
    itl_ = &r.histogram("specd_inter_token_latency_seconds", "Time between streamed tokens, per token.", kLatencyBounds);
    kv_total_ = &r.gauge("specd_kv_blocks_total", "Target KV cache blocks in the pool.");
    kv_used_ = &r.gauge("specd_kv_blocks_used", "Target KV cache blocks set aside for running requests.");
    kv_free_ = &r.gauge("specd_kv_blocks_free", "Target KV cache blocks free.");
    draft_kv_used_ = &r.gauge("specd_draft_kv_blocks_used", "Draft KV cache blocks set aside.");
    queue_depth_ = &r.gauge("specd_queue_depth", "Requests waiting for KV blocks.");
    active_sessions_ = &r.gauge("specd_active_sessions", "Requests holding KV blocks.");
    r.gauge_fn("specd_open_connections", "Open HTTP and WebSocket connections.", std::move(server.open_connections));
    r.gauge_fn("specd_draining", "1 while the server drains.", std::move(server.draining));
    r.gauge_fn("specd_active_generations", "Generations running or queued through this server.", std::move(server.active_generations));
    speculation_enabled_ = &r.gauge("specd_speculation_enabled", "1 while new requests speculate by default (the run-time switch).");
    draft_max_ = &r.gauge("specd_draft_max", "Tokens drafted per step at most, for new requests.");
    draft_model_loaded_ = &r.gauge("specd_draft_model_loaded", "1 when a draft model is loaded.");
    low_acceptance_windows_ = &r.counter("specd_spec_low_acceptance_windows_total",
                                         "Acceptance windows that ended below the low-acceptance threshold.");
    // GPU memory and utilisation: only with a CUDA backend.
    register_gpu_metrics(r, [this] {
        std::lock_guard<std::mutex> lock(gpu_mu_);
        return gpu_;
    });
    resident_bytes_ = &r.gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
    virtual_bytes_ = &r.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
    r.counter_fn("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                 [this] { return cpu_seconds_.load(); });
    open_fds_ = &r.gauge("process_open_fds", "Number of open file descriptors.");
    threads_ = &r.gauge("process_threads", "Number of OS threads.");
    r.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.").set(unix_time_s());
    collector_ = std::thread([this] { collect_loop(); });
}

MetricsPage::~MetricsPage() { stop(); }

void MetricsPage::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        stopping_ = true;
        waiting_.clear();
    }
    wake_.notify_all();
    if (collector_.joinable()) collector_.join();
}

void MetricsPage::scrape(std::function<void(const std::string& page)> done) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        waiting_.push_back(std::move(done));
    }
    wake_.notify_one();
}

void MetricsPage::collect_loop() {
    (void)pthread_setname_np(pthread_self(), "specd.metrics");
    for (;;) {
        std::vector<std::function<void(const std::string&)>> round;
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
            if (stopping_) return;
            round.swap(waiting_);
        }
        collect();
        const std::string page = registry_.render();
        for (auto& done : round) done(page);
    }
}

void MetricsPage::collect() {
    // Blocks this thread (not a network one) until the KV manager answers.
    const runtime_stats s = runtime_.stats();
    kv_total_->set(s.kv_target_blocks);
    kv_used_->set(s.kv_target_blocks - s.kv_target_free);
    kv_free_->set(s.kv_target_free);
    draft_kv_used_->set(s.kv_draft_blocks - s.kv_draft_free);
    queue_depth_->set(s.waiting);
    active_sessions_->set(s.running);
    const SpeculationSettings spec = runtime_.speculation();
    speculation_enabled_->set(spec.enabled ? 1 : 0);
    draft_max_->set(spec.draft_max);
    draft_model_loaded_->set(runtime_.has_draft_model() ? 1 : 0);
    std::vector<gpu::GpuDeviceStats> devices = runtime_.gpu_stats();  // asks the driver
    {
        std::lock_guard<std::mutex> lock(gpu_mu_);
        gpu_ = std::move(devices);
    }
    const ProcessStats ps = read_process_stats();
    resident_bytes_->set(static_cast<double>(ps.resident_bytes));
    virtual_bytes_->set(static_cast<double>(ps.virtual_bytes));
    cpu_seconds_.store(ps.cpu_seconds);
    open_fds_->set(static_cast<double>(ps.open_fds));
    threads_->set(static_cast<double>(ps.threads));
}

void MetricsPage::record_done(const done_event& d) {
    generations_->inc();
    if (d.finish_reason == "cancelled") generations_cancelled_->inc();
    prompt_tokens_->inc(static_cast<double>(d.prompt_tokens));
    prompt_tokens_cached_->inc(static_cast<double>(d.cached_prompt_tokens));
    drafted_->inc(static_cast<double>(d.drafted));
    accepted_->inc(static_cast<double>(d.accepted));
    std::lock_guard<std::mutex> lock(position_mu_);
    if (drafted_pos_.size() < d.drafted_per_position.size()) {
        drafted_pos_.resize(d.drafted_per_position.size(), 0);
        accepted_pos_.resize(d.drafted_per_position.size(), 0);
    }
    for (size_t i = 0; i < d.drafted_per_position.size(); ++i) {
        drafted_pos_[i] += static_cast<uint64_t>(d.drafted_per_position[i]);
        accepted_pos_[i] += static_cast<uint64_t>(d.accepted_per_position[i]);
    }
}

void MetricsPage::record_tokens(size_t n, bool first, double seconds) {
    if (first) ttft_->observe(seconds);
    else if (n > 0) itl_->observe(seconds);
    completion_tokens_->inc(static_cast<double>(n));
}

double GenerationTiming::now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void GenerationTiming::on_tokens(MetricsPage& page, size_t n) {
    const double now = now_s();
    const bool first = t_last_ < 0;
    page.record_tokens(n, first, first ? now - t_submit_ : n > 0 ? (now - t_last_) / static_cast<double>(n) : 0.0);
    t_last_ = now;
}

void register_gpu_metrics(MetricsRegistry& registry, std::function<std::vector<gpu::GpuDeviceStats>()> devices) {
    using Value = double (*)(const gpu::GpuDeviceStats&);
    const auto family = [&](const char* name, const char* help, Value value, bool only_with_utilization) {
        registry.gauge_family_fn(name, help, {"device"}, [devices, value, only_with_utilization] {
            MetricsRegistry::LabelledValues out;
            for (const gpu::GpuDeviceStats& s : devices()) {
                if (only_with_utilization && !s.utilization) continue;
                out.push_back({{std::to_string(s.ordinal)}, value(s)});
            }
            return out;
        });
    };
    family("specd_gpu_memory_used_bytes", "GPU memory in use on the device (all processes).",
           [](const gpu::GpuDeviceStats& s) { return static_cast<double>(s.used_bytes); }, false);
    family("specd_gpu_memory_free_bytes", "GPU memory free on the device.",
           [](const gpu::GpuDeviceStats& s) { return static_cast<double>(s.free_bytes); }, false);
    family("specd_gpu_memory_total_bytes", "GPU memory on the device.",
           [](const gpu::GpuDeviceStats& s) { return static_cast<double>(s.total_bytes); }, false);
    family("specd_gpu_utilization_ratio", "Share of the last NVML sample period in which a kernel ran on the device (0..1).",
           [](const gpu::GpuDeviceStats& s) { return s.utilization.value_or(0.0); }, true);
}

}  // namespace specd::net
