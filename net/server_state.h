// What the Server, its listener and its sessions share: the runtime, the
// options, the network context and threads, the connection and generation
// counts, the metrics page and the request log. Every connection and every
// running generation's callbacks hold it by shared_ptr, so it outlives the
// Server object while generations end.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "actors/runtime.h"
#include "net/metrics_page.h"
#include "net/request_log.h"
#include "net/routes.h"
#include "net/server.h"

namespace specd {
class ChatTemplate;
}

namespace specd::net {

struct ServerState {
    ServerState(Runtime& runtime, ServerOptions options);
    ~ServerState();
    ServerState(const ServerState&) = delete;
    ServerState& operator=(const ServerState&) = delete;

    Runtime& runtime;
    ServerOptions opt;
    // Owned through pointers so Server::stop can destroy them (and with them
    // every pending handler and connection) while the state is still alive.
    std::unique_ptr<boost::asio::io_context> ioc;
    std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor;
    std::vector<std::thread> threads;  // the network threads
    std::atomic<int32_t> connections{0};
    std::atomic<int32_t> active_generations{0};
    std::atomic<bool> draining{false};
    std::atomic<bool> stopped{false};
    uint16_t bound_port = 0;
    const int64_t start_time_s;                         // unix time
    std::shared_ptr<const ChatTemplate> chat_template;  // the model's, or the plain fallback (routes.h)
    MetricsPage metrics;
    RequestLog requests;

    RouteContext route_context() const;
    // A generation submitted through this server ended (on a CAF thread):
    // counted, logged, and no longer active.
    void generation_done(const done_event& d, const char* transport, const std::string& request_id);
    void generation_failed(const error_event& e, const char* transport, const std::string& request_id);

    // The open WebSockets' closers: Server::stop sends each a 1001 close
    // frame before the network threads stop.
    uint64_t remember_websocket(std::function<void()> closer);
    void forget_websocket(uint64_t id);
    size_t open_websockets();
    std::vector<std::function<void()>> websocket_closers();

    // Runtime (CAF) threads, the metrics collector and stop() hand work to a
    // connection only through post_to(): the handler holds the connection
    // weakly and locks it on the connection's strand, so a connection is
    // never destroyed off the network threads (its socket and timers belong
    // to them); and nothing is posted once close_posts() ran (Server::stop,
    // before the network context goes).
    template <class Session, class Fn>
    void post_to(const boost::asio::any_io_executor& strand, std::weak_ptr<Session> weak, Fn fn) {
        std::shared_lock<std::shared_mutex> lock(post_mu_);
        if (!posts_open_) return;
        boost::asio::post(strand, [weak = std::move(weak), fn = std::move(fn)]() mutable {
            if (auto s = weak.lock()) fn(*s);
        });
    }
    void close_posts();

private:
    std::mutex ws_mu_;
    std::unordered_map<uint64_t, std::function<void()>> ws_closers_;  // under ws_mu_
    uint64_t next_ws_closer_ = 0;                                     // under ws_mu_
    std::shared_mutex post_mu_;
    bool posts_open_ = true;  // under post_mu_
};

}  // namespace specd::net
