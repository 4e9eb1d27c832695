// JSON in and out of the process, in one place: every client body and
// frame, config file and SIGHUP reload is parsed here, and every reply and
// log line that is JSON is written here. Parsing turns each of the JSON
// library's exceptions into one JsonTextError in specd's words (never the
// library's "[json.exception...]" text), refuses nesting deeper than
// kMaxJsonDepth before building anything, and never echoes invalid UTF-8.
// Writing replaces invalid UTF-8 with U+FFFD instead of throwing.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

// valid_utf8, utf8_excerpt: how text from a client or a file is made safe
// to echo into a reply or a log line (engine/utf8.h; the same repair the
// writers below apply), for the network layer's error messages.
#include "engine/utf8.h"

namespace specd {

// Deepest nesting of arrays and objects accepted. Requests and configs
// nest 3-4 levels; the limit keeps recursive walks (dump, destruction)
// of hostile input shallow.
inline constexpr int kMaxJsonDepth = 64;

// A one-line description of why the text is not acceptable JSON, e.g.
// "malformed JSON at byte 3: invalid literal near '“prompt'".
class JsonTextError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Throws JsonTextError; nothing else escapes (allocation failure aside).
nlohmann::json parse_json_text(std::string_view text);

// Compact JSON; strings that are not valid UTF-8 get U+FFFD for each
// invalid sequence.
std::string dump_json(const nlohmann::json& value);

}  // namespace specd
