// libFuzzer target for the error-reply writers: net::error_body (the
// OpenAI error object of every HTTP error) and net::ws_error_frame, with
// fuzzed status, code, message, param and id bytes. Their text comes from
// clients (echoed snippets of a body, a path, an id), so it can be any
// bytes, invalid UTF-8 included.
//
// Properties checked on every input:
//  1. Neither writer throws (an exception is uncaught here and libFuzzer
//     reports it).
//  2. The reply is valid UTF-8 and parses as JSON of the documented shape:
//     {"error":{"message","type","param","code"}}, param null when empty;
//     {"type":"error","id":null|string,"code","message"}.
//  3. Valid UTF-8 text comes back unchanged; text with invalid bytes comes
//     back with U+FFFD in their place (never dropped silently, never raw).
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/error_reply/.
#include <cstddef>
#include <cstdint>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz/reply_checks.h"
#include "net/api.h"

namespace {

using nlohmann::json;
using specd::fuzz::fail;

constexpr const char* kTarget = "fuzz_error_reply";
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// `field` of the reply holds `sent` as the writers promise.
void check_text(const json& reply, const char* field, const std::string& sent) {
    if (!reply.contains(field) || !reply[field].is_string()) fail(kTarget, std::string(field) + " is not a string");
    const std::string got = reply[field].get<std::string>();
    if (specd::fuzz::is_utf8(sent)) {
        if (got != sent) fail(kTarget, std::string(field) + ": valid UTF-8 came back changed");
    } else if (got.find(kReplacement) == std::string::npos) {
        fail(kTarget, std::string(field) + ": invalid UTF-8 came back without U+FFFD");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    specd::net::ApiError e;
    e.status = in.ConsumeIntegralInRange<int>(400, 599);
    e.code = in.ConsumeRandomLengthString(64);
    e.param = in.ConsumeRandomLengthString(64);
    const bool has_id = in.ConsumeBool();
    const std::string id = in.ConsumeRandomLengthString(256);
    e.message = in.ConsumeRemainingBytesAsString();

    const json body = specd::fuzz::parse_reply(kTarget, specd::net::error_body(e));
    if (!body.is_object() || !body.contains("error") || !body["error"].is_object()) fail(kTarget, "error body has no error object");
    const json& err = body["error"];
    check_text(err, "message", e.message);
    check_text(err, "code", e.code);
    if (!err.contains("type") || !err["type"].is_string() || err["type"].get<std::string>().empty()) fail(kTarget, "error.type is not a word");
    if (e.param.empty()) {
        if (!err.contains("param") || !err["param"].is_null()) fail(kTarget, "an empty param is not null");
    } else {
        check_text(err, "param", e.param);
    }

    const json frame = specd::fuzz::parse_reply(kTarget, specd::net::ws_error_frame(has_id ? &id : nullptr, e.code, e.message));
    if (!frame.is_object() || frame.value("type", "") != "error") fail(kTarget, "ws_error_frame is not an error frame");
    check_text(frame, "code", e.code);
    check_text(frame, "message", e.message);
    if (has_id) {
        check_text(frame, "id", id);
    } else if (!frame.contains("id") || !frame["id"].is_null()) {
        fail(kTarget, "ws_error_frame without an id does not say null");
    }
    return 0;
}
