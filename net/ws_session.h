// One WebSocket connection (docs/websocket-protocol.md): each text frame is
// interpreted by interpret_ws_message (net/ws_protocol.h) and its action
// carried out; generations run concurrently on the connection and their
// frames go out through one write queue (one async_write in flight),
// bounded by max_queued_frames (the back-pressure: 1013 past it).
#pragma once

#include <memory>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace specd::net {

struct ServerState;

// Takes over an upgraded HTTP connection (and its place in
// state->connections): `request` is the upgrade request, `leftover` the
// bytes the client sent after it in the same write (its first frames).
void run_ws_session(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerState> state,
                    boost::beast::http::request<boost::beast::http::string_body> request, boost::beast::flat_buffer leftover);

}  // namespace specd::net
