// The /metrics page (net/metrics_page.h): the GPU families rendered from
// the values gpu/ measures, and the page of a real runtime, rendered on the
// page's collector thread (never the scraping one) with every family in
// the page's order and the figures a finished generation adds.
#include <catch2/catch.hpp>

#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "net/metrics_page.h"
#include "support/models.h"

using namespace specd;
using namespace specd::net;
using gpu::GpuDeviceStats;

namespace {

std::string render_gpu(const std::vector<GpuDeviceStats>& stats) {
    MetricsRegistry registry;
    register_gpu_metrics(registry, [stats] { return stats; });
    return registry.render();
}

// Scrapes and waits: the page and the thread it was rendered on.
std::pair<std::thread::id, std::string> scrape(MetricsPage& page) {
    std::promise<std::pair<std::thread::id, std::string>> rendered;
    page.scrape([&](const std::string& text) { rendered.set_value({std::this_thread::get_id(), text}); });
    return rendered.get_future().get();
}

bool has_line(const std::string& page, const std::string& line) { return page.find("\n" + line + "\n") != std::string::npos; }

}  // namespace

TEST_CASE("gpu metrics: a CPU backend (no device) prints nothing", "[metrics]") {
    std::string out = "before\n";
    out += render_gpu({});
    CHECK(out == "before\n");
}

TEST_CASE("gpu metrics: memory per device, utilisation only where NVML gave one", "[metrics]") {
    std::vector<GpuDeviceStats> stats(2);
    stats[0].ordinal = 0;
    stats[0].total_bytes = 1000;
    stats[0].free_bytes = 600;
    stats[0].used_bytes = 400;
    stats[0].utilization = 0.25;
    stats[1].ordinal = 1;
    stats[1].total_bytes = 2000;
    stats[1].free_bytes = 2000;
    stats[1].used_bytes = 0;
    std::string out = render_gpu(stats);
    CHECK(out ==
          "# HELP specd_gpu_memory_used_bytes GPU memory in use on the device (all processes).\n"
          "# TYPE specd_gpu_memory_used_bytes gauge\n"
          "specd_gpu_memory_used_bytes{device=\"0\"} 400\n"
          "specd_gpu_memory_used_bytes{device=\"1\"} 0\n"
          "# HELP specd_gpu_memory_free_bytes GPU memory free on the device.\n"
          "# TYPE specd_gpu_memory_free_bytes gauge\n"
          "specd_gpu_memory_free_bytes{device=\"0\"} 600\n"
          "specd_gpu_memory_free_bytes{device=\"1\"} 2000\n"
          "# HELP specd_gpu_memory_total_bytes GPU memory on the device.\n"
          "# TYPE specd_gpu_memory_total_bytes gauge\n"
          "specd_gpu_memory_total_bytes{device=\"0\"} 1000\n"
          "specd_gpu_memory_total_bytes{device=\"1\"} 2000\n"
          "# HELP specd_gpu_utilization_ratio Share of the last NVML sample period in which a kernel ran on the device (0..1).\n"
          "# TYPE specd_gpu_utilization_ratio gauge\n"
          "specd_gpu_utilization_ratio{device=\"0\"} 0.25\n");
    // Without NVML no device has a utilisation: the family is left out.
    stats[0].utilization.reset();
    out = render_gpu(stats);
    CHECK(out.find("specd_gpu_memory_used_bytes{device=\"0\"} 400") != std::string::npos);
    CHECK(out.find("utilization") == std::string::npos);
}


TEST_CASE("the page of a real runtime: rendered off the scraping thread, families in order, a generation's figures", "[metrics]") {
    RuntimeConfig c;
    c.target_model = test::model_path("stories15M-f32.gguf");
    c.draft_model = test::model_path("stories15M-q8_0.gguf");
    c.memory_budget_bytes = int64_t{1} << 30;
    c.device = "cpu";
    StandaloneRuntime host(c);
    MetricsPage page(host.runtime(), ServerGauges{[] { return 3.0; }, [] { return 0.0; }, [] { return 1.0; }});
    page.count_http_request();
    page.count_http_request();

    auto [thread, text] = scrape(page);
    CHECK(thread != std::this_thread::get_id());
    const runtime_stats s = host.runtime().stats();
    REQUIRE(s.kv_target_blocks > 0);
    CHECK(has_line(text, "specd_kv_blocks_total " + std::to_string(s.kv_target_blocks)));
    CHECK(has_line(text, "specd_kv_blocks_used 0"));
    CHECK(has_line(text, "specd_http_requests_total 2"));
    CHECK(has_line(text, "specd_open_connections 3"));
    CHECK(has_line(text, "specd_active_generations 1"));
    CHECK(has_line(text, "specd_draft_model_loaded 1"));
    CHECK(has_line(text, "specd_draft_max " + std::to_string(host.runtime().speculation().draft_max)));
    CHECK(text.find("specd_gpu_") == std::string::npos);
    CHECK(text.find("specd_spec_position_acceptance_ratio") == std::string::npos);  // nothing drafted yet
    const std::vector<std::string> order = {"specd_http_requests_total", "specd_generations_total", "specd_time_to_first_token_seconds",
                                            "specd_kv_blocks_total", "specd_open_connections", "specd_speculation_enabled",
                                            "specd_spec_low_acceptance_windows_total", "process_resident_memory_bytes",
                                            "process_cpu_seconds_total", "process_start_time_seconds"};
    for (size_t i = 1; i < order.size(); ++i) CHECK(text.find("# HELP " + order[i - 1]) < text.find("# HELP " + order[i]));

    done_event d;
    d.finish_reason = "cancelled";
    d.prompt_tokens = 5;
    d.drafted = 4;
    d.accepted = 3;
    d.drafted_per_position = {2, 2};
    d.accepted_per_position = {2, 1};
    page.record_done(d);
    page.record_tokens(3, true, 0.004);
    text = scrape(page).second;
    CHECK(has_line(text, "specd_generations_total 1"));
    CHECK(has_line(text, "specd_generations_cancelled_total 1"));
    CHECK(has_line(text, "specd_prompt_tokens_total 5"));
    CHECK(has_line(text, "specd_completion_tokens_total 3"));
    CHECK(has_line(text, "specd_spec_accepted_tokens_total 3"));
    CHECK(has_line(text, "specd_spec_position_acceptance_ratio{position=\"0\"} 1"));
    CHECK(has_line(text, "specd_spec_position_acceptance_ratio{position=\"1\"} 0.5"));
    CHECK(has_line(text, "specd_time_to_first_token_seconds_bucket{le=\"0.002\"} 0"));
    CHECK(has_line(text, "specd_time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
}
