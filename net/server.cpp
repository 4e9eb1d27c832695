// Boost.Beast front end (the only translation unit with Beast in it):
// listener → http_session (one strand per connection) → websocket_session
// on upgrade. Generations run in the runtime; their events come back on a
// CAF thread and are posted to the connection's strand.
#include "net/server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>

#include "actors/runtime.h"
#include "config/json_text.h"
#include "config/log.h"
#include "engine/acceptance_watch.h"
#include "engine/chat_template.h"
#include "engine/error.h"
#include "engine/thread_pool.h"
#include "engine/tokenizer.h"
#include "engine/utf8.h"
#include "gpu/gpu_metrics.h"
#include "net/chat_page.h"
#include "net/metrics.h"
#include "net/ws_protocol.h"

namespace specd::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

// The credentials of "Authorization: Bearer KEY"; the scheme is
// case-insensitive (RFC 9110), so "bearer KEY" works too. Empty if absent.
std::string bearer_token(std::string_view header) {
    constexpr std::string_view kScheme = "bearer ";
    if (header.size() <= kScheme.size()) return "";
    for (size_t i = 0; i < kScheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return "";
    header.remove_prefix(kScheme.size());
    while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
    return std::string(header);
}

// The percent-decoded value of `name` in the target's query string ("+" is
// a space, as forms encode it); nullopt when the parameter is absent.
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

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Latency histogram with fixed buckets (milliseconds), updated lock-free.
struct Histogram {
    static constexpr double kBounds[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
    static constexpr size_t kN = sizeof(kBounds) / sizeof(kBounds[0]);
    std::atomic<uint64_t> buckets[kN + 1] = {};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_us{0};
    void observe(double ms) {
        size_t i = 0;
        while (i < kN && ms > kBounds[i]) ++i;
        ++buckets[i];
        ++count;
        sum_us += static_cast<uint64_t>(std::max(0.0, ms) * 1000.0);
    }
    void render(std::string& out, const char* name, const char* help) const {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= kN; ++i) {
            cumulative += buckets[i];
            const std::string le = i < kN ? json(kBounds[i] / 1000.0).dump() : "+Inf";
            out += std::string(name) + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
        }
        out += std::string(name) + "_sum " + json(static_cast<double>(sum_us) / 1e6).dump() + "\n";
        out += std::string(name) + "_count " + std::to_string(count.load()) + "\n";
    }
};

struct Metrics {
    std::atomic<uint64_t> http_requests{0}, ws_connections{0}, generations_ok{0}, generations_error{0}, generations_cancelled{0};
    std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, drafted{0}, accepted{0}, low_acceptance_windows{0};
    std::mutex position_mu;
    std::vector<uint64_t> drafted_pos, accepted_pos;  // (draft_max) per draft position
    Histogram ttft, itl;
};

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
    Runtime& runtime;
    ServerOptions opt;
    // Owned through pointers so stop() can destroy them (and with them every
    // pending handler and connection) while the Impl is still alive.
    std::unique_ptr<asio::io_context> ioc = std::make_unique<asio::io_context>();
    std::unique_ptr<tcp::acceptor> acceptor = std::make_unique<tcp::acceptor>(*ioc);
    std::vector<std::thread> threads;
    std::atomic<int32_t> connections{0};
    std::atomic<int32_t> active_generations{0};
    std::atomic<bool> draining{false};
    std::atomic<bool> stopped{false};
    uint16_t bound_port = 0;
    Metrics metrics;
    ChatTemplate chat_template;  // the model's, or the plain fallback
    std::mutex watch_mu;
    AcceptanceWatch acceptance_watch;  // under watch_mu
    const double start_time_s = static_cast<double>(unix_now_s());
    // The open WebSockets' closers: Server::stop sends each a 1001 close
    // frame before the network threads stop.
    std::mutex ws_mu;
    std::unordered_map<uint64_t, std::function<void()>> ws_closers;  // under ws_mu
    uint64_t next_ws_closer = 0;                                     // under ws_mu

    uint64_t remember_websocket(std::function<void()> closer) {
        std::lock_guard<std::mutex> lock(ws_mu);
        ws_closers.emplace(++next_ws_closer, std::move(closer));
        return next_ws_closer;
    }
    void forget_websocket(uint64_t id) {
        std::lock_guard<std::mutex> lock(ws_mu);
        ws_closers.erase(id);
    }
    size_t open_websockets() {
        std::lock_guard<std::mutex> lock(ws_mu);
        return ws_closers.size();
    }

    // Runtime (CAF) threads and stop() hand work to a connection only
    // through post_to(): the handler holds the connection weakly and locks
    // it on the connection's strand, so a connection is never destroyed off
    // the network threads (its socket and timers belong to them); and
    // nothing is posted once stop() tears the network context down.
    std::shared_mutex post_mu;
    bool posts_open = true;  // under post_mu
    template <class Session, class Fn>
    void post_to(const asio::any_io_executor& strand, std::weak_ptr<Session> weak, Fn fn) {
        std::shared_lock<std::shared_mutex> lock(post_mu);
        if (!posts_open) return;
        asio::post(strand, [weak = std::move(weak), fn = std::move(fn)]() mutable {
            if (auto s = weak.lock()) fn(*s);
        });
    }

    Impl(Runtime& rt, ServerOptions o)
        : runtime(rt),
          opt(std::move(o)),
          chat_template(ChatTemplate::from_gguf_template(rt.chat_template_text())),
          acceptance_watch(opt.low_acceptance_rate, opt.low_acceptance_window) {}

    static int64_t unix_now_s() {
        return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    }

    void do_accept();
    bool authorised(const http::request<http::string_body>& req) const;
    std::string render_metrics();
    // One summary line per request, and the acceptance window.
    void log_done(const done_event& d, const char* transport, const std::string& request_id) {
        const double decode_ms = d.total_ms - d.ttft_ms;
        json fields = {{"request_id", request_id},
                       {"transport", transport},
                       {"finish_reason", d.finish_reason},
                       {"prompt_tokens", d.prompt_tokens},
                       {"completion_tokens", d.completion_tokens},
                       {"speculative", d.speculative},
                       {"drafted", d.drafted},
                       {"accepted", d.accepted},
                       {"acceptance_rate", d.drafted > 0 ? std::round(1000.0 * d.accepted / d.drafted) / 1000.0 : 0.0},
                       {"tokens_per_s", d.total_ms > 0 ? std::round(10000.0 * d.completion_tokens / d.total_ms) / 10.0 : 0.0},
                       {"decode_tokens_per_s",
                        decode_ms > 0 && d.completion_tokens > 1 ? std::round(10000.0 * (d.completion_tokens - 1) / decode_ms) / 10.0 : 0.0},
                       {"ttft_ms", std::round(10.0 * d.ttft_ms) / 10.0},
                       {"total_ms", std::round(10.0 * d.total_ms) / 10.0}};
        log::info("request done", fields);
        std::optional<AcceptanceWindow> low;
        double threshold = 0.0;
        {
            std::lock_guard<std::mutex> lock(watch_mu);
            low = acceptance_watch.record(d.drafted, d.accepted);
            threshold = opt.low_acceptance_rate;
        }
        if (low) {
            ++metrics.low_acceptance_windows;
            log::warn("low speculative acceptance: retune draft_max or retrain the draft model",
                      {{"acceptance_rate", std::round(1000.0 * low->rate()) / 1000.0},
                       {"threshold", threshold},
                       {"window_drafted", low->drafted},
                       {"window_accepted", low->accepted},
                       {"window_requests", low->requests}});
        }
    }
    void log_error(const error_event& e, const char* transport, const std::string& request_id) {
        log::warn("request failed", {{"request_id", request_id}, {"transport", transport}, {"code", e.code}, {"message", e.message}});
    }
    void record_done(const done_event& d) {
        ++metrics.generations_ok;
        if (d.finish_reason == "cancelled") ++metrics.generations_cancelled;
        metrics.prompt_tokens += static_cast<uint64_t>(d.prompt_tokens);
        metrics.drafted += static_cast<uint64_t>(d.drafted);
        metrics.accepted += static_cast<uint64_t>(d.accepted);
        std::lock_guard<std::mutex> lock(metrics.position_mu);
        if (metrics.drafted_pos.size() < d.drafted_per_position.size()) {
            metrics.drafted_pos.resize(d.drafted_per_position.size(), 0);
            metrics.accepted_pos.resize(d.drafted_per_position.size(), 0);
        }
        for (size_t i = 0; i < d.drafted_per_position.size(); ++i) {
            metrics.drafted_pos[i] += static_cast<uint64_t>(d.drafted_per_position[i]);
            metrics.accepted_pos[i] += static_cast<uint64_t>(d.accepted_per_position[i]);
        }
    }
};

