// Stop sequences (OpenAI's `stop`, llama-server's `stop`) over streamed
// text: the generation ends where one of the strings first appears, and the
// reply ends before it. A string may complete inside a run of accepted
// draft tokens or span token boundaries, so the matcher works on text, not
// tokens, and holds back only the tail that could still start a stop
// string; everything before it may be streamed at once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace specd {

// The most stop strings a request may give, and the longest (bytes):
// OpenAI allows 4; llama-server more.
inline constexpr size_t kMaxStopSequences = 16;
inline constexpr size_t kMaxStopSequenceBytes = 256;

class StopMatcher {
public:
    StopMatcher() = default;
    // Empty strings are ignored.
    explicit StopMatcher(const std::vector<std::string>& stops);

    bool active() const { return !stops_.empty(); }
    // Appends to `out` the text that can no longer be part of a stop string.
    // Returns true when a stop string completed: `out` then ends just before
    // it, the rest is dropped, and later feeds append nothing.
    bool feed(std::string_view text, std::string& out);
    // The end of the generation: the held-back tail is released (unless a
    // stop string matched).
    void flush(std::string& out);
    bool stopped() const { return stopped_; }
    // The stop string that ended the text ("" until one has).
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string matched_;
    std::string held_;      // text that may still begin a stop string (shorter than the longest)
    bool stopped_ = false;
};

}  // namespace specd
