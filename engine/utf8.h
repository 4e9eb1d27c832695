// UTF-8 repair as the WHATWG decoder does it: each maximal invalid
// subsequence becomes one U+FFFD, valid characters pass through unchanged.
// Used for every string that leaves the process (client replies, logs) and
// by the tokenizer's stream decoder, so bytes from a client, a file or a
// byte-level token never reach a JSON writer invalid.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace specd {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

// Incremental: feed() appends only complete characters to `out` and holds
// an incomplete tail back until the next feed() completes it or finish()
// replaces it.
class Utf8Repair {
public:
    void feed(std::string_view bytes, std::string& out);
    // An incomplete held-back character becomes U+FFFD; feeding may go on.
    void finish(std::string& out);
    void reset();

private:
    uint8_t pending_[4] = {};              // bytes of an incomplete character
    int32_t n_pending_ = 0;
    int32_t n_needed_ = 0;                 // continuation bytes still expected
    uint8_t lower_ = 0x80, upper_ = 0xBF;  // allowed range of the next continuation byte
};

// `bytes` with every invalid sequence replaced (a truncated tail included).
std::string valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// At most `max_bytes` of valid UTF-8 text, cut at a character boundary,
// with "..." appended when something was cut (for echoing input in errors).
std::string utf8_excerpt(std::string_view bytes, size_t max_bytes);

}  // namespace specd