namespace {

// Tracks one generation's timing for the latency histograms.
struct Timing {
    double t_submit = now_ms();
    double t_last = -1.0;
    void on_tokens(Metrics& m, size_t n) {
        const double now = now_ms();
        if (t_last < 0) m.ttft.observe(now - t_submit);
        else if (n > 0) m.itl.observe((now - t_last) / static_cast<double>(n));
        t_last = now;
        m.completion_tokens += n;
    }
};

struct ChatContext {
    const ChatTemplate* chat_template;
};

// Renders with the model's tokenizer.chat_template when its text is
// recognised (engine/chat_template: llama.cpp's detection), else the plain
// transcript for base models such as stories15M.
std::string render_chat_messages(const void* ctx, const std::vector<std::pair<std::string, std::string>>& messages) {
    std::vector<ChatMessage> msgs;
    msgs.reserve(messages.size());
    for (const auto& [role, content] : messages) msgs.push_back(ChatMessage{role, content});
    return static_cast<const ChatContext*>(ctx)->chat_template->render(msgs, true);
}

// ------------------------------------------------------------ websocket ---

class WsSession : public std::enable_shared_from_this<WsSession> {
public:
    WsSession(tcp::socket&& socket, std::shared_ptr<Server::Impl> server)
        : ws_(std::move(socket)), server_(std::move(server)), connection_id_("ws" + std::to_string(++server_->metrics.ws_connections)) {}
    ~WsSession() {
        for (auto& [id, g] : generations_) server_->runtime.cancel(g.handle);
        server_->forget_websocket(closer_id_);
        --server_->connections;
    }

    // `leftover`: bytes the client sent after the upgrade request in the
    // same write (its first frames), read along with the request.
    void run(http::request<http::string_body> req, beast::flat_buffer leftover) {
        websocket::stream_base::timeout t = websocket::stream_base::timeout::suggested(beast::role_type::server);
        t.idle_timeout = std::chrono::seconds(server_->opt.idle_timeout_s);
        t.keep_alive_pings = true;
        ws_.set_option(t);
        // The size limit is enforced here, frame by frame, instead of with
        // read_message_max: Beast would drop the connection with data still
        // unread (the client sees a reset, 1006); async_close drains it and
        // the client gets the 1009 close frame.
        ws_.read_message_max(0);
        beast::get_lowest_layer(ws_).expires_never();
        ws_.set_option(websocket::stream_base::decorator([](websocket::response_type& res) { res.set(http::field::server, "specd"); }));
        // On shutdown every WebSocket gets a 1001 close frame (Server::stop).
        closer_id_ = server_->remember_websocket([impl = server_.get(), strand = ws_.get_executor(), weak = weak_from_this()] {
            impl->post_to(strand, weak, [](WsSession& s) { s.close(websocket::close_code::going_away, "the server is shutting down"); });
        });
        if (leftover.size() == 0) {
            ws_.async_accept(req, beast::bind_front_handler(&WsSession::on_accept, shared_from_this()));
            return;
        }
        // The accept that takes bytes parses the request from them and keeps
        // what follows for the first reads; it copies them before returning.
        std::ostringstream raw;
        raw << req;
        const std::string bytes = raw.str() + beast::buffers_to_string(leftover.data());
        ws_.async_accept(asio::buffer(bytes), beast::bind_front_handler(&WsSession::on_accept, shared_from_this()));
    }


private:
    struct Generation {
        session_actor handle;
        Timing timing;
    };

    void on_accept(beast::error_code ec) {
        if (ec) return;
        do_read();
    }

