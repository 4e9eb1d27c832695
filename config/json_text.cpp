#include "config/json_text.h"

#include <algorithm>

#include "engine/utf8.h"

namespace specd {

namespace {

// The deepest nesting of arrays and objects in `text`, strings skipped;
// stops counting once past `limit`. Malformed text is left to the parser.
int nesting_depth(std::string_view text, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit) return deepest;
        } else if (c == ']' || c == '}') {
            depth = std::max(0, depth - 1);
        }
    }
    return deepest;
}

// The library's explanation without its "[json.exception...] parse error at
// line L, column C: " prefix and "; last read: '...'" suffix (that echo may
// cut a UTF-8 character in half; we quote the input ourselves).
std::string library_reason(const std::string& what) {
    std::string reason = what;
    const size_t colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
    const size_t last_read = reason.find("; last read");
    if (last_read != std::string::npos) reason.resize(last_read);
    for (const char* prefix : {"syntax error while parsing value - ", "syntax error while parsing object - ",
                               "syntax error while parsing array - ", "syntax error while parsing object key - ",
                               "syntax error while parsing object separator - "}) {
        if (reason.rfind(prefix, 0) == 0) reason = reason.substr(std::char_traits<char>::length(prefix));
    }
    return valid_utf8(reason);
}

// The input near an error, quoted on one line: valid UTF-8, cut short,
// control bytes shown as escapes (\n, \x01) instead of breaking the line.
std::string quoted_input(std::string_view text) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const char c : utf8_excerpt(text, 24)) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (u < 0x20 || u == 0x7F) out += std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
        else out += c;
    }
    return out;
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text) {
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) throw JsonTextError("the JSON text is empty");
    if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
        throw JsonTextError("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        // e.byte is 1-based: the byte at which the parser stopped.
        const size_t at = e.byte > 0 ? std::min<size_t>(e.byte - 1, text.size()) : 0;
        const size_t from = at > 16 ? at - 16 : 0;
        std::string message = "malformed JSON at byte " + std::to_string(e.byte) + ": " + library_reason(e.what());
        if (!text.empty()) message += " near '" + quoted_input(text.substr(from, at - from + 8)) + "'";
        throw JsonTextError(message);
    } catch (const nlohmann::json::out_of_range&) {
        throw JsonTextError("a number in the JSON is out of range (beyond a double's ±1.8e308)");
    } catch (const nlohmann::json::exception& e) {
        throw JsonTextError("malformed JSON: " + library_reason(e.what()));
    }
}

std::string dump_json(const nlohmann::json& value) { return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace specd
