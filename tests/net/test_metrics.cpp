// The metrics registry: the exact exposition text of counters, labelled
// families, gauges (set and callback) and histograms, number formatting,
// escaping, name and label validation, and updates from several threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "net/metrics.h"

using specd::Counter;
using specd::Gauge;
using specd::Histogram;
using specd::MetricsRegistry;

namespace {

std::string value_text(double value) {
    std::string out;
    specd::append_metric_value(out, value);
    return out;
}

}  // namespace

TEST_CASE("a counter renders HELP, TYPE and its value", "[metrics]") {
    MetricsRegistry metrics;
    Counter& served = metrics.counter("specd_requests_total", "Requests served.");
    served.inc();
    served.inc(2);
    CHECK(served.value() == 3);
    CHECK(metrics.render() ==
          "# HELP specd_requests_total Requests served.\n"
          "# TYPE specd_requests_total counter\n"
          "specd_requests_total 3\n");
}

TEST_CASE("metrics with one name and different labels form one family under one header", "[metrics]") {
    MetricsRegistry metrics;
    Counter& get = metrics.counter("http_requests_total", "HTTP requests.", {{"method", "GET"}, {"code", "200"}});
    Counter& post = metrics.counter("http_requests_total", "HTTP requests.", {{"method", "POST"}, {"code", "200"}});
    metrics.gauge("specd_in_flight", "Requests in flight.").set(2);
    get.inc(5);
    post.inc();
    // Asking again, labels in any order, gives the same series.
    CHECK(&metrics.counter("http_requests_total", "HTTP requests.", {{"code", "200"}, {"method", "GET"}}) == &get);
    CHECK(metrics.render() ==
          "# HELP http_requests_total HTTP requests.\n"
          "# TYPE http_requests_total counter\n"
          "http_requests_total{method=\"GET\",code=\"200\"} 5\n"
          "http_requests_total{method=\"POST\",code=\"200\"} 1\n"
          "# HELP specd_in_flight Requests in flight.\n"
          "# TYPE specd_in_flight gauge\n"
          "specd_in_flight 2\n");
}

TEST_CASE("a gauge sets and adds, a callback gauge is read at each render", "[metrics]") {
    MetricsRegistry metrics;
    Gauge& free_blocks = metrics.gauge("specd_kv_blocks_free", "Free KV blocks.");
    free_blocks.set(10);
    free_blocks.add(-2.5);
    free_blocks.inc();
    free_blocks.dec();
    CHECK(free_blocks.value() == 7.5);
    std::atomic<int> used{3};
    metrics.gauge_fn("specd_kv_blocks_used", "KV blocks in use.", [&] { return double(used.load()); },
                     {{"pool", "main"}});
    const std::string header =
        "# HELP specd_kv_blocks_free Free KV blocks.\n"
        "# TYPE specd_kv_blocks_free gauge\n"
        "specd_kv_blocks_free 7.5\n"
        "# HELP specd_kv_blocks_used KV blocks in use.\n"
        "# TYPE specd_kv_blocks_used gauge\n";
    CHECK(metrics.render() == header + "specd_kv_blocks_used{pool=\"main\"} 3\n");
    used = 42;
    CHECK(metrics.render() == header + "specd_kv_blocks_used{pool=\"main\"} 42\n");
}

TEST_CASE("a callback counter is read at each render, and a callback family renders its series, or nothing when it has none",
          "[metrics]") {
    MetricsRegistry metrics;
    double cpu = 0.25;
    metrics.counter_fn("process_cpu_seconds_total", "CPU time.", [&] { return cpu; });
    MetricsRegistry::LabelledValues devices;
    metrics.gauge_family_fn("specd_gpu_memory_used_bytes", "GPU memory.", {"device", "kind"}, [&] { return devices; });
    const std::string cpu_text =
        "# HELP process_cpu_seconds_total CPU time.\n"
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total ";
    CHECK(metrics.render() == cpu_text + "0.25\n");
    cpu = 1.5;
    devices = {{{"0", "a\"b"}, 400}, {{"1", ""}, 0}};
    CHECK(metrics.render() == cpu_text + "1.5\n"
                              "# HELP specd_gpu_memory_used_bytes GPU memory.\n"
                              "# TYPE specd_gpu_memory_used_bytes gauge\n"
                              "specd_gpu_memory_used_bytes{device=\"0\",kind=\"a\\\"b\"} 400\n"
                              "specd_gpu_memory_used_bytes{device=\"1\",kind=\"\"} 0\n");
    // A family's series come from its callback only; bad label names are errors.
    CHECK_THROWS_AS(metrics.gauge("specd_gpu_memory_used_bytes", "GPU memory.", {{"device", "2"}}), specd::Error);
    CHECK_THROWS_AS(metrics.gauge_family_fn("specd_x", "x", {"le-bad"}, [] { return MetricsRegistry::LabelledValues{}; }),
                    specd::Error);
    CHECK_THROWS_AS(metrics.counter("process_cpu_seconds_total", "CPU time."), specd::Error);
}

