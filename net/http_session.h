// One HTTP connection (keep-alive, one request at a time, on its own
// strand): reads a request, answers it through handle_request
// (net/routes.h), streams a generation's output (net/sse.h) while watching
// for the client going away, fetches the metrics page without holding the
// network thread, and hands a WebSocket upgrade to a WebSocket session.
#pragma once

#include <memory>

#include <boost/asio/ip/tcp.hpp>

namespace specd::net {

struct ServerState;

// Starts serving `socket` (counted in state->connections; the session
// takes the count back when it ends, or passes it on with an upgrade).
void run_http_session(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerState> state);

}  // namespace specd::net
