// Properties the network fuzz targets check on what specd sends back to a
// client (fuzz_request, fuzz_ws_message, fuzz_error_reply): valid UTF-8,
// parseable JSON, the documented error shapes, messages in specd's words.
// The UTF-8 check is written here, independently of engine/utf8.h, so the
// oracle is not the code under test. Every violation aborts with a line on
// stderr, which libFuzzer reports as a crash with the input saved.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/utf8_oracle.h"
#include "net/api.h"

namespace specd::fuzz {

[[noreturn]] inline void fail(const char* target, const std::string& what) {
    std::fprintf(stderr, "%s: property violated: %s\n", target, what.c_str());
    std::abort();
}


// A message a client or a log reads: valid UTF-8, and never the JSON
// library's own wording ("[json.exception.parse_error.101] ...") unless the
// input itself held those words (an echoed snippet). A parse error is one
// line (issue 31; config/json_text.h), even when it quotes the input.
inline void check_message(const char* target, const std::string& message, std::string_view input, bool parse_error) {
    if (!is_utf8(message)) fail(target, "message is not valid UTF-8");
    if (message.find("json.exception") != std::string::npos && input.find("json.exception") == std::string_view::npos)
        fail(target, "message quotes the JSON library: " + message);
    if (parse_error && message.find_first_of("\r\n") != std::string::npos) fail(target, "a parse error is not one line: " + message);
}

// Parses text that specd sends as JSON; any failure is a violation.
inline nlohmann::json parse_reply(const char* target, const std::string& text) {
    if (!is_utf8(text)) fail(target, "reply is not valid UTF-8");
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(target, std::string("reply is not JSON: ") + e.what());
    }
}

// The ApiError a parser threw, and the OpenAI error body written from it
// ({"error": {"message", "type", "param", "code"}}): what the client reads.
inline void check_api_error(const char* target, const net::ApiError& e, std::string_view input) {
    if (e.status < 400 || e.status > 599) fail(target, "ApiError status " + std::to_string(e.status) + " is not 4xx/5xx");
    if (e.code.empty()) fail(target, "ApiError without a code");
    const nlohmann::json body = parse_reply(target, net::error_body(e));
    if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) fail(target, "error body has no error object");
    const nlohmann::json& err = body["error"];
    if (!err.contains("message") || !err["message"].is_string()) fail(target, "error.message is not a string");
    check_message(target, err["message"].get<std::string>(), input, e.code == "invalid_json");
    if (!err.contains("type") || !err["type"].is_string()) fail(target, "error.type is not a string");
    if (!err.contains("code") || !err["code"].is_string()) fail(target, "error.code is not a string");
    if (!err.contains("param") || !(err["param"].is_null() || err["param"].is_string())) fail(target, "error.param is neither null nor a string");
}

// A WebSocket error frame: {"type": "error", "id": null|string, "code", "message"}.
inline nlohmann::json check_ws_error_frame(const char* target, const std::string& frame, std::string_view input) {
    const nlohmann::json f = parse_reply(target, frame);
    if (!f.is_object() || f.value("type", "") != "error") fail(target, "frame is not an error frame: " + frame.substr(0, 200));
    if (!f.contains("id") || !(f["id"].is_null() || f["id"].is_string())) fail(target, "error frame id is neither null nor a string");
    if (!f.contains("code") || !f["code"].is_string() || f["code"].get<std::string>().empty()) fail(target, "error frame without a code");
    if (!f.contains("message") || !f["message"].is_string()) fail(target, "error frame message is not a string");
    check_message(target, f["message"].get<std::string>(), input, f["code"] == "invalid_json");
    return f;
}

}  // namespace specd::fuzz