TEST_CASE("a histogram renders cumulative buckets with +Inf, then _sum and _count", "[metrics]") {
    MetricsRegistry metrics;
    Histogram& latency = metrics.histogram("specd_request_seconds", "Request latency.", {0.25, 0.5, 1});
    Histogram& labelled =
        metrics.histogram("specd_request_seconds", "Request latency.", {0.25, 0.5, 1}, {{"route", "/v1/chat"}});
    for (double v : {0.125, 0.25, 0.5, 4.0}) latency.observe(v);  // a value on a bound goes into that bucket
    labelled.observe(0.75);
    CHECK(latency.count() == 4);
    CHECK(latency.sum() == 4.875);
    CHECK(latency.bucket_counts() == std::vector<uint64_t>{2, 1, 0, 1});
    CHECK(metrics.render() ==
          "# HELP specd_request_seconds Request latency.\n"
          "# TYPE specd_request_seconds histogram\n"
          "specd_request_seconds_bucket{le=\"0.25\"} 2\n"
          "specd_request_seconds_bucket{le=\"0.5\"} 3\n"
          "specd_request_seconds_bucket{le=\"1\"} 3\n"
          "specd_request_seconds_bucket{le=\"+Inf\"} 4\n"
          "specd_request_seconds_sum 4.875\n"
          "specd_request_seconds_count 4\n"
          "specd_request_seconds_bucket{route=\"/v1/chat\",le=\"0.25\"} 0\n"
          "specd_request_seconds_bucket{route=\"/v1/chat\",le=\"0.5\"} 0\n"
          "specd_request_seconds_bucket{route=\"/v1/chat\",le=\"1\"} 1\n"
          "specd_request_seconds_bucket{route=\"/v1/chat\",le=\"+Inf\"} 1\n"
          "specd_request_seconds_sum{route=\"/v1/chat\"} 0.75\n"
          "specd_request_seconds_count{route=\"/v1/chat\"} 1\n");
}

TEST_CASE("histogram bounds: a trailing +Inf is implied, none means only +Inf, NaN lands in +Inf", "[metrics]") {
    Histogram with_inf({1, 2, std::numeric_limits<double>::infinity()});
    CHECK(with_inf.upper_bounds() == std::vector<double>{1, 2});
    Histogram only_inf({});
    only_inf.observe(-3);
    CHECK(only_inf.bucket_counts() == std::vector<uint64_t>{1});
    Histogram one({1});
    one.observe(std::nan(""));
    CHECK(one.bucket_counts() == std::vector<uint64_t>{0, 1});
    CHECK_THROWS_AS(Histogram({1, 0.5}), specd::Error);
    CHECK_THROWS_AS(Histogram({1, 1}), specd::Error);
    CHECK_THROWS_AS(Histogram({std::nan("")}), specd::Error);
    CHECK_THROWS_AS(Histogram({-std::numeric_limits<double>::infinity(), 1}), specd::Error);
}

TEST_CASE("numbers print as integers without exponent noise, others in shortest exact form", "[metrics]") {
    CHECK(value_text(3) == "3");
    CHECK(value_text(0) == "0");
    CHECK(value_text(-0.0) == "0");
    CHECK(value_text(-17) == "-17");
    CHECK(value_text(1e6) == "1000000");
    CHECK(value_text(9007199254740992.0) == "9007199254740992");
    CHECK(value_text(0.1) == "0.1");
    CHECK(value_text(-2.5) == "-2.5");
    CHECK(value_text(1e-7) == "1e-07");
    CHECK(value_text(1e300) == "1e+300");
    CHECK(value_text(std::numeric_limits<double>::infinity()) == "+Inf");
    CHECK(value_text(-std::numeric_limits<double>::infinity()) == "-Inf");
    CHECK(value_text(std::nan("")) == "NaN");
}