    void do_read() {
        ws_.async_read_some(buffer_, 64 * 1024, beast::bind_front_handler(&WsSession::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        if (ec) {  // closed, reset, timed out or a protocol violation: the destructor cancels our generations
            if (log::enabled(log::Level::debug))
                log::debug("websocket read ended", {{"connection", connection_id_}, {"reason", ec.message()}});
            return;
        }
        if (buffer_.size() > server_->opt.max_message_bytes) {
            buffer_.consume(buffer_.size());
            close(websocket::close_code::too_big,
                  "message larger than " + std::to_string(server_->opt.max_message_bytes) + " bytes");
            return;
        }
        if (!ws_.is_message_done()) return do_read();
        if (!ws_.got_text()) {
            buffer_.consume(buffer_.size());
            close(websocket::close_code::unknown_data, "binary frames are not accepted; send JSON text frames");
            return;
        }
        std::string text = beast::buffers_to_string(buffer_.data());
        buffer_.consume(buffer_.size());
        try {
            handle(text);
        } catch (const std::exception& e) {
            // A bug must cost this connection (1011), never the process.
            log::error("internal error handling a WebSocket message; closing the connection",
                       {{"connection", connection_id_}, {"error", e.what()}});
            close(websocket::close_code::internal_error, "internal error");
            return;
        }
        if (!closing_) do_read();
    }

    void handle(const std::string& text) {
        ChatContext chat_ctx{&server_->chat_template};
        WsContext ctx{&server_->opt.limits, server_->draining.load(), render_chat_messages, &chat_ctx};
        WsAction action = interpret_ws_message(text, ctx);
        const std::string& id = action.id;
        const std::string* idp = id.empty() ? nullptr : &id;
        if (action.kind == WsAction::Kind::Reply) return send(std::move(action.frame));
        if (action.kind == WsAction::Kind::Cancel) {
            auto it = generations_.find(id);
            if (it == generations_.end()) return send(ws_error_frame(idp, "unknown_id", "no running generation has id \"" + id + "\""));
            server_->runtime.cancel(it->second.handle);
            return;
        }
        ParsedRequest& parsed = action.parsed;
        if (generations_.count(id)) return send(ws_error_frame(idp, "duplicate_id", "a generation with id \"" + id + "\" is running"));
        if (static_cast<int32_t>(generations_.size()) >= server_->opt.max_generations_per_connection)
            return send(ws_error_frame(idp, "too_many_generations",
                                       "at most " + std::to_string(server_->opt.max_generations_per_connection) +
                                           " generations may run on one connection"));
        std::weak_ptr<WsSession> weak = weak_from_this();
        const asio::any_io_executor strand = ws_.get_executor();
        std::shared_ptr<Server::Impl> impl = server_;  // outlives the connection and the Server object
        RuntimeCallbacks cb;
        cb.on_token = [impl, strand, weak](const token_event& e) {
            impl->post_to(strand, weak, [e](WsSession& s) {
                auto it = s.generations_.find(e.id);
                if (it != s.generations_.end()) it->second.timing.on_tokens(s.server_->metrics, e.tokens.size());
                s.send_tokens(e);
            });
        };
        const std::string log_id = connection_id_ + "/" + id;  // client ids are only unique per connection
        cb.on_done = [impl, strand, weak, log_id](const done_event& d) {
            impl->record_done(d);
            impl->log_done(d, "ws", log_id);
            --impl->active_generations;
            impl->post_to(strand, weak, [d](WsSession& s) {
                s.generations_.erase(d.id);
                s.send_final(d.id, ws_done_frame(d));
            });
        };
        cb.on_error = [impl, strand, weak, log_id](const error_event& e) {
            ++impl->metrics.generations_error;
            impl->log_error(e, "ws", log_id);
            --impl->active_generations;
            impl->post_to(strand, weak, [e](WsSession& s) {
                s.generations_.erase(e.id);
                s.send_final(e.id, ws_error_frame(&e.id, e.code, e.message));
            });
        };
        Generation g;
        ++server_->active_generations;
        g.handle = server_->runtime.submit(std::move(parsed.request), std::move(cb));
        generations_.emplace(id, std::move(g));
    }

    // Token frames for a slow reader are coalesced: once the queue holds
    // kCoalesceAfter frames, a token event is merged into its generation's
    // last token frame while that frame still waits in the queue (not the
    // front, which is being written). Each generation's tokens stay in
    // order; frames of different generations interleave as before.
    void send_tokens(const token_event& e) {
        if (closing_) return;
        if (queue_.size() >= kCoalesceAfter) {
            auto it = open_tokens_.find(e.id);
            if (it != open_tokens_.end() && it->second.seq > front_seq_) {
                token_event& merged = it->second.event;
                merged.tokens.insert(merged.tokens.end(), e.tokens.begin(), e.tokens.end());
                merged.from_draft.insert(merged.from_draft.end(), e.from_draft.begin(), e.from_draft.end());
                const auto shift = static_cast<uint32_t>(merged.text.size());
                for (uint32_t end : e.text_ends) merged.text_ends.push_back(shift + end);
                merged.text += e.text;
                queue_[static_cast<size_t>(it->second.seq - front_seq_)] = ws_token_frame(merged);
                ++coalesced_;
                return;
            }
        }
        if (!push(ws_token_frame(e))) return;
        open_tokens_[e.id] = OpenTokens{front_seq_ + queue_.size() - 1, e};
    }
    static constexpr size_t kCoalesceAfter = 64;  // queued frames before token frames are merged

    // A frame that ends a generation's stream (done, error): its tokens can
    // no longer be merged into earlier frames.
    void send_final(const std::string& id, std::string frame) {
        open_tokens_.erase(id);
        send(std::move(frame));
    }

    void send(std::string frame) { push(std::move(frame)); }

    // Queues a frame; false when the queue overflowed and the connection is closing.
    bool push(std::string frame) {
        if (closing_) return false;
        if (queue_.size() >= server_->opt.max_queued_frames) {
            // Drop all but the front: async_write is still reading it.
            queue_.erase(queue_.begin() + 1, queue_.end());
            open_tokens_.clear();
            close(websocket::close_code::try_again_later, "the client reads too slowly; its send queue overflowed");
            return false;
        }
        queue_.push_back(std::move(frame));
        if (queue_.size() == 1) do_write();
        return true;
    }

    void do_write() {
        ws_.text(true);
        ws_.async_write(asio::buffer(queue_.front()), beast::bind_front_handler(&WsSession::on_write, shared_from_this()));
    }

    void on_write(beast::error_code ec, size_t) {
        if (ec) {
            queue_.clear();
            open_tokens_.clear();
            return;
        }
        queue_.pop_front();
        ++front_seq_;
        if (closing_) {
            queue_.clear();  // nothing more goes out after the close frame
            return;
        }
        if (!queue_.empty()) do_write();
    }

    void close(websocket::close_code code, const std::string& reason) {
        if (closing_) return;
        closing_ = true;
        for (auto& [id, g] : generations_) server_->runtime.cancel(g.handle);
        ws_.async_close(websocket::close_reason(code, reason), [self = shared_from_this()](beast::error_code) {});
    }

    websocket::stream<beast::tcp_stream> ws_;
    std::shared_ptr<Server::Impl> server_;
    std::string connection_id_;     // "ws<n>": prefixes client ids in the log
    uint64_t closer_id_ = 0;        // our entry in the server's shutdown list
    beast::flat_buffer buffer_;
    std::deque<std::string> queue_;  // frames to write; the front is being written
    uint64_t front_seq_ = 0;         // sequence number of queue_.front() (frames are numbered as queued)
    struct OpenTokens {
        uint64_t seq;                // its frame's sequence number
        token_event event;           // what that frame holds
    };
    std::unordered_map<std::string, OpenTokens> open_tokens_;  // per generation: its last queued token frame
    std::unordered_map<std::string, Generation> generations_;
    bool closing_ = false;
    uint64_t coalesced_ = 0;        // token events merged into queued frames
};

// ----------------------------------------------------------------- http ---

class HttpSession : public std::enable_shared_from_this<HttpSession> {
public:
    HttpSession(tcp::socket&& socket, std::shared_ptr<Server::Impl> server) : stream_(std::move(socket)), server_(std::move(server)) {}
    ~HttpSession() {
        if (generation_) server_->runtime.cancel(generation_);
        if (!upgraded_) --server_->connections;
    }

    void run() {
        asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::do_read, shared_from_this()));
    }

private:
    void do_read() {
        parser_.emplace();
        parser_->body_limit(server_->opt.max_body_bytes);
        stream_.expires_after(std::chrono::seconds(server_->opt.read_timeout_s));
        http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        if (ec == http::error::end_of_stream || ec == beast::error::timeout) return shutdown();
        if (ec == http::error::body_limit) {
            keep_alive_ = false;
            return reply_error(413, "request_too_large",
                               "the request body exceeds " + std::to_string(server_->opt.max_body_bytes) + " bytes");
        }
        if (ec) {
            keep_alive_ = false;
            return reply_error(400, "bad_request", std::string("malformed HTTP request: ") + ec.message());
        }
        req_ = parser_->release();
        keep_alive_ = req_.keep_alive();
        head_ = req_.method() == http::verb::head;
        ++server_->metrics.http_requests;
        stream_.expires_never();
        try {
            route();
        } catch (const std::exception& e) {
            // A bug must cost this request (500), never the process.
            log::error("internal error handling an HTTP request", {{"path", path()}, {"error", e.what()}});
            keep_alive_ = false;
            if (!stream_mode_ && out_.empty()) reply_error(500, "internal", "internal error while handling the request");
            else shutdown();
        }
    }

