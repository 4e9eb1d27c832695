// One HTTP connection; see http_session.h.
#include "net/http_session.h"

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "config/json_text.h"
#include "config/log.h"
#include "net/routes.h"
#include "net/server_state.h"
#include "net/sse.h"
#include "net/ws_session.h"

namespace specd::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

RouteRequest::Method route_method(http::verb verb) {
    switch (verb) {
    case http::verb::get: return RouteRequest::Method::get;
    case http::verb::head: return RouteRequest::Method::head;
    case http::verb::post: return RouteRequest::Method::post;
    case http::verb::options: return RouteRequest::Method::options;
    case http::verb::unknown: return RouteRequest::Method::unknown;
    default: return RouteRequest::Method::other;
    }
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class HttpSession : public std::enable_shared_from_this<HttpSession> {
public:
    HttpSession(tcp::socket&& socket, std::shared_ptr<ServerState> state)
        : stream_(std::move(socket)), state_(std::move(state)), metrics_wait_(stream_.get_executor()) {}
    ~HttpSession() {
        if (generation_) state_->runtime.cancel(generation_);
        if (!upgraded_) --state_->connections;
    }

    void run() {
        asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::do_read, shared_from_this()));
    }

private:
    void do_read() {
        parser_.emplace();
        parser_->body_limit(state_->opt.max_body_bytes);
        stream_.expires_after(std::chrono::seconds(state_->opt.read_timeout_s));
        http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        if (ec == http::error::end_of_stream || ec == beast::error::timeout) return shutdown();
        if (ec == http::error::body_limit) {
            keep_alive_ = false;
            return reply_error(413, "request_too_large",
                               "the request body exceeds " + std::to_string(state_->opt.max_body_bytes) + " bytes");
        }
        if (ec) {
            keep_alive_ = false;
            return reply_error(400, "bad_request", std::string("malformed HTTP request: ") + ec.message());
        }
        req_ = parser_->release();
        keep_alive_ = req_.keep_alive();
        head_ = req_.method() == http::verb::head;
        state_->metrics.count_http_request();
        stream_.expires_never();
        try {
            route();
        } catch (const std::exception& e) {
            // A bug must cost this request (500), never the process.
            log::error("internal error handling an HTTP request", {{"path", request_path(req_.target())}, {"error", e.what()}});
            keep_alive_ = false;
            if (!stream_mode_ && out_.empty()) reply_error(500, "internal", "internal error while handling the request");
            else shutdown();
        }
    }

    void route() {
        RouteRequest request;
        request.method = route_method(req_.method());
        request.method_name = req_.method_string();
        request.target = req_.target();
        request.authorization = req_[http::field::authorization];
        request.upgrade = beast::websocket::is_upgrade(req_);
        request.body = req_.body();
        RouteResult result = handle_request(request, state_->route_context());
        if (result.close) keep_alive_ = false;
        switch (result.kind) {
        case RouteResult::Kind::Respond: return reply(result.status, std::move(result.body), result.content_type);
        case RouteResult::Kind::Upgrade:
            upgraded_ = true;
            run_ws_session(stream_.release_socket(), state_, std::move(req_), std::move(buffer_));
            return;
        case RouteResult::Kind::Metrics: return serve_metrics();
        case RouteResult::Kind::Generate: return generate(result.chat, std::move(result.parsed), std::move(result.llama));
        }
    }

    // The page is rendered on the metrics collector thread (it asks the
    // runtime for its figures): this connection waits for it, the network
    // thread serves others. The timer holds the session meanwhile.
    void serve_metrics() {
        metrics_wait_.expires_at(asio::steady_timer::time_point::max());
        metrics_wait_.async_wait([self = shared_from_this()](beast::error_code) {});
        ServerState* state = state_.get();  // alive while the collector runs (Server::stop ends it first)
        state_->metrics.scrape([state, strand = stream_.get_executor(), weak = weak_from_this()](const std::string& page) {
            state->post_to(strand, weak, [page](HttpSession& s) {
                s.metrics_wait_.cancel();
                s.reply(200, page, "text/plain; version=0.0.4");
            });
        });
    }

    void generate(bool chat, ParsedRequest parsed, std::optional<LlamaCompletionShape> llama) {
        chat_ = chat;
        llama_ = std::move(llama);
        tokens_.clear();
        llama_started_ = false;
        stream_mode_ = parsed.stream;
        created_ = unix_now();
        const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch());
        id_ = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(state_->metrics.http_requests()) + "-" +
              std::to_string(micros.count() % 1000000000);
        model_ = state_->runtime.model_name();
        if (stream_mode_ && !llama_) sse_.emplace(chat, id_, model_, created_, parsed.include_usage);
        tool_calls_ = parsed.tool_calls;
        tool_call_stop_ = parsed.tool_call_stop;
        tool_syntax_ = parsed.tool_syntax;
        if (sse_ && tool_calls_) sse_->parse_tool_calls(tool_call_stop_, tool_syntax_);
        all_ = token_event{};
        logprobs_asked_ = parsed.request.sampling.logprobs >= 0;
        parsed.request.id = id_;
        std::weak_ptr<HttpSession> weak = weak_from_this();
        const asio::any_io_executor strand = stream_.get_executor();
        std::shared_ptr<ServerState> state = state_;  // outlives the connection and the Server object
        RuntimeCallbacks cb;
        cb.on_token = [state, strand, weak](const token_event& e) {
            state->post_to(strand, weak, [e](HttpSession& s) { s.on_token(e); });
        };
        // Counted here, not on the strand: the connection may be gone already.
        cb.on_done = [state, strand, weak](const done_event& d) {
            state->generation_done(d, "http", d.id);
            state->post_to(strand, weak, [d](HttpSession& s) { s.on_done(d); });
        };
        cb.on_error = [state, strand, weak](const error_event& e) {
            state->generation_failed(e, "http", e.id);
            state->post_to(strand, weak, [e](HttpSession& s) { s.on_error(e); });
        };
        ++state_->active_generations;
        ++generation_serial_;
        timing_ = GenerationTiming();  // each generation on a keep-alive connection has its own first token
        generation_ = state_->runtime.submit(std::move(parsed.request), std::move(cb));
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
            self->state_->runtime.cancel(self->generation_);
            self->client_gone_ = true;
        });
    }

    void on_token(const token_event& e) {
        timing_.on_tokens(state_->metrics, e.tokens.size());
        if (!stream_mode_ && logprobs_asked_) {
            append_token_event(all_, e);  // the whole run's figures go in the one response (its text in all_.text)
            return;
        }
        text_ += e.text;
        if (llama_) {
            tokens_.insert(tokens_.end(), e.tokens.begin(), e.tokens.end());
            if (!stream_mode_) return;
            std::string bytes = llama_stream_start();
            bytes += sse_event(llama_completion_chunk(e.text, e.tokens, static_cast<int32_t>(tokens_.size())));
            return queue_raw(std::move(bytes));
        }
        if (!stream_mode_) return;
        std::string bytes = sse_->start(keep_alive_, cors_lines());
        bytes += sse_->tokens(e, token_piece());
        if (!bytes.empty()) queue_raw(std::move(bytes));
    }

    void on_done(const done_event& d) {
        generation_ = session_actor();
        if (client_gone_) return shutdown();
        if (llama_) {
            if (!stream_mode_) {
                const std::vector<int32_t> none;
                return reply(200, dump_json(llama_completion_response(*llama_, model_, text_, llama_->return_tokens ? tokens_ : none, d)),
                             "application/json");
            }
            // The last event: the whole answer without the text and ids already streamed.
            std::string bytes = llama_stream_start();
            bytes += sse_event(dump_json(llama_completion_response(*llama_, model_, "", {}, d)));
            bytes += kSseLastChunk;
            queue_raw(std::move(bytes));
            finish_stream_ = true;
            return;
        }
        if (stream_mode_) {
            std::string bytes = sse_->start(keep_alive_, cors_lines());
            bytes += sse_->done(d);
            queue_raw(std::move(bytes));
            finish_stream_ = true;
            return;
        }
        nlohmann::json logprobs = nullptr;
        if (logprobs_asked_) {
            logprobs = chat_ ? chat_logprobs_json(all_, token_piece()) : completion_logprobs_json(all_, token_piece(), 0);
            text_ = std::move(all_.text);
        }
        std::vector<ToolCallOut> calls;
        if (chat_ && tool_calls_) {
            // The reply's <tool_call> blocks become tool_calls, the rest the content.
            if (tool_call_stop_ && d.stop_word == kToolCallClose) text_ += kToolCallClose;
            std::string content;
            parse_tool_calls(text_, content, calls, tool_syntax_);
            text_ = std::move(content);
        }
        const nlohmann::json body = chat_ ? chat_response(id_, model_, created_, text_, d, logprobs, calls)
                                          : completion_response(id_, model_, created_, text_, d, logprobs);
        reply(200, dump_json(body), "application/json");
    }

    void on_error(const error_event& e) {
        generation_ = session_actor();
        if (client_gone_) return shutdown();
        const int status = status_for_error_code(e.code);
        if (stream_mode_ && llama_ && llama_started_) {
            std::string bytes = sse_event(error_body(ApiError{status, e.code, e.message, ""}));
            bytes += kSseLastChunk;
            queue_raw(std::move(bytes));
            finish_stream_ = true;
            return;
        }
        if (stream_mode_ && !llama_ && sse_->started()) {
            queue_raw(sse_->error(ApiError{status, e.code, e.message, ""}));
            finish_stream_ = true;
            return;
        }
        stream_mode_ = false;
        reply_error(status, e.code, e.message);
    }

    // The head of a streamed /completion answer with its first event; "" after.
    std::string llama_stream_start() {
        if (llama_started_) return "";
        llama_started_ = true;
        return sse_head(keep_alive_, cors_lines());
    }

    // The CORS header lines of a streamed response ("" without --cors-origin).
    std::string cors_lines() const {
        if (state_->opt.cors_origin.empty()) return "";
        return "Access-Control-Allow-Origin: " + state_->opt.cors_origin +
               "\r\nAccess-Control-Allow-Headers: " + cors_allowed_headers(req_[http::field::access_control_request_headers]) +
               "\r\nAccess-Control-Allow-Methods: GET, HEAD, POST, OPTIONS\r\n";
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
            if (generation_) state_->runtime.cancel(generation_);
            client_gone_ = true;
            return;
        }
        out_.pop_front();
        if (!out_.empty()) return do_raw_write();
        if (finish_stream_) {
            finish_stream_ = false;
            stream_mode_ = false;
            sse_.reset();
            if (!keep_alive_) return shutdown();
            text_.clear();
            do_read();
        }
    }

    void reply_error(int status, const std::string& code, const std::string& message) {
        RouteResult r = error_result(status, code, message);
        reply(r.status, std::move(r.body), r.content_type);
    }

    void reply(int status, std::string body, const std::string& content_type) {
        auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
        res->set(http::field::server, "specd");
        res->set(http::field::content_type, content_type);
        if (status == 401) res->set(http::field::www_authenticate, "Bearer");
        if (status == 429) res->set(http::field::retry_after, "1");  // seconds; running requests finish in about that
        if (!state_->opt.cors_origin.empty()) {
            res->set(http::field::access_control_allow_origin, state_->opt.cors_origin);
            res->set(http::field::access_control_allow_headers, cors_allowed_headers(req_[http::field::access_control_request_headers]));
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
    std::shared_ptr<ServerState> state_;
    asio::steady_timer metrics_wait_;  // pending while the metrics page is rendered (holds the session)
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    http::request<http::string_body> req_;
    bool keep_alive_ = true;
    bool upgraded_ = false;
    // The generation in progress on this connection.
    session_actor generation_;
    uint64_t generation_serial_ = 0;  // bumped per generation (stale disconnect watches compare it)
    bool chat_ = false, stream_mode_ = false, finish_stream_ = false, client_gone_ = false;
    bool head_ = false;               // the request is HEAD: reply() sends no body
    std::optional<SseStream> sse_;    // the streamed response in progress (OpenAI shapes)
    std::optional<LlamaCompletionShape> llama_;  // answering POST /completion (llama-server's shapes)
    std::vector<int32_t> tokens_;     // /completion: the ids generated so far
    bool llama_started_ = false;      // /completion, streamed: the head is out
    token_event all_;                 // not streamed, logprobs asked: every token so far with its figures and its text
    bool logprobs_asked_ = false;     // the request asked for logprobs (the response then carries the object, even empty)
    bool tool_calls_ = false;         // chat with tools: the reply's <tool_call> blocks become tool_calls (ParsedRequest::tool_calls)
    bool tool_call_stop_ = false;     // ParsedRequest::tool_call_stop
    ToolCallSyntax tool_syntax_ = ToolCallSyntax::TaggedBlocks;  // ParsedRequest::tool_syntax

    // Token ids to their bytes, for the logprobs objects.
    TokenPiece token_piece() const {
        const Tokenizer* tok = &state_->runtime.tokenizer();
        return [tok](int32_t id) { return tok->token_to_piece(id, true); };
    }
    std::string id_, model_, text_;
    int64_t created_ = 0;
    GenerationTiming timing_;
    std::deque<std::string> out_;     // raw bytes to write (a streamed response); the front is being written
    std::vector<char> drain_buf_;
    size_t drained_ = 0;
};

}  // namespace

void run_http_session(tcp::socket&& socket, std::shared_ptr<ServerState> state) {
    std::make_shared<HttpSession>(std::move(socket), std::move(state))->run();
}

}  // namespace specd::net
