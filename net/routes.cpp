// The routes of the HTTP front end; see routes.h.
#include "net/routes.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "actors/runtime.h"
#include "config/json_text.h"
#include "config/log.h"
#include "net/chat_page.h"
#include "net/llama_server_routes.h"

namespace specd::net {

using nlohmann::json;
using Method = RouteRequest::Method;

namespace {

RouteResult respond(int status, std::string body, std::string content_type) {
    RouteResult r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = std::move(content_type);
    return r;
}

RouteResult health(const RouteContext& ctx) {
    bool ok = !ctx.draining;
    json body{{"status", ok ? "ok" : "draining"}, {"speculation", ctx.runtime.speculation().enabled}};
    // A gateway lists its nodes, and is unhealthy (503) with no target up,
    // so a load balancer sends its traffic elsewhere.
    const std::vector<NodeStatus> nodes = ctx.runtime.cluster();
    if (!nodes.empty()) {
        bool any_target = false;
        json list = json::array();
        for (const NodeStatus& n : nodes) {
            any_target = any_target || (n.role == "target" && n.up);
            list.push_back(json{{"address", n.address}, {"role", n.role}, {"up", n.up}, {"sessions", n.sessions},
                                {"served", n.served}, {"kv_free", n.kv_free}, {"kv_blocks", n.kv_blocks}, {"waiting", n.waiting},
                                {"joins", n.joins}, {"error", n.last_error}});
        }
        body["nodes"] = std::move(list);
        if (ok && !any_target) {
            ok = false;
            body["status"] = "no_target_node";
        }
    }
    return respond(ok ? 200 : 503, dump_json(body), "application/json");
}

// The run-time switch of speculation (the guide's rollback): GET shows the
// defaults new requests get, POST {"enabled", "draft_max", "adaptive"}
// (any of them) changes them.
RouteResult admin(const RouteRequest& req, const RouteContext& ctx, const std::string& p, bool get, bool post) {
    const std::string& key = ctx.options.admin_key.empty() ? ctx.options.api_key : ctx.options.admin_key;
    if (key.empty())
        return error_result(403, "admin_disabled", "the admin endpoints are off: start with --admin-key KEY or SPECD_ADMIN_KEY");
    if (bearer_token(req.authorization) != key)
        return error_result(401, "invalid_admin_key", "missing or wrong admin key (Authorization: Bearer KEY)");
    if (p != "/admin/speculation")
        return error_result(404, "not_found", "no endpoint " + utf8_excerpt(p, 200) + " (the admin endpoint is /admin/speculation)");
    if (!get && !post) return error_result(405, "method_not_allowed", std::string(req.method_name) + " is not allowed on " + p);
    Runtime& rt = ctx.runtime;
    if (post) {
        SpeculationSettings next = rt.speculation();
        try {
            const json body = parse_json(req.body);
            if (!body.is_object()) throw ApiError{400, "invalid_request", "the body must be a JSON object", ""};
            for (auto it = body.begin(); it != body.end(); ++it) {
                const json& v = it.value();
                if (it.key() == "enabled" && v.is_boolean()) next.enabled = v.get<bool>();
                else if (it.key() == "adaptive" && v.is_boolean()) next.adaptive = v.get<bool>();
                else if (it.key() == "draft_max" && v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxDraftTokens)
                    next.draft_max = v.get<int32_t>();
                else if (it.key() == "enabled" || it.key() == "adaptive" || it.key() == "draft_max")
                    throw ApiError{400, "invalid_request",
                                   it.key() + (it.key() == "draft_max" ? " must be an integer in 0.." + std::to_string(kMaxDraftTokens)
                                                                       : std::string(" must be true or false")),
                                   it.key()};
                else throw ApiError{400, "invalid_request", "unknown key \"" + it.key() + "\" (enabled, draft_max, adaptive)", it.key()};
            }
        } catch (const ApiError& e) {
            return error_result(e.status, e.code, e.message, e.param);
        }
        rt.set_speculation(next);
        log::warn("speculation switched", {{"by", "admin endpoint"}, {"enabled", next.enabled}, {"draft_max", next.draft_max},
                                           {"adaptive", next.adaptive}});
    }
    const SpeculationSettings now = rt.speculation();
    json state = {{"enabled", now.enabled},
                  {"draft_max", now.draft_max},
                  {"adaptive", now.adaptive},
                  {"draft_model_loaded", rt.has_draft_model()},
                  {"draft_load_error", rt.draft_load_error()}};
    return respond(200, dump_json(state), "application/json");
}

RouteResult generate(const RouteRequest& req, const RouteContext& ctx, bool chat) {
    if (ctx.draining) return error_result(503, "draining", "the server is draining; retry on another instance");
    RouteResult r;
    r.kind = RouteResult::Kind::Generate;
    r.chat = chat;
    try {
        const json body = parse_json(req.body);
        r.parsed = parse_generation(body, chat ? ApiKind::Chat : ApiKind::Completion, ctx.options.limits, render_chat_messages,
                                    ctx.chat_template, req.body);
    } catch (const ApiError& e) {
        return error_result(e.status, e.code, e.message, e.param);
    }
    return r;
}

}  // namespace

RouteResult error_result(int status, const std::string& code, const std::string& message, const std::string& param) {
    return respond(status, error_body(ApiError{status, code, message, param}), "application/json");
}

RouteResult handle_request(const RouteRequest& req, const RouteContext& ctx) {
    const std::string p = request_path(req.target);
    // HEAD is answered as GET without the body (the session drops it).
    const bool get = req.method == Method::get || req.method == Method::head;
    const bool post = req.method == Method::post;
    if (req.method == Method::unknown) {
        // Methods are case-sensitive (RFC 9110): "get" is not GET.
        RouteResult r = error_result(400, "bad_request",
                                     "unknown HTTP method \"" + utf8_excerpt(std::string(req.method_name), 20) +
                                         "\" (methods are upper case: GET, HEAD, POST, OPTIONS)");
        r.close = true;
        return r;
    }
    if (req.method == Method::options) return respond(204, "", "text/plain");
    // The chat page holds no secret: it loads without the key and asks for it.
    if (p == "/" && get && !req.upgrade) return respond(200, std::string(kChatPageHtml), "text/html; charset=utf-8");
    if (p == "/health" && get) return health(ctx);
    if (p.rfind("/admin/", 0) == 0) return admin(req, ctx, p, get, post);
    if (!authorised(req, ctx.options)) return error_result(401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
    if (p == "/v1/ws" && !req.upgrade)
        return error_result(426, "upgrade_required", "/v1/ws is the WebSocket endpoint: send an upgrade request (Upgrade: websocket)");
    if (req.upgrade) {
        if (p != "/v1/ws") return error_result(404, "not_found", "WebSocket endpoint is /v1/ws");
        RouteResult r;
        r.kind = RouteResult::Kind::Upgrade;
        return r;
    }
    if (p == "/metrics" && get) {
        RouteResult r;
        r.kind = RouteResult::Kind::Metrics;
        return r;
    }
    Runtime& rt = ctx.runtime;
    const json model = {{"id", rt.model_name()}, {"object", "model"}, {"created", ctx.start_time_s}, {"owned_by", "specd"},
                        {"meta", {{"n_ctx", rt.n_ctx()}, {"draft_model", rt.has_draft_model()}}}};
    if (p == "/v1/models" && get) return respond(200, dump_json(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
    if (p.rfind("/v1/models/", 0) == 0 && get) {  // models.retrieve
        const std::string id = p.substr(std::strlen("/v1/models/"));
        if (id != rt.model_name())
            return error_result(404, "model_not_found",
                                "no model \"" + utf8_excerpt(id, 100) + "\"; this server has \"" + rt.model_name() + "\"", "model");
        return respond(200, dump_json(model), "application/json");
    }
    if (p == "/v1/embeddings")
        return error_result(501, "not_implemented", "embeddings are not implemented: specd serves generation (completions, chat)");
    if ((p == "/v1/completions" || p == "/v1/chat/completions") && post) return generate(req, ctx, p == "/v1/chat/completions");
    if (std::optional<RouteResult> r = llama_server_route(req, ctx, p)) return std::move(*r);
    if (p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/models" || p == "/health" || p == "/metrics" || p == "/")
        return error_result(405, "method_not_allowed", std::string(req.method_name) + " is not allowed on " + p);
    return error_result(404, "not_found", "no endpoint " + utf8_excerpt(p, 200));
}

int status_for_error_code(const std::string& code) {
    return code == "unknown_model" ? 404 : code == "overloaded" ? 429
           : code == "draining" || code == "unavailable" ? 503
           : code == "internal" ? 500 : code == "timeout" ? 504 : 400;
}

std::string request_path(std::string_view target) { return std::string(target.substr(0, target.find('?'))); }

std::string bearer_token(std::string_view header) {
    constexpr std::string_view kScheme = "bearer ";
    if (header.size() <= kScheme.size()) return "";
    for (size_t i = 0; i < kScheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
    header.remove_prefix(kScheme.size());
    while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
    return std::string(header);
}

std::optional<std::string> query_parameter(std::string_view target, std::string_view name) {
    const size_t q = target.find('?');
    if (q == std::string_view::npos) return std::nullopt;
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        const size_t eq = pair.find('=');
        if (pair.substr(0, eq) != name) continue;
        const std::string_view raw = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
        std::string value;
        for (size_t i = 0; i < raw.size(); ++i) {
            const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
            if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) && hex(raw[i + 2])) {
                value += static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
                i += 2;
            } else {
                value += raw[i] == '+' ? ' ' : raw[i];
            }
        }
        return value;
    }
    return std::nullopt;
}

bool authorised(const RouteRequest& req, const ServerOptions& options) {
    if (options.api_key.empty()) return true;
    if (bearer_token(req.authorization) == options.api_key) return true;
    const std::optional<std::string> key = query_parameter(req.target, "api_key");
    return key && *key == options.api_key;
}

std::string cors_allowed_headers(std::string_view requested) {
    std::string allowed = "Authorization, Content-Type, Accept, OpenAI-Organization, OpenAI-Project, OpenAI-Beta, "
                          "X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, "
                          "X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout";
    std::string names;
    for (const char c : requested.substr(0, 2048)) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ') names += c;
    }
    if (names.find_first_not_of(" ,") != std::string::npos) allowed += ", " + names;
    return allowed;
}

std::shared_ptr<const ChatTemplate> load_chat_template(const Runtime& runtime) {
    return std::make_shared<const ChatTemplate>(runtime.chat_template());
}

// Renders with the model's tokenizer.chat_template when its text is
// recognised (engine/chat_template: llama.cpp's detection), else the plain
// transcript for base models such as stories15M. Tools and tool turns go
// through the template's tool format; a template without one is a 400.
std::string render_chat_messages(const void* chat_template, const std::vector<ChatMessage>& messages,
                                 const std::vector<std::string>& tools_json, ChatTemplate::ToolFormat& tool_format) {
    const ChatTemplate& t = *static_cast<const ChatTemplate*>(chat_template);
    tool_format = t.tool_format();
    const bool tool_turns = std::any_of(messages.begin(), messages.end(),
                                        [](const ChatMessage& m) { return m.role == "tool" || !m.tool_calls.empty(); });
    if (tools_json.empty() && !tool_turns) return t.render(messages, true);
    if (t.tool_format() == ChatTemplate::ToolFormat::None)
        throw ApiError{400, "invalid_request",
                       std::string(tools_json.empty() ? "tool calls and tool results in messages" : "tools") +
                           " need a chat template with a tool format (Qwen2.5's <tool_call>, Llama 3.1's JSON calls); this model's template is " +
                           std::string(t.variant_name()),
                       tools_json.empty() ? "messages" : "tools"};
    return t.render_with_tools(messages, tools_json, true);
}

}  // namespace specd::net