    std::string path() const {
        std::string target(req_.target());
        return target.substr(0, target.find('?'));
    }

    void route() {
        const std::string p = path();
        // HEAD is answered as GET without the body (reply() drops it).
        const bool get = req_.method() == http::verb::get || head_;
        const bool post = req_.method() == http::verb::post;
        if (req_.method() == http::verb::unknown) {
            // Methods are case-sensitive (RFC 9110): "get" is not GET.
            keep_alive_ = false;
            return reply_error(400, "bad_request",
                               "unknown HTTP method \"" + utf8_excerpt(std::string(req_.method_string()), 20) +
                                   "\" (methods are upper case: GET, HEAD, POST, OPTIONS)");
        }
        if (req_.method() == http::verb::options) return reply(204, "", "text/plain");
        // The chat page holds no secret: it loads without the key and asks for it.
        if (p == "/" && get && !websocket::is_upgrade(req_)) return reply(200, std::string(kChatPageHtml), "text/html; charset=utf-8");
        if (p == "/health" && get) {
            bool ok = !server_->draining;
            json body{{"status", ok ? "ok" : "draining"}, {"speculation", server_->runtime.speculation().enabled}};
            // A gateway lists its nodes, and is unhealthy (503) with no
            // target up, so a load balancer sends its traffic elsewhere.
            const std::vector<NodeStatus> nodes = server_->runtime.cluster();
            if (!nodes.empty()) {
                bool any_target = false;
                json list = json::array();
                for (const NodeStatus& n : nodes) {
                    any_target = any_target || (n.role == "target" && n.up);
                    list.push_back(json{{"address", n.address}, {"role", n.role}, {"up", n.up}, {"sessions", n.sessions},
                                        {"served", n.served}, {"kv_free", n.kv_free}, {"kv_blocks", n.kv_blocks}, {"waiting", n.waiting}, {"joins", n.joins},
                                        {"error", n.last_error}});
                }
                body["nodes"] = std::move(list);
                if (ok && !any_target) {
                    ok = false;
                    body["status"] = "no_target_node";
                }
            }
            return reply(ok ? 200 : 503, dump_json(body), "application/json");
        }
        if (p.rfind("/admin/", 0) == 0) return admin(p, get, post);
        if (!server_->authorised(req_)) return reply_error(401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
        if (p == "/v1/ws" && !websocket::is_upgrade(req_))
            return reply_error(426, "upgrade_required", "/v1/ws is the WebSocket endpoint: send an upgrade request (Upgrade: websocket)");
        if (websocket::is_upgrade(req_)) {
            if (p != "/v1/ws") return reply_error(404, "not_found", "WebSocket endpoint is /v1/ws");
            upgraded_ = true;
            std::make_shared<WsSession>(stream_.release_socket(), server_)->run(std::move(req_), std::move(buffer_));
            return;
        }
        if (p == "/metrics" && get) return reply(200, server_->render_metrics(), "text/plain; version=0.0.4");
        const json model = {{"id", server_->runtime.model_name()}, {"object", "model"}, {"created", static_cast<int64_t>(server_->start_time_s)},
                            {"owned_by", "specd"}, {"meta", {{"n_ctx", server_->runtime.n_ctx()},
                                                             {"draft_model", server_->runtime.has_draft_model()}}}};
        if (p == "/v1/models" && get) return reply(200, dump_json(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
        if (p.rfind("/v1/models/", 0) == 0 && get) {  // models.retrieve
            const std::string id = p.substr(std::strlen("/v1/models/"));
            if (id != server_->runtime.model_name())
                return reply_error(404, "model_not_found", "no model \"" + utf8_excerpt(id, 100) + "\"; this server has \"" +
                                                               server_->runtime.model_name() + "\"", "model");
            return reply(200, dump_json(model), "application/json");
        }
        if (p == "/v1/embeddings")
            return reply_error(501, "not_implemented", "embeddings are not implemented: specd serves generation (completions, chat)");
        if ((p == "/v1/completions" || p == "/v1/chat/completions") && post) return generate(p == "/v1/chat/completions");
        if (p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/models" || p == "/health" || p == "/metrics" || p == "/")
            return reply_error(405, "method_not_allowed", std::string(req_.method_string()) + " is not allowed on " + p);
        return reply_error(404, "not_found", "no endpoint " + utf8_excerpt(p, 200));
    }

    // The run-time switch of speculation (the guide's rollback): GET shows
    // the defaults new requests get, POST {"enabled", "draft_max",
    // "adaptive"} (any of them) changes them.
    void admin(const std::string& p, bool get, bool post) {
        const std::string& key = server_->opt.admin_key.empty() ? server_->opt.api_key : server_->opt.admin_key;
        if (key.empty())
            return reply_error(403, "admin_disabled", "the admin endpoints are off: start with --admin-key KEY or SPECD_ADMIN_KEY");
        if (bearer_token(req_[http::field::authorization]) != key)
            return reply_error(401, "invalid_admin_key", "missing or wrong admin key (Authorization: Bearer KEY)");
        if (p != "/admin/speculation")
            return reply_error(404, "not_found", "no endpoint " + utf8_excerpt(p, 200) + " (the admin endpoint is /admin/speculation)");
        if (!get && !post) return reply_error(405, "method_not_allowed", std::string(req_.method_string()) + " is not allowed on " + p);
        Runtime& rt = server_->runtime;
        if (post) {
            SpeculationSettings next = rt.speculation();
            try {
                const json body = parse_json(req_.body());
                if (!body.is_object()) throw ApiError{400, "invalid_request", "the body must be a JSON object", ""};
                for (auto it = body.begin(); it != body.end(); ++it) {
                    const json& v = it.value();
                    if (it.key() == "enabled" && v.is_boolean()) next.enabled = v.get<bool>();
                    else if (it.key() == "adaptive" && v.is_boolean()) next.adaptive = v.get<bool>();
                    else if (it.key() == "draft_max" && v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 64)
                        next.draft_max = v.get<int32_t>();
                    else if (it.key() == "enabled" || it.key() == "adaptive" || it.key() == "draft_max")
                        throw ApiError{400, "invalid_request",
                                       it.key() + (it.key() == "draft_max" ? " must be an integer in 0..64" : " must be true or false"), it.key()};
                    else throw ApiError{400, "invalid_request", "unknown key \"" + it.key() + "\" (enabled, draft_max, adaptive)", it.key()};
                }
            } catch (const ApiError& e) {
                return reply_error(e.status, e.code, e.message, e.param);
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
        return reply(200, dump_json(state), "application/json");
    }

    void generate(bool chat) {
        if (server_->draining) return reply_error(503, "draining", "the server is draining; retry on another instance");
        ParsedRequest parsed;
        try {
            json body = parse_json(req_.body());
            ChatContext ctx{&server_->chat_template};
            parsed = parse_generation(body, chat ? ApiKind::Chat : ApiKind::Completion, server_->opt.limits, render_chat_messages, &ctx);
        } catch (const ApiError& e) {
            return reply_error(e.status, e.code, e.message, e.param);
        }
        chat_ = chat;
        stream_mode_ = parsed.stream;
        include_usage_ = parsed.include_usage;
        created_ = unix_now();
        id_ = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(server_->metrics.http_requests.load()) + "-" +
              std::to_string(static_cast<int64_t>(now_ms() * 1000) % 1000000000);
        model_ = server_->runtime.model_name();
        parsed.request.id = id_;
        std::weak_ptr<HttpSession> weak = weak_from_this();
        const asio::any_io_executor strand = stream_.get_executor();
        std::shared_ptr<Server::Impl> impl = server_;  // outlives the connection and the Server object
        RuntimeCallbacks cb;
        cb.on_token = [impl, strand, weak](const token_event& e) {
            impl->post_to(strand, weak, [e](HttpSession& s) { s.on_token(e); });
        };
        // Counted here, not on the strand: the connection may be gone already.
        cb.on_done = [impl, strand, weak](const done_event& d) {
            impl->record_done(d);
            impl->log_done(d, "http", d.id);
            --impl->active_generations;
            impl->post_to(strand, weak, [d](HttpSession& s) { s.on_done(d); });
        };
        cb.on_error = [impl, strand, weak](const error_event& e) {
            ++impl->metrics.generations_error;
            impl->log_error(e, "http", e.id);
            --impl->active_generations;
            impl->post_to(strand, weak, [e](HttpSession& s) { s.on_error(e); });
        };
        stream_started_ = false;
        ++server_->active_generations;
        ++generation_serial_;
        generation_ = server_->runtime.submit(std::move(parsed.request), std::move(cb));
        watch_disconnect();
    }

    // Watches the socket while a generation runs (no read is pending then):
    // EOF or an error means the client went away, and the generation is
    // cancelled. The peek is non-blocking; a stale wait from an earlier
    // generation on this keep-alive connection does nothing.
    void watch_disconnect() {
        auto self = shared_from_this();
        const uint64_t watched = generation_serial_;
        stream_.socket().async_wait(tcp::socket::wait_read, [self, watched](beast::error_code ec) {
            if (!self->generation_ || watched != self->generation_serial_) return;
            char probe;
            beast::error_code rec;
            size_t n = 0;
            if (!ec) {
                self->stream_.socket().non_blocking(true, rec);
                n = self->stream_.socket().receive(asio::buffer(&probe, 1), tcp::socket::message_peek, rec);
            }
            if (!ec && rec == asio::error::would_block) return self->watch_disconnect();  // spurious wake-up
            if (!ec && !rec && n > 0) return;  // the client sent more (a pipelined request): still there
            self->server_->runtime.cancel(self->generation_);
            self->client_gone_ = true;
        });
    }

    // The SSE head goes out with the first token (or the end), not at
    // submission: a request that fails before it (context_exceeded, a full
    // queue) then answers with the status a non-streamed one gets.
    void start_stream() {
        if (stream_started_) return;
        stream_started_ = true;
        std::string head = "HTTP/1.1 200 OK\r\nServer: specd\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Transfer-Encoding: chunked\r\nConnection: " +
                           std::string(keep_alive_ ? "keep-alive" : "close") + "\r\n" + cors_header() + "\r\n";
        queue_raw(std::move(head));
        if (chat_) {
            const std::string role = "assistant";
            queue_sse(dump_json(chat_chunk(id_, model_, created_, &role, nullptr, "")));
        }
    }

    void on_token(const token_event& e) {
        timing_.on_tokens(server_->metrics, e.tokens.size());
        text_ += e.text;
        if (!stream_mode_) return;
        start_stream();
        if (!e.text.empty()) queue_sse(content_chunk_json(chat_, id_, model_, created_, e.text));
    }

    void on_done(const done_event& d) {
        generation_ = session_actor();
        if (client_gone_) return shutdown();
        if (stream_mode_) {
            start_stream();
            json last = chat_ ? chat_chunk(id_, model_, created_, nullptr, nullptr, openai_finish_reason(d.finish_reason))
                              : completion_chunk(id_, model_, created_, "", openai_finish_reason(d.finish_reason));
            last["usage"] = usage_json(d);
            last["timings"] = timings_json(d);
            last["speculative"] = speculative_json(d);
            queue_sse(dump_json(last));
            if (include_usage_) {
                // stream_options.include_usage, as OpenAI: one more chunk, no choices, the usage.
                json usage = chat_ ? chat_chunk(id_, model_, created_, nullptr, nullptr, "") : completion_chunk(id_, model_, created_, "", "");
                usage["choices"] = json::array();
                usage["usage"] = usage_json(d);
                queue_sse(dump_json(usage));
            }
            queue_sse("[DONE]");
            queue_raw("0\r\n\r\n");
            finish_stream_ = true;
            return;
        }
        const json body = chat_ ? chat_response(id_, model_, created_, text_, d) : completion_response(id_, model_, created_, text_, d);
        reply(200, dump_json(body), "application/json");
    }

    void on_error(const error_event& e) {
        generation_ = session_actor();
        if (client_gone_) return shutdown();
        const int status = e.code == "unknown_model" ? 404 : e.code == "overloaded" ? 429
                           : e.code == "draining" || e.code == "unavailable" ? 503
                           : e.code == "internal" ? 500 : e.code == "timeout" ? 504 : 400;
        if (stream_mode_ && stream_started_) {
            queue_sse(error_body(ApiError{status, e.code, e.message, ""}));
            queue_sse("[DONE]");
            queue_raw("0\r\n\r\n");
            finish_stream_ = true;
            return;
        }
        stream_mode_ = false;
        reply_error(status, e.code, e.message);
    }

    // The request headers a browser may send cross-origin: ours, those the
    // official OpenAI SDKs add (X-Stainless-*, OpenAI-*), and whatever a
    // preflight asks for (its list of header names, cleaned to token chars).
    std::string cors_allowed_headers() const {
        std::string allowed = "Authorization, Content-Type, Accept, OpenAI-Organization, OpenAI-Project, OpenAI-Beta, "
                              "X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, "
                              "X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Retry-Count, X-Stainless-Timeout";
        const auto requested = req_[http::field::access_control_request_headers];
        std::string names;
        for (const char c : requested.substr(0, 2048)) {
            if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ') names += c;
        }
        if (names.find_first_not_of(" ,") != std::string::npos) allowed += ", " + names;
        return allowed;
    }

    std::string cors_header() const {
        if (server_->opt.cors_origin.empty()) return "";
        return "Access-Control-Allow-Origin: " + server_->opt.cors_origin + "\r\nAccess-Control-Allow-Headers: " + cors_allowed_headers() +
               "\r\nAccess-Control-Allow-Methods: GET, HEAD, POST, OPTIONS\r\n";
    }

    // One SSE event as one HTTP chunk: "<size>\r\ndata: <data>\n\n\r\n".
    void queue_sse(const std::string& data) {
        char size[20];
        const int size_len = std::snprintf(size, sizeof size, "%zx\r\n", data.size() + 8);  // "data: " + "\n\n"
        std::string chunk;
        chunk.reserve(static_cast<size_t>(size_len) + data.size() + 10);
        chunk.append(size, static_cast<size_t>(size_len)).append("data: ").append(data).append("\n\n\r\n");
        queue_raw(std::move(chunk));
    }

    void queue_raw(std::string bytes) {
        out_.push_back(std::move(bytes));
        if (out_.size() == 1) do_raw_write();
    }

    void do_raw_write() {
        asio::async_write(stream_, asio::buffer(out_.front()), beast::bind_front_handler(&HttpSession::on_raw_write, shared_from_this()));
    }

    void on_raw_write(beast::error_code ec, size_t) {
        if (ec) {
            out_.clear();
            if (generation_) server_->runtime.cancel(generation_);
            client_gone_ = true;
            return;
        }
        out_.pop_front();
        if (!out_.empty()) return do_raw_write();
        if (finish_stream_) {
            finish_stream_ = false;
            stream_mode_ = false;
            if (!keep_alive_) return shutdown();
            text_.clear();
            do_read();
        }
    }

    void reply_error(int status, const std::string& code, const std::string& message, const std::string& param = "") {
        reply(status, error_body(ApiError{status, code, message, param}), "application/json");
    }

    void reply(int status, std::string body, const char* content_type) {
        auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
        res->set(http::field::server, "specd");
        res->set(http::field::content_type, content_type);
        if (status == 401) res->set(http::field::www_authenticate, "Bearer");
        if (status == 429) res->set(http::field::retry_after, "1");  // seconds; running requests finish in about that
        if (!server_->opt.cors_origin.empty()) {
            res->set(http::field::access_control_allow_origin, server_->opt.cors_origin);
            res->set(http::field::access_control_allow_headers, cors_allowed_headers());
            res->set(http::field::access_control_allow_methods, "GET, HEAD, POST, OPTIONS");
            res->set(http::field::access_control_max_age, "600");
        }
        res->keep_alive(keep_alive_);
        res->body() = std::move(body);
        res->prepare_payload();
        // HEAD: the GET answer's headers (Content-Length included), no body.
        if (head_) res->body().clear();
        http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
            if (ec || !self->keep_alive_) return self->shutdown();
            self->text_.clear();
            self->do_read();
        });
    }

    // Graceful close: stop sending, then read and discard what the client
    // still sends (a refused oversized body) until it closes, a cap or a
    // timeout, so it sees our response instead of a reset.
    void shutdown() {
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        drained_ = 0;
        stream_.expires_after(std::chrono::seconds(5));
        drain();
    }

    void drain() {
        drain_buf_.resize(64 * 1024);
        stream_.async_read_some(asio::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
            self->drained_ += n;
            if (ec || self->drained_ > kMaxDrainBytes) return;  // closed, timed out or too much: the socket closes with us
            self->drain();
        });
    }
    static constexpr size_t kMaxDrainBytes = 64u << 20;  // most bytes read and dropped while closing

    beast::tcp_stream stream_;
    std::shared_ptr<Server::Impl> server_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    http::request<http::string_body> req_;
    bool keep_alive_ = true;
    bool upgraded_ = false;
    // The generation in progress on this connection.
    session_actor generation_;
    uint64_t generation_serial_ = 0;  // bumped per generation (stale disconnect watches compare it)
    bool chat_ = false, stream_mode_ = false, finish_stream_ = false, client_gone_ = false;
    bool stream_started_ = false;  // the SSE head went out (start_stream)
    bool include_usage_ = false;   // stream_options.include_usage
    bool head_ = false;            // the request is HEAD: reply() sends no body
    std::string id_, model_, text_;
    int64_t created_ = 0;
    Timing timing_;
    std::deque<std::string> out_;
    std::vector<char> drain_buf_;
    size_t drained_ = 0;
};

}  // namespace

bool Server::Impl::authorised(const http::request<http::string_body>& req) const {
    if (opt.api_key.empty()) return true;
    if (bearer_token(req[http::field::authorization]) == opt.api_key) return true;
    // Browsers cannot set headers on a WebSocket: the key may come as ?api_key=.
    const std::optional<std::string> key = query_parameter(req.target(), "api_key");
    return key && *key == opt.api_key;
}

std::string Server::Impl::render_metrics() {
    std::string out;
    auto counter = [&](const char* name, const char* help, uint64_t v) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " + std::to_string(v) + "\n";
    };
    auto gauge = [&](const char* name, const char* help, double v) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + json(v).dump() + "\n";
    };
    counter("specd_http_requests_total", "HTTP requests received (WebSocket upgrades included).", metrics.http_requests);
    counter("specd_websocket_connections_total", "WebSocket connections accepted.", metrics.ws_connections);
    counter("specd_generations_total", "Generations that finished (any finish reason).", metrics.generations_ok);
    counter("specd_generations_cancelled_total", "Generations cancelled by the client or a disconnect.", metrics.generations_cancelled);
    counter("specd_generation_errors_total", "Generations that ended with an error.", metrics.generations_error);
    counter("specd_prompt_tokens_total", "Prompt tokens processed.", metrics.prompt_tokens);
    counter("specd_completion_tokens_total", "Tokens generated.", metrics.completion_tokens);
    counter("specd_spec_drafted_tokens_total", "Drafted tokens verified by the target.", metrics.drafted);
    counter("specd_spec_accepted_tokens_total", "Drafted tokens the target accepted.", metrics.accepted);
    {
        std::lock_guard<std::mutex> lock(metrics.position_mu);
        out += "# HELP specd_spec_position_acceptance_ratio Share of drafts reaching position i that were accepted there.\n"
               "# TYPE specd_spec_position_acceptance_ratio gauge\n";
        for (size_t i = 0; i < metrics.drafted_pos.size(); ++i) {
            const double r = metrics.drafted_pos[i] ? static_cast<double>(metrics.accepted_pos[i]) / static_cast<double>(metrics.drafted_pos[i]) : 0.0;
            out += "specd_spec_position_acceptance_ratio{position=\"" + std::to_string(i) + "\"} " + json(r).dump() + "\n";
        }
    }
    metrics.ttft.render(out, "specd_time_to_first_token_seconds", "Time from request to first token.");
    metrics.itl.render(out, "specd_inter_token_latency_seconds", "Time between streamed tokens, per token.");
    const runtime_stats s = runtime.stats();
    gauge("specd_kv_blocks_total", "Target KV cache blocks in the pool.", s.kv_target_blocks);
    gauge("specd_kv_blocks_used", "Target KV cache blocks set aside for running requests.", s.kv_target_blocks - s.kv_target_free);
    gauge("specd_kv_blocks_free", "Target KV cache blocks free.", s.kv_target_free);
    gauge("specd_draft_kv_blocks_used", "Draft KV cache blocks set aside.", s.kv_draft_blocks - s.kv_draft_free);
    gauge("specd_queue_depth", "Requests waiting for KV blocks.", s.waiting);
    gauge("specd_active_sessions", "Requests holding KV blocks.", s.running);
    gauge("specd_open_connections", "Open HTTP and WebSocket connections.", connections.load());
    gauge("specd_draining", "1 while the server drains.", draining ? 1 : 0);
    gauge("specd_active_generations", "Generations running or queued through this server.", active_generations.load());
    const SpeculationSettings spec = runtime.speculation();
    gauge("specd_speculation_enabled", "1 while new requests speculate by default (the run-time switch).", spec.enabled ? 1 : 0);
    gauge("specd_draft_max", "Tokens drafted per step at most, for new requests.", spec.draft_max);
    gauge("specd_draft_model_loaded", "1 when a draft model is loaded.", runtime.has_draft_model() ? 1 : 0);
    counter("specd_spec_low_acceptance_windows_total", "Acceptance windows that ended below the low-acceptance threshold.",
            metrics.low_acceptance_windows);
    // GPU memory and utilisation: only with a CUDA backend (an empty list
    // on the CPU prints nothing).
    gpu::render_gpu_metrics(out, runtime.gpu_stats());
    const ProcessStats ps = read_process_stats();
    gauge("process_resident_memory_bytes", "Resident memory size in bytes.", static_cast<double>(ps.resident_bytes));
    gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", static_cast<double>(ps.virtual_bytes));
    out += "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\n"
           "process_cpu_seconds_total " + json(ps.cpu_seconds).dump() + "\n";
    gauge("process_open_fds", "Number of open file descriptors.", static_cast<double>(ps.open_fds));
    gauge("process_threads", "Number of OS threads.", static_cast<double>(ps.threads));
    gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", start_time_s);
    return out;
}

void Server::Impl::do_accept() {
    acceptor->async_accept(asio::make_strand(*ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
        if (ec) {
            if (!self->stopped) self->do_accept();
            return;
        }
        beast::error_code sec;
        // Token events are small writes in quick succession: without this,
        // Nagle holds each one back until the client ACKs the previous one,
        // and the client delays its ACKs (milliseconds added to TTFT and ITL).
        socket.set_option(tcp::no_delay(true), sec);
        if (self->opt.socket_send_buffer > 0) {
            socket.set_option(asio::socket_base::send_buffer_size(self->opt.socket_send_buffer), sec);
        }
        if (self->connections >= self->opt.max_connections) {
            // Over the limit: a short 503 on the way out.
            static const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                            "Content-Length: 104\r\n\r\n"
                                            "{\"error\":{\"message\":\"too many connections\",\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}";
            beast::error_code wec;
            asio::write(socket, asio::buffer(busy), wec);
            socket.close(wec);
        } else {
            ++self->connections;
            std::make_shared<HttpSession>(std::move(socket), self)->run();
        }
        self->do_accept();
    });
}

Server::Server(Runtime& runtime, ServerOptions options) : impl_(std::make_shared<Impl>(runtime, std::move(options))) {}

Server::~Server() { stop(); }

namespace {

// Opens, binds and (when `listen`) listens; a failure is one line naming
// the address, e.g. "cannot listen on 127.0.0.1:8080: Address already in use".
void open_acceptor(tcp::acceptor& acceptor, const std::string& host, uint16_t port, bool listen) {
    const auto fail = [&](const std::string& why) {
        throw Error("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
    };
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) fail("not an IP address (give one, e.g. 127.0.0.1 or 0.0.0.0)");
    const tcp::endpoint ep(address, port);
    if (acceptor.open(ep.protocol(), ec); ec) fail(ec.message());
    if (acceptor.set_option(asio::socket_base::reuse_address(true), ec); ec) fail(ec.message());
    if (acceptor.bind(ep, ec); ec) fail(ec.message());
    if (listen) {
        if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) fail(ec.message());
    }
}

}  // namespace

