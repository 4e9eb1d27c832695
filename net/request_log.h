// One summary line per finished request (config/log.h), and the
// acceptance watch over them: a window of drafted tokens whose acceptance
// rate ended below the threshold is logged as a warning and counted.
// Thread-safe (generations end on CAF threads).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "actors/messages.h"
#include "net/metrics_page.h"

namespace specd {
class AcceptanceWatch;
}

namespace specd::net {

class RequestLog {
public:
    // low_rate, window_drafted: ServerOptions' low_acceptance_rate and
    // low_acceptance_window (0: no warning). `page` counts the low windows.
    RequestLog(double low_rate, int64_t window_drafted, MetricsPage& page);
    ~RequestLog();

    // `transport`: "http" or "ws"; `request_id`: the id the log shows.
    void done(const done_event& d, const char* transport, const std::string& request_id);
    void failed(const error_event& e, const char* transport, const std::string& request_id);
    // Starts a new acceptance window with these settings (SIGHUP reload).
    void set_acceptance_watch(double low_rate, int64_t window_drafted);

private:
    MetricsPage& page_;
    std::mutex mu_;
    double low_rate_;         // under mu_
    std::unique_ptr<AcceptanceWatch> watch_;  // under mu_ (net/acceptance_watch.h)
};

}  // namespace specd::net
