// The WebSocket protocol's message handler without a socket
// (docs/websocket-protocol.md): one client text frame in, one action out.
// The session (net/ws_session.cpp) carries the action out; the fuzz target
// fuzz/fuzz_ws_message.cpp drives this function directly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "net/api.h"

namespace specd::net {

// The longest WebSocket generation id a client may choose (bytes): ids are
// echoed in every frame and the log, and keyed in per-connection maps.
inline constexpr size_t kMaxWsIdBytes = 128;

struct WsAction {
    enum class Kind {
        Reply,     // send `frame` (an error frame); nothing else happens
        Cancel,    // cancel the generation `id` (the session knows whether it runs)
        Generate,  // start `parsed` under `id`
    };
    Kind kind = Kind::Reply;
    std::string id;         // the client's id; empty when the frame had none
    std::string frame;      // Reply: the frame to send
    ParsedRequest parsed;   // Generate: the validated request (parsed.request.id == id)
};

struct WsContext {
    const RequestLimits* limits = nullptr;
    bool draining = false;                 // new generations are refused
    ChatRenderer render_chat = nullptr;    // messages → prompt text
    const void* render_ctx = nullptr;
};

// Never throws: every problem with the frame becomes a Reply with an error
// frame whose code and message name it (invalid_json, invalid_request, ...).
WsAction interpret_ws_message(std::string_view text, const WsContext& ctx);

}  // namespace specd::net
