// A Prometheus metrics registry for the /metrics page: counters, gauges
// (set by the code or read from a callback at scrape time) and histograms,
// rendered in the Prometheus text exposition format 0.0.4.
//
// Metrics are registered at start-up (that takes a lock) and updated from
// any thread without one: every value is a std::atomic, and the references
// the registry hands out stay valid for its lifetime. Metrics sharing a name
// with different labels form one family under one HELP / TYPE header.
//
//   MetricsRegistry metrics;
//   Counter& tokens = metrics.counter("specd_tokens_generated_total", "Tokens generated.");
//   Histogram& latency = metrics.histogram("specd_request_seconds", "Request latency.", {0.1, 0.5, 1, 5});
//   tokens.inc(12);  latency.observe(0.42);
//   std::string page = metrics.render();   // served with kMetricsContentType
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specd {

// The Content-Type header for render()'s text.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// A metric's labels: (name, value) pairs, rendered in this order. Names must
// match [a-zA-Z_][a-zA-Z0-9_]*, must not start with "__" (reserved by
// Prometheus) nor repeat; values are any UTF-8 text (escaped on output).
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (requests served, tokens generated).
class Counter {
public:
    Counter() = default;
    Counter(const Counter&) = delete;
    Counter& operator=(const Counter&) = delete;

    // Adds `amount` (default 1); a negative or NaN amount throws
    // specd::Error, since a counter that goes down breaks rate().
    void inc(double amount = 1.0);
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

// A value that goes up and down (requests in flight, KV blocks free).
class Gauge {
public:
    Gauge() = default;
    Gauge(const Gauge&) = delete;
    Gauge& operator=(const Gauge&) = delete;

    void set(double value) { value_.store(value, std::memory_order_relaxed); }
    void add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }  // negative to subtract
    void inc() { add(1.0); }
    void dec() { add(-1.0); }
    double value() const { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0.0};
};

// Counts observations into buckets by upper bound (an observation v goes
// into the first bucket with v <= bound, or the implicit +Inf one) and keeps
// their sum. Rendered as cumulative _bucket{le="..."} lines, _sum, _count.
class Histogram {
public:
    // `upper_bounds`: finite and strictly increasing (a trailing +Inf is
    // dropped, it is always implied); may be empty (then only +Inf).
    // Throws specd::Error otherwise.
    explicit Histogram(std::vector<double> upper_bounds);
    Histogram(const Histogram&) = delete;
    Histogram& operator=(const Histogram&) = delete;

    // Lock- and allocation-free. NaN counts in +Inf (and makes the sum NaN),
    // as in the Prometheus client libraries.
    void observe(double value);

    const std::vector<double>& upper_bounds() const { return upper_bounds_; }
    // Observations in each bucket, not cumulative; the last entry is +Inf.
    std::vector<uint64_t> bucket_counts() const;
    uint64_t count() const;  // the sum of bucket_counts()
    double sum() const { return sum_.load(std::memory_order_relaxed); }

private:
    std::vector<double> upper_bounds_;
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // upper_bounds_.size() + 1
    std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
public:
    MetricsRegistry();
    ~MetricsRegistry();
    MetricsRegistry(const MetricsRegistry&) = delete;
    MetricsRegistry& operator=(const MetricsRegistry&) = delete;

    // Each returns the metric with this name and labels, creating it (and
    // its family) on first use; asking again with the same name, help (and
    // bucket bounds) and labels returns the same object. Throws specd::Error
    // for a name not matching [a-zA-Z_:][a-zA-Z0-9_:]*, bad label names, a
    // name already registered as another type or with another help text,
    // or a histogram label named "le" or bounds that differ from the
    // family's. `help` is free text (escaped on output).
    Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
    Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
    Histogram& histogram(std::string_view name, std::string_view help, std::vector<double> bucket_upper_bounds,
                         const MetricLabels& labels = {});
    // A gauge whose value is `read()` at each render(), for values owned
    // elsewhere (KV blocks in use). read runs on the scraping thread, with
    // the registry's lock held: it must be thread-safe, quick, and must not
    // call back into the registry. Registering the same name and labels
    // again replaces the callback.
    void gauge_fn(std::string_view name, std::string_view help, std::function<double()> read,
                  const MetricLabels& labels = {});
    // The same for a counter owned elsewhere (process_cpu_seconds_total):
    // `read()` must never go down.
    void counter_fn(std::string_view name, std::string_view help, std::function<double()> read,
                    const MetricLabels& labels = {});
    // A gauge family whose series are read at each render(), for a set of
    // things known only then (GPU devices, draft positions): `read()` gives
    // one (label values, value) per series, the values in the order of
    // `label_names`. A read with no series renders no family at all (no
    // HELP / TYPE either), so a CPU server has no GPU lines. The same rules
    // as gauge_fn for `read`; registering the name again replaces it.
    using LabelledValues = std::vector<std::pair<std::vector<std::string>, double>>;
    void gauge_family_fn(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                         std::function<LabelledValues()> read);

    // The text exposition format 0.0.4: families in registration order, each
    // "# HELP name help" and "# TYPE name type" then one sample per line,
    // metrics in registration order. Numbers: integral values up to 2^53 as
    // integers ("3"), others in the shortest form that reads back exactly
    // ("0.25", "1e-07"), and "+Inf", "-Inf", "NaN". Label values escape
    // backslash, double quote and newline; help text backslash and newline.
    std::string render() const;

private:
    struct Family;
    Family& family(std::string_view name, std::string_view help, int type);
    void value_fn(std::string_view name, std::string_view help, int type, std::function<double()> read,
                  const MetricLabels& labels);
    mutable std::mutex mutex_;                       // registration and render
    std::vector<std::unique_ptr<Family>> families_;  // registration order
};

// This process's figures for the standard process_* metrics, read from
// /proc (zeros where it can't be read).
struct ProcessStats {
    uint64_t resident_bytes = 0;  // RSS
    uint64_t virtual_bytes = 0;
    double cpu_seconds = 0.0;     // user + system
    uint64_t open_fds = 0;
    uint64_t threads = 0;
};
ProcessStats read_process_stats();

// One number as render() writes it, appended to `out`.
void append_metric_value(std::string& out, double value);

}  // namespace specd
