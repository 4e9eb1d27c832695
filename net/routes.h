// What each HTTP request gets, without a socket: the routing of the network
// front end as one function from a request to a result, as Beast's examples
// separate handle_request from the session. The session (net/http_session)
// reads the request, calls handle_request and carries the result out: a
// response to write, a generation to start and stream, a WebSocket upgrade,
// or the metrics page to wait for (net/metrics_page).
//
// Endpoints: / (chat page), /v1/ws (upgrade), /v1/completions,
// /v1/chat/completions, /v1/models[/ID], /health, /metrics,
// GET/POST /admin/speculation, llama-server's /tokenize, /detokenize,
// /props (net/llama_server_routes.h); everything else is a JSON error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/api.h"
#include "net/llama_completion.h"
#include "net/server.h"

namespace specd {
class Runtime;
}  // namespace specd

namespace specd::net {

// The parts of an HTTP request the routes read (the session fills it from
// Beast's parsed request; string views into it).
struct RouteRequest {
    enum class Method { get, head, post, options, other, unknown };
    Method method = Method::get;     // unknown: a method name HTTP does not define ("get" is one: methods are case-sensitive)
    std::string_view method_name;    // as sent
    std::string_view target;         // path and query
    std::string_view authorization;  // the Authorization header ("" when absent)
    bool upgrade = false;            // a WebSocket upgrade request
    std::string_view body;
};

// What the routes may read of the server.
struct RouteContext {
    Runtime& runtime;
    const ServerOptions& options;
    bool draining = false;                      // /health answers 503, generations are refused
    const ChatTemplate* chat_template = nullptr;  // the model's, or the plain fallback
    int64_t start_time_s = 0;                   // unix time the server started (the model's "created")
};

struct RouteResult {
    enum class Kind {
        Respond,   // write status, body, content_type
        Generate,  // start `parsed` (a completion, or a chat completion when `chat`) and answer with its output
        Upgrade,   // hand the connection to a WebSocket session
        Metrics,   // answer with the metrics page once it is rendered (it asks the runtime, which takes a while)
    };
    Kind kind = Kind::Respond;
    int status = 200;
    std::string body;
    std::string content_type;
    bool close = false;    // close the connection after the response (the request could not be parsed sensibly)
    bool chat = false;     // Generate
    ParsedRequest parsed;  // Generate: the validated request
    std::optional<LlamaCompletionShape> llama;  // Generate: answer in llama-server's /completion shapes
};

RouteResult handle_request(const RouteRequest& request, const RouteContext& context);

// A JSON error response (net/api.h's error_body).
RouteResult error_result(int status, const std::string& code, const std::string& message, const std::string& param = "");

// The HTTP status of a generation that ended with error `code`
// (error_event::code): unknown_model 404, overloaded 429, draining and
// unavailable 503, internal 500, timeout 504, any other 400.
int status_for_error_code(const std::string& code);

// The path of a request target (without the query).
std::string request_path(std::string_view target);

// The credentials of "Authorization: Bearer KEY"; the scheme is
// case-insensitive (RFC 9110), so "bearer KEY" works too. Empty if absent.
std::string bearer_token(std::string_view header);

// The percent-decoded value of `name` in the target's query string ("+" is
// a space, as forms encode it); nullopt when the parameter is absent.
std::optional<std::string> query_parameter(std::string_view target, std::string_view name);

// Whether the request carries the API key (open when options.api_key is
// empty): as a Bearer token or, since browsers cannot set headers on a
// WebSocket, as ?api_key=.
bool authorised(const RouteRequest& request, const ServerOptions& options);

// The request headers a browser may send cross-origin: ours, those the
// official OpenAI SDKs add (X-Stainless-*, OpenAI-*), and whatever a
// preflight asks for (`requested`: its list of header names, cleaned to
// token characters).
std::string cors_allowed_headers(std::string_view requested);

// The model's chat template (its GGUF tokenizer.chat_template when
// recognised, else the plain transcript), for render_chat_messages.
std::shared_ptr<const ChatTemplate> load_chat_template(const Runtime& runtime);

// A ChatRenderer (net/api.h) whose context is a `const ChatTemplate*`.
std::string render_chat_messages(const void* chat_template, const std::vector<ChatMessage>& messages,
                                 const std::vector<std::string>& tools_json, ChatTemplate::ToolFormat& tool_format);

}  // namespace specd::net
