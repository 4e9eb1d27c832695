// Watches the speculative acceptance rate over windows of drafted tokens
// and reports a window that ended below a threshold: the deployment guide's
// signal to retune or retrain the draft. Part of the server's monitoring
// (the request log feeds it finished requests' done_event figures), so it
// lives in net/ beside the metrics page; the runtime only counts. Not thread-safe (the server calls
// it under a lock).
//
//   AcceptanceWatch watch(0.3, 1024);
//   if (auto low = watch.record(d.drafted, d.accepted)) log_warning(low->rate);
#pragma once

#include <cstdint>
#include <optional>

namespace specd {

struct AcceptanceWindow {
    int64_t drafted = 0;
    int64_t accepted = 0;
    int64_t requests = 0;  // requests that drafted in this window
    double rate() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

class AcceptanceWatch {
public:
    // threshold in [0, 1]; window_drafted: drafted tokens per window, 0 turns it off.
    AcceptanceWatch(double threshold, int64_t window_drafted) { reconfigure(threshold, window_drafted); }
    // Starts a new window with the new settings.
    void reconfigure(double threshold, int64_t window_drafted);
    // Adds one request's figures (requests that drafted nothing don't count).
    // When that fills the window, returns it if its rate was below the
    // threshold, and starts the next window either way.
    std::optional<AcceptanceWindow> record(int64_t drafted, int64_t accepted);
    const AcceptanceWindow& current() const { return current_; }

private:
    double threshold_ = 0.0;
    int64_t window_ = 0;
    AcceptanceWindow current_;
};

}  // namespace specd
