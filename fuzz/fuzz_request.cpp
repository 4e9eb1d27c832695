// libFuzzer target for the HTTP request parser: the body bytes of a POST to
// /v1/completions, /v1/chat/completions or llama-server's /completion,
// through what net/routes.cpp does with them (net::parse_json, then
// net::parse_generation for the OpenAI endpoints, chats rendered with a
// plain and a ChatML template, and net::parse_llama_completion, whose
// answer is then built for a made-up end).
//
// Properties checked on every input (arbitrary bytes):
//  1. Nothing but net::ApiError escapes parse_json or parse_generation (any
//     other exception is uncaught here and libFuzzer reports it).
//  2. Every ApiError is 4xx/5xx with a code and a one-line, valid UTF-8
//     message that does not quote the JSON library, and error_body() of it
//     is valid UTF-8 and parses as an OpenAI error object.
//  3. An accepted request has a prompt and every parameter in its
//     documented range (fuzz/request_checks.h).
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/request/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/json_text.h"
#include "fuzz/reply_checks.h"
#include "fuzz/request_checks.h"
#include "net/api.h"
#include "net/llama_completion.h"

namespace {

constexpr const char* kTarget = "fuzz_request";

void parse_as(const nlohmann::json& body, specd::net::ApiKind kind, const specd::ChatTemplate& chat_template, std::string_view input) {
    try {
        const specd::net::ParsedRequest p = specd::net::parse_generation(body, kind, specd::fuzz::fuzz_limits(),
                                                                         specd::fuzz::render_with_template, &chat_template);
        specd::fuzz::check_parsed(kTarget, p, kind);
    } catch (const specd::net::ApiError& e) {
        specd::fuzz::check_api_error(kTarget, e, input);
    }
}

// /completion: the same properties, and its answer is valid JSON text.
void parse_as_llama(const nlohmann::json& body, std::string_view input) {
    try {
        specd::net::LlamaCompletionShape shape;
        const specd::net::ParsedRequest p = specd::net::parse_llama_completion(body, specd::fuzz::fuzz_limits(), shape);
        specd::fuzz::check_parsed(kTarget, p, specd::net::ApiKind::Completion);
        specd::done_event d;
        d.finish_reason = "stop";
        d.stop_word = p.request.stop.empty() ? "" : p.request.stop.front();
        (void)nlohmann::json::parse(specd::dump_json(specd::net::llama_completion_response(shape, "m", "text", {1, 2}, d)));
    } catch (const specd::net::ApiError& e) {
        specd::fuzz::check_api_error(kTarget, e, input);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    nlohmann::json body;
    try {
        body = specd::net::parse_json(text);
    } catch (const specd::net::ApiError& e) {
        specd::fuzz::check_api_error(kTarget, e, text);
        if (e.code != "invalid_json") specd::fuzz::fail(kTarget, "a body that does not parse is not invalid_json: " + e.code);
        return 0;
    }
    parse_as(body, specd::net::ApiKind::Completion, specd::fuzz::fuzz_templates()[0], text);
    for (const specd::ChatTemplate& t : specd::fuzz::fuzz_templates()) parse_as(body, specd::net::ApiKind::Chat, t, text);
    parse_as_llama(body, text);
    return 0;
}
