// The Server: owns the network context, its threads and the shared state
// (net/server_state.h); the listener (net/listener.h) accepts, the sessions
// (net/http_session.h, net/ws_session.h) serve, the routes
// (net/routes.h) decide. Generations run in the runtime; their events come
// back on a CAF thread and are posted to the connection's strand.
#include "net/server.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "config/log.h"
#include "actors/capacity_plan.h"
#include "net/listener.h"
#include "net/server_state.h"

namespace specd::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

int64_t unix_time_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double steady_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

// ---------------------------------------------------------------- state ---

ServerState::ServerState(Runtime& rt, ServerOptions options)
    : runtime(rt),
      opt(std::move(options)),
      ioc(std::make_unique<asio::io_context>()),
      acceptor(std::make_unique<tcp::acceptor>(*ioc)),
      start_time_s(unix_time_now()),
      chat_template(load_chat_template(rt)),
      metrics(rt, ServerGauges{[this] { return static_cast<double>(connections.load()); },
                               [this] { return draining ? 1.0 : 0.0; },
                               [this] { return static_cast<double>(active_generations.load()); }}),
      requests(opt.low_acceptance_rate, opt.low_acceptance_window, metrics) {
    // logit_bias ids are checked where the request is parsed, so the client
    // gets a 400 naming the field (streamed or not).
    opt.limits.n_vocab = rt.tokenizer().n_vocab();
}

ServerState::~ServerState() = default;

RouteContext ServerState::route_context() const {
    return RouteContext{runtime, opt, draining.load(), chat_template.get(), start_time_s};
}

void ServerState::generation_done(const done_event& d, const char* transport, const std::string& request_id) {
    metrics.record_done(d);
    requests.done(d, transport, request_id);
    --active_generations;
}

void ServerState::generation_failed(const error_event& e, const char* transport, const std::string& request_id) {
    metrics.record_error();
    requests.failed(e, transport, request_id);
    --active_generations;
}

uint64_t ServerState::remember_websocket(std::function<void()> closer) {
    std::lock_guard<std::mutex> lock(ws_mu_);
    ws_closers_.emplace(++next_ws_closer_, std::move(closer));
    return next_ws_closer_;
}

void ServerState::forget_websocket(uint64_t id) {
    std::lock_guard<std::mutex> lock(ws_mu_);
    ws_closers_.erase(id);
}

size_t ServerState::open_websockets() {
    std::lock_guard<std::mutex> lock(ws_mu_);
    return ws_closers_.size();
}

std::vector<std::function<void()>> ServerState::websocket_closers() {
    std::vector<std::function<void()>> closers;
    std::lock_guard<std::mutex> lock(ws_mu_);
    for (auto& [id, close] : ws_closers_) closers.push_back(close);
    return closers;
}

void ServerState::close_posts() {
    std::unique_lock<std::shared_mutex> lock(post_mu_);
    posts_open_ = false;
}

// --------------------------------------------------------------- server ---

Server::Server(Runtime& runtime, ServerOptions options) : state_(std::make_shared<ServerState>(runtime, std::move(options))) {}

Server::~Server() { stop(); }

void Server::check_address(const std::string& host, uint16_t port) {
    asio::io_context ioc;
    tcp::acceptor probe(ioc);
    open_acceptor(probe, host, port, true);
}

uint16_t Server::start() {
    open_acceptor(*state_->acceptor, state_->opt.host, state_->opt.port, true);
    state_->bound_port = state_->acceptor->local_endpoint().port();
    std::make_shared<Listener>(state_)->run();
    const int io_threads = CapacityPlan::io_threads(state_->opt.io_threads, ThreadPool::hardware_threads());
    for (int i = 0; i < io_threads; ++i) {
        asio::io_context* ioc = state_->ioc.get();
        state_->threads.emplace_back([ioc] {
            ThreadPool::set_current_thread_name("specd.net");
            // Handlers catch their own errors (500 / close 1011); anything
            // that still escapes one is logged and the thread serves on.
            for (;;) {
                try {
                    ioc->run();
                    return;
                } catch (const std::exception& e) {
                    log::error("exception escaped a network handler; the network thread goes on", {{"error", e.what()}});
                }
            }
        });
    }
    return state_->bound_port;
}

void Server::drain() { state_->draining = true; }

int32_t Server::active_generations() const { return state_->active_generations.load(); }

void Server::set_acceptance_watch(double low_rate, int64_t window_drafted) {
    state_->requests.set_acceptance_watch(low_rate, window_drafted);
}

void Server::stop() {
    if (state_->stopped.exchange(true)) return;
    state_->draining = true;
    // WebSocket clients get a close frame saying why (1001, going away),
    // idle or busy, rather than a dropped socket; each gets up to
    // kCloseGrace to exchange it before the threads stop.
    {
        // Copies of the closers hold strand executors: they must go before
        // the context does (a strand's destructor reaches its service).
        const std::vector<std::function<void()>> closers = state_->websocket_closers();
        for (auto& close : closers) close();
        constexpr double kCloseGrace = 1000.0;  // ms
        const double deadline = steady_ms() + kCloseGrace;
        while (!closers.empty() && state_->open_websockets() > 0 && steady_ms() < deadline && !state_->threads.empty())
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    state_->ioc->stop();
    for (auto& t : state_->threads) t.join();
    state_->metrics.stop();  // no scrape is answered from now on
    state_->close_posts();   // the context goes next: runtime events for connections are dropped from now on
    state_->threads.clear();
    // Destroying the context destroys every pending handler and so every
    // connection (each cancels its generations on the way out).
    state_->acceptor.reset();
    state_->ioc.reset();
}

uint16_t Server::port() const { return state_->bound_port; }

std::string Server::url() const { return "http://" + state_->opt.host + ":" + std::to_string(state_->bound_port); }

}  // namespace specd::net
