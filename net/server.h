// The network front end: one listener for HTTP and WebSocket on one port,
// one strand per connection; network threads never run model work (they
// hand requests to the runtime's actors and stream back what they send).
//
// Endpoints: / (chat page), /v1/ws, /v1/completions, /v1/chat/completions,
// /v1/models, /health (200 {"status":"ok"}; 503 while draining), /metrics,
// and GET/POST /admin/speculation (the run-time switch, admin key); see
// net/routes.h. Each finished request logs one summary line (config/log.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "net/api.h"

namespace specd {
class Runtime;
}

namespace specd::net {

struct ServerState;  // net/server_state.h

struct ServerOptions {
    std::string host = "127.0.0.1";        // --host
    uint16_t port = 8080;                  // --port; 0 picks a free port
    int32_t io_threads = 0;                // network threads (they only parse, route and write); 0: auto, one per 8
                                           // CPUs of the process, 1 to 4 (a second thread on a small machine costs
                                           // more in hand-offs than it adds: docs/BENCHMARKS.md, network section)
    std::string api_key;                   // --api-key: required as "Authorization: Bearer KEY" on all but /health and the chat page /; empty: open
    std::string admin_key;                 // --admin-key: Bearer key of /admin/*; empty: api_key; both empty: /admin answers 403
    std::string cors_origin;               // --cors-origin: Access-Control-Allow-Origin value; empty: no CORS headers
    size_t max_body_bytes = 1 << 20;       // "max_body_bytes": largest HTTP request body (413 beyond)
    size_t max_message_bytes = 1 << 20;    // "max_message_bytes": largest WebSocket message (close 1009 beyond)
    int32_t max_connections = 512;         // "max_connections": open connections at once (503 beyond)
    int32_t max_generations_per_connection = 8;  // WebSocket generations running at once on one connection
    size_t max_queued_frames = 4096;       // WebSocket frames waiting for a slow reader before it is closed (1013)
    int32_t socket_send_buffer = 0;        // SO_SNDBUF of accepted connections in bytes; 0: the OS default (autotuned,
                                           //   up to MiBs, which hides a slow reader from the queue above for long)
    int32_t read_timeout_s = 30;           // "read_timeout_s": a request's header and body must arrive within this
    int32_t idle_timeout_s = 120;          // "idle_timeout_s": an idle WebSocket is closed after this
    double low_acceptance_rate = 0.3;      // warn when a window's acceptance rate is below this
    int64_t low_acceptance_window = 1024;  // drafted tokens per window; 0: no warning
    RequestLimits limits;
};

class Server {
public:
    Server(Runtime& runtime, ServerOptions options);
    ~Server();
    // Binds and starts the network threads; returns the bound port. An
    // address that cannot be listened on throws Error naming it.
    uint16_t start();
    // Whether host:port can be listened on now (e.g. before loading models,
    // which takes long): throws Error("cannot listen on HOST:PORT: why").
    static void check_address(const std::string& host, uint16_t port);
    // /health turns 503 and new generations are refused ("draining").
    void drain();
    // Sends every WebSocket a 1001 close frame (up to 1 s for the exchange),
    // then closes the listener and every connection and joins the threads.
    void stop();
    uint16_t port() const;
    std::string url() const;
    // Generations submitted through this server that have not ended yet.
    int32_t active_generations() const;
    // Starts a new acceptance window with these settings (SIGHUP reload).
    void set_acceptance_watch(double low_rate, int64_t window_drafted);

private:
    std::shared_ptr<ServerState> state_;
};

}  // namespace specd::net
