#include "net/ws_protocol.h"


namespace specd::net {

using nlohmann::json;

namespace {

WsAction reply(const std::string* id, const std::string& code, const std::string& message) {
    WsAction a;
    a.kind = WsAction::Kind::Reply;
    if (id) a.id = *id;
    a.frame = ws_error_frame(id, code, message);
    return a;
}

}  // namespace

WsAction interpret_ws_message(std::string_view text, const WsContext& ctx) {
    json msg;
    try {
        msg = parse_json(text);
    } catch (const ApiError& e) {
        return reply(nullptr, e.code, e.message);
    }
    if (!msg.is_object()) return reply(nullptr, "invalid_request", "a message must be a JSON object with a \"type\"");
    const auto type_it = msg.find("type");
    const std::string type = type_it != msg.end() && type_it->is_string() ? type_it->get<std::string>() : "";
    const auto id_it = msg.find("id");
    std::string id;
    if (id_it != msg.end() && id_it->is_string()) id = id_it->get<std::string>();
    if (id.size() > kMaxWsIdBytes)
        return reply(nullptr, "invalid_request",
                     "id is " + std::to_string(id.size()) + " bytes; at most " + std::to_string(kMaxWsIdBytes) + " are allowed");
    const std::string* idp = id.empty() ? nullptr : &id;
    if (type == "cancel") {
        if (!idp) return reply(nullptr, "invalid_request", "cancel needs the string id of a running generation");
        WsAction a;
        a.kind = WsAction::Kind::Cancel;
        a.id = id;
        return a;
    }
    if (type != "generate") return reply(idp, "invalid_request", "type must be \"generate\" or \"cancel\"");
    if (ctx.draining) return reply(idp, "draining", "the server is draining; retry on another instance");
    WsAction a;
    try {
        a.parsed = parse_generation(msg, ApiKind::WebSocket, *ctx.limits, ctx.render_chat, ctx.render_ctx, text);
    } catch (const ApiError& e) {
        return reply(idp, e.code, e.message);
    }
    a.kind = WsAction::Kind::Generate;
    a.id = id;
    return a;
}

}  // namespace specd::net
