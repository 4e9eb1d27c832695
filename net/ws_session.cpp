// One WebSocket connection; see ws_session.h.
#include "net/ws_session.h"

#include <chrono>
#include <deque>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>

#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "config/log.h"
#include "net/routes.h"
#include "net/server_state.h"
#include "net/ws_protocol.h"

namespace specd::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

class WsSession : public std::enable_shared_from_this<WsSession> {
public:
    WsSession(tcp::socket&& socket, std::shared_ptr<ServerState> state)
        : ws_(std::move(socket)), state_(std::move(state)), connection_id_("ws" + std::to_string(state_->metrics.count_ws_connection())) {}
    ~WsSession() {
        for (auto& [id, g] : generations_) state_->runtime.cancel(g.handle);
        state_->forget_websocket(closer_id_);
        --state_->connections;
    }

    void run(http::request<http::string_body> req, beast::flat_buffer leftover) {
        websocket::stream_base::timeout t = websocket::stream_base::timeout::suggested(beast::role_type::server);
        t.idle_timeout = std::chrono::seconds(state_->opt.idle_timeout_s);
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
        closer_id_ = state_->remember_websocket([state = state_.get(), strand = ws_.get_executor(), weak = weak_from_this()] {
            state->post_to(strand, weak, [](WsSession& s) { s.close(websocket::close_code::going_away, "the server is shutting down"); });
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
        GenerationTiming timing;
    };

    void on_accept(beast::error_code ec) {
        accepted_ = true;
        if (ec) return;
        if (close_after_accept_) {
            const auto [code, reason] = *close_after_accept_;
            close_after_accept_.reset();
            close(code, reason);
            return;
        }
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
        if (buffer_.size() > state_->opt.max_message_bytes) {
            buffer_.consume(buffer_.size());
            close(websocket::close_code::too_big, "message larger than " + std::to_string(state_->opt.max_message_bytes) + " bytes");
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
        WsContext ctx{&state_->opt.limits, state_->draining.load(), render_chat_messages, state_->chat_template.get()};
        WsAction action = interpret_ws_message(text, ctx);
        const std::string& id = action.id;
        const std::string* idp = id.empty() ? nullptr : &id;
        if (action.kind == WsAction::Kind::Reply) return send(std::move(action.frame));
        if (action.kind == WsAction::Kind::Cancel) {
            auto it = generations_.find(id);
            if (it == generations_.end()) return send(ws_error_frame(idp, "unknown_id", "no running generation has id \"" + id + "\""));
            state_->runtime.cancel(it->second.handle);
            return;
        }
        ParsedRequest& parsed = action.parsed;
        if (generations_.count(id)) return send(ws_error_frame(idp, "duplicate_id", "a generation with id \"" + id + "\" is running"));
        if (static_cast<int32_t>(generations_.size()) >= state_->opt.max_generations_per_connection)
            return send(ws_error_frame(idp, "too_many_generations",
                                       "at most " + std::to_string(state_->opt.max_generations_per_connection) +
                                           " generations may run on one connection"));
        std::weak_ptr<WsSession> weak = weak_from_this();
        const asio::any_io_executor strand = ws_.get_executor();
        std::shared_ptr<ServerState> state = state_;  // outlives the connection and the Server object
        RuntimeCallbacks cb;
        cb.on_token = [state, strand, weak](const token_event& e) {
            state->post_to(strand, weak, [e](WsSession& s) {
                auto it = s.generations_.find(e.id);
                if (it != s.generations_.end()) it->second.timing.on_tokens(s.state_->metrics, e.tokens.size());
                s.send_tokens(e);
            });
        };
        const std::string log_id = connection_id_ + "/" + id;  // client ids are only unique per connection
        cb.on_done = [state, strand, weak, log_id](const done_event& d) {
            state->generation_done(d, "ws", log_id);
            state->post_to(strand, weak, [d](WsSession& s) {
                s.generations_.erase(d.id);
                s.send_final(d.id, ws_done_frame(d));
            });
        };
        cb.on_error = [state, strand, weak, log_id](const error_event& e) {
            state->generation_failed(e, "ws", log_id);
            state->post_to(strand, weak, [e](WsSession& s) {
                s.generations_.erase(e.id);
                s.send_final(e.id, ws_error_frame(&e.id, e.code, e.message));
            });
        };
        Generation g;
        ++state_->active_generations;
        g.handle = state_->runtime.submit(std::move(parsed.request), std::move(cb));
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
                append_token_event(merged, e);
                queue_[static_cast<size_t>(it->second.seq - front_seq_)] = ws_token_frame(merged, &piece_);
                return;
            }
        }
        if (!push(ws_token_frame(e, &piece_))) return;
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
        if (queue_.size() >= state_->opt.max_queued_frames) {
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
        // Beast makes the stream a server's only when the accept completes
        // (after the 101 is written): a close before then would go out as a
        // client's, masked, and the peer would drop it. Server::stop can
        // come in between.
        if (!accepted_) {
            close_after_accept_.emplace(code, reason);
            return;
        }
        if (closing_) return;
        closing_ = true;
        for (auto& [id, g] : generations_) state_->runtime.cancel(g.handle);
        ws_.async_close(websocket::close_reason(code, reason), [self = shared_from_this()](beast::error_code) {});
    }

    websocket::stream<beast::tcp_stream> ws_;
    std::shared_ptr<ServerState> state_;
    // Token ids to their bytes, for the logprobs of token frames (the runtime's tokenizer outlives the connection).
    TokenPiece piece_ = [tok = &state_->runtime.tokenizer()](int32_t id) { return tok->token_to_piece(id, true); };
    std::string connection_id_;      // "ws<n>": prefixes client ids in the log
    uint64_t closer_id_ = 0;         // our entry in the server's shutdown list
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
    bool accepted_ = false;  // the accept completed (successfully or not)
    std::optional<std::pair<websocket::close_code, std::string>> close_after_accept_;  // a close asked for before that
};

}  // namespace

void run_ws_session(tcp::socket&& socket, std::shared_ptr<ServerState> state, http::request<http::string_body> request,
                    beast::flat_buffer leftover) {
    std::make_shared<WsSession>(std::move(socket), std::move(state))->run(std::move(request), std::move(leftover));
}

}  // namespace specd::net
