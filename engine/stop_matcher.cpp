#include "engine/stop_matcher.h"

#include <algorithm>

namespace specd {

StopMatcher::StopMatcher(const std::vector<std::string>& stops) {
    for (const std::string& s : stops)
        if (!s.empty()) stops_.push_back(s);
}

bool StopMatcher::feed(std::string_view text, std::string& out) {
    if (stopped_) return true;
    if (stops_.empty()) {
        out.append(text);
        return false;
    }
    held_.append(text);
    // The earliest occurrence of any stop string ends the text.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = held_.find(s);
        if (at < first) {  // the first string listed wins a tie (llama-server's order)
            first = at;
            matched_ = s;
        }
    }
    if (first != std::string::npos) {
        out.append(held_, 0, first);
        held_.clear();
        stopped_ = true;
        return true;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const std::string& s : stops_) {
        for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
        }
    }
    out.append(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return false;
}

void StopMatcher::flush(std::string& out) {
    if (!stopped_) out += held_;
    held_.clear();
}

}  // namespace specd
