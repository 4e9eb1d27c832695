#include "net/acceptance_watch.h"

namespace specd {

void AcceptanceWatch::reconfigure(double threshold, int64_t window_drafted) {
    threshold_ = threshold;
    window_ = window_drafted;
    current_ = {};
}

std::optional<AcceptanceWindow> AcceptanceWatch::record(int64_t drafted, int64_t accepted) {
    if (window_ <= 0 || drafted <= 0) return std::nullopt;
    current_.drafted += drafted;
    current_.accepted += accepted;
    ++current_.requests;
    if (current_.drafted < window_) return std::nullopt;
    const AcceptanceWindow done = current_;
    current_ = {};
    if (done.rate() < threshold_) return done;
    return std::nullopt;
}

}  // namespace specd
