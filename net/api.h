// The request and response formats of the network front end, without any
// socket code: OpenAI-compatible completions and chat completions, and the
// WebSocket protocol (docs/websocket-protocol.md). Both parse into the
// runtime's generate_request through one function, so they validate alike.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/messages.h"
#include "engine/chat_template.h"
#include "net/logprobs_json.h"
#include "net/tool_calls.h"

namespace specd::net {

// A request the client got wrong (or one we can't serve now): the HTTP
// status, the machine-readable code and a one-line message.
struct ApiError {
    int status = 400;
    std::string code;      // "invalid_json", "invalid_request", "unknown_model", ...
    std::string message;
    std::string param;     // the offending field, if any
};

enum class ApiKind { Completion, Chat, WebSocket };

struct ParsedRequest {
    generate_request request;
    bool stream = false;                // HTTP only
    bool include_usage = false;         // stream_options.include_usage: a last chunk with choices [] and the usage
    bool chat = false;                  // came with messages
    std::vector<ChatMessage> messages;  // when chat; roles system, user, assistant (maybe with tool_calls) and tool
    // Chat with tools and tool_choice other than "none" (net/tool_request.h):
    // the reply's <tool_call> blocks become tool_calls (net/tool_calls.h).
    bool tool_calls = false;
    // kToolCallClose was added to the stop sequences (parallel_tool_calls
    // false with tool_choice "auto": the reply ends after its first call);
    // a reply it stopped gets the tag back before its calls are read.
    bool tool_call_stop = false;
    ToolCallSyntax tool_syntax = ToolCallSyntax::TaggedBlocks;  // how the template's calls read (net/tool_calls.h)
    int32_t n = 1;                      // choices (OpenAI's n, 1..kMaxChoices; HTTP only)
};

// Most choices one request may ask for (OpenAI allows 128; each is a
// generation of its own, admitted for its KV blocks like any request).
inline constexpr int32_t kMaxChoices = 16;

// OpenAI's system_fingerprint on every response and chunk: which backend
// build produced it (with `seed`, the same fingerprint means the same text).
inline constexpr std::string_view kSystemFingerprint = "fp_specd_0.1";

// The longest model name a request may give (bytes); names are echoed in errors.
inline constexpr size_t kMaxModelNameBytes = 256;

// Limits every generation request is checked against.
struct RequestLimits {
    int32_t max_tokens_limit = 4096;    // "max_tokens_limit": largest max_tokens accepted
    int32_t default_max_tokens = 128;   // completions and WebSocket requests that give none (OpenAI: 16; llama-server: until done);
                                        // chat requests default to max_tokens_limit (until the answer or the context ends)
    // Largest speculative.draft_max a request may ask for: a front-end
    // limit (docs/websocket-protocol.md: 1..32) inside the runtime's bound
    // kMaxDraftTokens, which only the server's own setting may reach.
    int32_t max_draft_tokens = 32;
    // The model's vocabulary: logit_bias ids at or past it are refused here
    // (a 400 naming logit_bias). 0: not checked here (the session still
    // refuses them, as an invalid_request error). The server sets it from
    // the runtime's tokenizer.
    int32_t n_vocab = 0;
};
static_assert(RequestLimits{}.max_draft_tokens <= kMaxDraftTokens);

// Parses and validates; throws ApiError. `render_chat` turns messages into
// the prompt text (the model's chat template): with tools (each one's JSON
// text, net/tool_request.h) or tool turns (role "tool", assistant
// tool_calls) through the template's tool format; a renderer whose template
// has none throws ApiError naming "tools" (or "messages" for tool turns
// without tools); it sets `tool_format` to its template's. `raw_body`: the text `body`
// was parsed from, read again for a JSON schema (response_format,
// json_schema) so its properties keep the client's order (nlohmann::json
// sorts keys); empty: they come in sorted order.
using ChatRenderer = std::string (*)(const void* ctx, const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools_json,
                                     ChatTemplate::ToolFormat& tool_format);
ParsedRequest parse_generation(const nlohmann::json& body, ApiKind kind, const RequestLimits& limits, ChatRenderer render_chat,
                               const void* render_ctx, std::string_view raw_body = {});

// Parses text as JSON (config/json_text.h: depth-limited, every library
// error in our words); ApiError{400, "invalid_json"} naming the position.
nlohmann::json parse_json(std::string_view text);

// {"error": {"message", "type", "param", "code"}} as OpenAI; 429 has type
// "rate_limit_exceeded". Invalid UTF-8 in any field becomes U+FFFD.
std::string error_body(const ApiError& e);

// OpenAI finish_reason for ours: "context" becomes "length"; "cancelled"
// stays (a cut answer must not read as complete); EOS is "stop".
std::string openai_finish_reason(const std::string& ours);

nlohmann::json usage_json(const done_event& d);
nlohmann::json timings_json(const done_event& d);
nlohmann::json speculative_json(const done_event& d);

// Full (non-streamed) responses.
// `logprobs`: the choice's logprobs object (net/logprobs_json.h), null when not asked.
nlohmann::json completion_response(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                                   const done_event& d, const nlohmann::json& logprobs = nullptr);
// `calls`: the tool calls read from the reply (`text` is then the content
// around them): message.tool_calls, content null when empty, finish_reason
// "tool_calls" where it would be "stop".
nlohmann::json chat_response(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                             const done_event& d, const nlohmann::json& logprobs = nullptr, const std::vector<ToolCallOut>& calls = {});
// OpenAI's tool_calls entries: {id, type "function", function {name, arguments}};
// streamed (`first_index` >= 0) each also has its index in the reply, from first_index on.
nlohmann::json tool_calls_json(const std::vector<ToolCallOut>& calls, int first_index = -1);
// One SSE chunk's JSON. finish_reason empty: a content chunk; `logprobs`
// the chunk's own tokens' (null when not asked).
nlohmann::json completion_chunk(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                                const std::string& finish_reason, const nlohmann::json& logprobs = nullptr);
nlohmann::json chat_chunk(const std::string& id, const std::string& model, int64_t created, const std::string* role,
                          const std::string* content, const std::string& finish_reason, const nlohmann::json& logprobs = nullptr);
// The finish_reason of a chat reply that made `n_calls` tool calls: "tool_calls"
// for a reply that ended by itself ("stop"), else openai_finish_reason.
std::string chat_finish_reason(const std::string& ours, int n_calls);


// The JSON of one streamed content chunk, written by hand (it runs per token
// event): equal, as JSON, to chat_chunk(id, model, created, nullptr, &text, "")
// when chat, else to completion_chunk(id, model, created, text, ""); keys in
// OpenAI's order.
// `index`: the choice's (n > 1).
std::string content_chunk_json(bool chat, const std::string& id, const std::string& model, int64_t created, const std::string& text,
                               int index = 0);

// WebSocket frames. A token frame of a request that asked for logprobs
// (`piece` given, e.logprobs not empty) adds "logprobs": chat's per-token
// entries (net/logprobs_json.h), one per token id.
std::string ws_token_frame(const token_event& e, const TokenPiece* piece = nullptr);
std::string ws_done_frame(const done_event& d);
std::string ws_error_frame(const std::string* id, const std::string& code, const std::string& message);

}  // namespace specd::net