TEST_CASE("label values escape backslash, quote and newline, and help escapes backslash and newline", "[metrics]") {
    MetricsRegistry metrics;
    metrics.counter("specd_odd_total", "Line one\\two\nline \"three\".", {{"path", "C:\\dir \"x\"\nend"}}).inc();
    CHECK(metrics.render() ==
          "# HELP specd_odd_total Line one\\\\two\\nline \"three\".\n"
          "# TYPE specd_odd_total counter\n"
          "specd_odd_total{path=\"C:\\\\dir \\\"x\\\"\\nend\"} 1\n");
}

TEST_CASE("bad metric and label names are errors", "[metrics]") {
    MetricsRegistry metrics;
    for (const char* name : {"", "9lives", "has-dash", "has space", "é"}) {
        INFO(name);
        CHECK_THROWS_AS(metrics.counter(name, "x"), specd::Error);
        CHECK_THROWS_AS(metrics.gauge(name, "x"), specd::Error);
        CHECK_THROWS_AS(metrics.histogram(name, "x", {1}), specd::Error);
        CHECK_THROWS_AS(metrics.gauge_fn(name, "x", [] { return 0.0; }), specd::Error);
    }
    CHECK_THROWS_WITH(metrics.counter("9lives", "x"), Catch::Contains("\"9lives\"") &&
                                                          Catch::Contains("[a-zA-Z_:][a-zA-Z0-9_:]*"));
    CHECK_NOTHROW(metrics.counter("job:rate_5m", "colons are allowed in metric names"));
    CHECK_NOTHROW(metrics.counter("_Under9", "x"));
    CHECK_THROWS_AS(metrics.counter("ok_total", "x", {{"has:colon", "v"}}), specd::Error);
    CHECK_THROWS_AS(metrics.counter("ok_total", "x", {{"__reserved", "v"}}), specd::Error);
    CHECK_THROWS_AS(metrics.counter("ok_total", "x", {{"a", "1"}, {"a", "2"}}), specd::Error);
    CHECK_THROWS_AS(metrics.histogram("ok_seconds", "x", {1}, {{"le", "1"}}), specd::Error);
    // Nothing half-registered is left behind by the failures.
    CHECK(metrics.render().find("ok_") == std::string::npos);
}

TEST_CASE("a name reused with another type, help or bucket bounds is an error", "[metrics]") {
    MetricsRegistry metrics;
    metrics.counter("specd_things_total", "Things.");
    CHECK_THROWS_WITH(metrics.gauge("specd_things_total", "Things."), Catch::Contains("counter"));
    CHECK_THROWS_AS(metrics.counter("specd_things_total", "Other things."), specd::Error);
    metrics.histogram("specd_wait_seconds", "Wait.", {1, 2});
    CHECK_THROWS_AS(metrics.histogram("specd_wait_seconds", "Wait.", {1, 3}, {{"a", "b"}}), specd::Error);
    CHECK_THROWS_AS(metrics.counter("specd_wait_seconds_count", "Clashes with the histogram's series."), specd::Error);
    metrics.gauge("specd_level", "Level.");
    CHECK_THROWS_AS(metrics.gauge_fn("specd_level", "Level.", [] { return 1.0; }), specd::Error);
    CHECK_THROWS_AS(metrics.counter("specd_things_total", "Things.").inc(-1), specd::Error);
}

TEST_CASE("updates from 4 threads add up exactly", "[metrics]") {
    MetricsRegistry metrics;
    Counter& counter = metrics.counter("specd_events_total", "Events.");
    Gauge& gauge = metrics.gauge("specd_balance", "Balance.");
    Histogram& histogram = metrics.histogram("specd_sizes", "Sizes.", {10, 100});
    constexpr int kThreads = 4;
    constexpr int kPerThread = 100000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < kPerThread; ++i) {
                counter.inc();
                gauge.add(2);
                histogram.observe(i % 200);  // 0..199: 11 in <=10, 90 in <=100, 99 above, per 200
            }
        });
    }
    // Scrapes while the updates run must not disturb them.
    for (int i = 0; i < 10; ++i) CHECK_FALSE(metrics.render().empty());
    for (std::thread& thread : threads) thread.join();
    CHECK(counter.value() == kThreads * kPerThread);
    CHECK(gauge.value() == 2.0 * kThreads * kPerThread);
    CHECK(histogram.count() == uint64_t(kThreads) * kPerThread);
    constexpr uint64_t kRounds = uint64_t(kThreads) * kPerThread / 200;
    CHECK(histogram.bucket_counts() == std::vector<uint64_t>{11 * kRounds, 90 * kRounds, 99 * kRounds});
    CHECK(histogram.sum() == double(kRounds) * (199.0 * 200.0 / 2.0));
}
