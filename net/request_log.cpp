// Request summary lines and the acceptance watch; see request_log.h.
#include "net/request_log.h"

#include <cmath>
#include <optional>

#include "config/log.h"
#include "net/acceptance_watch.h"

namespace specd::net {

using nlohmann::json;

RequestLog::RequestLog(double low_rate, int64_t window_drafted, MetricsPage& page)
    : page_(page), low_rate_(low_rate), watch_(std::make_unique<AcceptanceWatch>(low_rate, window_drafted)) {}

RequestLog::~RequestLog() = default;

void RequestLog::done(const done_event& d, const char* transport, const std::string& request_id) {
    const double decode_ms = d.total_ms - d.ttft_ms;
    json fields = {{"request_id", request_id},
                   {"transport", transport},
                   {"finish_reason", d.finish_reason},
                   {"prompt_tokens", d.prompt_tokens},
                   {"cached_prompt_tokens", d.cached_prompt_tokens},
                   {"completion_tokens", d.completion_tokens},
                   {"speculative", d.speculative},
                   {"drafted", d.drafted},
                   {"accepted", d.accepted},
                   {"acceptance_rate", d.drafted > 0 ? std::round(1000.0 * d.accepted / d.drafted) / 1000.0 : 0.0},
                   {"tokens_per_s", d.total_ms > 0 ? std::round(10000.0 * d.completion_tokens / d.total_ms) / 10.0 : 0.0},
                   {"decode_tokens_per_s",
                    decode_ms > 0 && d.completion_tokens > 1 ? std::round(10000.0 * (d.completion_tokens - 1) / decode_ms) / 10.0 : 0.0},
                   {"ttft_ms", std::round(10.0 * d.ttft_ms) / 10.0},
                   {"total_ms", std::round(10.0 * d.total_ms) / 10.0}};
    log::info("request done", fields);
    std::optional<AcceptanceWindow> low;
    double threshold = 0.0;
    {
        std::lock_guard<std::mutex> lock(mu_);
        low = watch_->record(d.drafted, d.accepted);
        threshold = low_rate_;
    }
    if (low) {
        page_.record_low_acceptance_window();
        log::warn("low speculative acceptance: retune draft_max or retrain the draft model",
                  {{"acceptance_rate", std::round(1000.0 * low->rate()) / 1000.0},
                   {"threshold", threshold},
                   {"window_drafted", low->drafted},
                   {"window_accepted", low->accepted},
                   {"window_requests", low->requests}});
    }
}

void RequestLog::failed(const error_event& e, const char* transport, const std::string& request_id) {
    log::warn("request failed", {{"request_id", request_id}, {"transport", transport}, {"code", e.code}, {"message", e.message}});
}

void RequestLog::set_acceptance_watch(double low_rate, int64_t window_drafted) {
    std::lock_guard<std::mutex> lock(mu_);
    low_rate_ = low_rate;
    watch_->reconfigure(low_rate, window_drafted);
}

}  // namespace specd::net