void Server::check_address(const std::string& host, uint16_t port) {
    asio::io_context ioc;
    tcp::acceptor probe(ioc);
    open_acceptor(probe, host, port, true);
}

uint16_t Server::start() {
    open_acceptor(*impl_->acceptor, impl_->opt.host, impl_->opt.port, true);
    impl_->bound_port = impl_->acceptor->local_endpoint().port();
    impl_->do_accept();
    const int io_threads = impl_->opt.io_threads > 0 ? impl_->opt.io_threads : std::clamp(ThreadPool::hardware_threads() / 8, 1, 4);
    for (int i = 0; i < io_threads; ++i) {
        asio::io_context* ioc = impl_->ioc.get();
        impl_->threads.emplace_back([ioc] {
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
    return impl_->bound_port;
}

void Server::drain() { impl_->draining = true; }

int32_t Server::active_generations() const { return impl_->active_generations.load(); }

void Server::set_acceptance_watch(double low_rate, int64_t window_drafted) {
    std::lock_guard<std::mutex> lock(impl_->watch_mu);
    impl_->opt.low_acceptance_rate = low_rate;
    impl_->acceptance_watch.reconfigure(low_rate, window_drafted);
}

void Server::stop() {
    if (impl_->stopped.exchange(true)) return;
    impl_->draining = true;
    // WebSocket clients get a close frame saying why (1001, going away),
    // idle or busy, rather than a dropped socket; each gets up to
    // kCloseGrace to exchange it before the threads stop.
    std::vector<std::function<void()>> closers;
    {
        std::lock_guard<std::mutex> lock(impl_->ws_mu);
        for (auto& [id, close] : impl_->ws_closers) closers.push_back(close);
    }
    for (auto& close : closers) close();
    constexpr double kCloseGrace = 1000.0;  // ms
    const double deadline = now_ms() + kCloseGrace;
    while (!closers.empty() && impl_->open_websockets() > 0 && now_ms() < deadline && !impl_->threads.empty())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    impl_->ioc->stop();
    for (auto& t : impl_->threads) t.join();
    {
        std::unique_lock<std::shared_mutex> lock(impl_->post_mu);
        impl_->posts_open = false;  // the context goes next: runtime events for connections are dropped from now on
    }
    impl_->threads.clear();
    // Destroying the context destroys every pending handler and so every
    // connection (each cancels its generations on the way out).
    impl_->acceptor.reset();
    impl_->ioc.reset();
}

uint16_t Server::port() const { return impl_->bound_port; }

std::string Server::url() const { return "http://" + impl_->opt.host + ":" + std::to_string(impl_->bound_port); }

}  // namespace specd::net
