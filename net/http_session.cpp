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
        cancel_choices();
        if (!upgraded_) --state_->connections;
    }

    void run() {
        asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::do_read, shared_from_this()));
    }

private:
    // One choice of a generation (OpenAI's n): its own runtime request.
    struct Choice {
        session_actor generation;                 // while it runs
        std::optional<generate_request> waiting;  // not submitted yet (start_waiting_choices)
        std::string text;                         // not streamed: the reply so far
        token_event all;                          // not streamed, logprobs asked: every token so far with its figures and its text
        std::optional<SseStream> sse;             // streamed (OpenAI shapes): this choice's chunks
        std::optional<done_event> done;           // its end
    };

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
        head_sent_ = false;
        answered_ = false;
        stream_mode_ = parsed.stream;
        created_ = unix_now();
        const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch());
        id_ = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(state_->metrics.http_requests()) + "-" +
              std::to_string(micros.count() % 1000000000);
        model_ = state_->runtime.model_name();
        tool_calls_ = parsed.tool_calls;
        tool_call_stop_ = parsed.tool_call_stop;
        tool_syntax_ = parsed.tool_syntax;
        logprobs_asked_ = parsed.request.sampling.logprobs >= 0;
        parsed.request.id = id_;
        const int32_t n = llama_ ? 1 : std::max(1, parsed.n);
        choices_.clear();
        choices_.resize(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) {
            Choice& c = choices_[static_cast<size_t>(i)];
            if (stream_mode_ && !llama_) {
                c.sse.emplace(chat, id_, model_, created_, parsed.include_usage, i);
                if (tool_calls_) c.sse->parse_tool_calls(tool_call_stop_, tool_syntax_);
            }
            if (i == 0) continue;
            // Each choice samples on its own: a seeded request's choice i
            // races with seed + i (never the value that means "random").
            c.waiting = parsed.request;
            SamplingParams& s = c.waiting->sampling;
            if (s.coupled && s.seed != kRandomSeed) {
                s.seed += static_cast<uint64_t>(i);
                if (s.seed == kRandomSeed) s.seed += static_cast<uint64_t>(n);
            }
        }
        ++generation_serial_;
        timing_ = GenerationTiming();  // each generation on a keep-alive connection has its own first token
        submit_choice(0, std::move(parsed.request));
        watch_disconnect();
    }

    // Starts choice i on the runtime; its events come back to this
    // connection's strand, dropped there if they belong to an earlier
    // generation of the connection.
    void submit_choice(size_t i, generate_request request) {
        std::weak_ptr<HttpSession> weak = weak_from_this();
        const asio::any_io_executor strand = stream_.get_executor();
        std::shared_ptr<ServerState> state = state_;  // outlives the connection and the Server object
        const uint64_t serial = generation_serial_;
        RuntimeCallbacks cb;
        cb.on_token = [state, strand, weak, i, serial](const token_event& e) {
            state->post_to(strand, weak, [e, i, serial](HttpSession& s) {
                if (serial == s.generation_serial_) s.on_token(i, e);
            });
        };
        // Counted here, not on the strand: the connection may be gone already.
        cb.on_done = [state, strand, weak, i, serial](const done_event& d) {
            state->generation_done(d, "http", d.id);
            state->post_to(strand, weak, [d, i, serial](HttpSession& s) {
                if (serial == s.generation_serial_) s.on_done(i, d);
            });
        };
        cb.on_error = [state, strand, weak, i, serial](const error_event& e) {
            state->generation_failed(e, "http", e.id);
            state->post_to(strand, weak, [e, i, serial](HttpSession& s) {
                if (serial == s.generation_serial_) s.on_error(i, e);
            });
        };
        ++state_->active_generations;
        choices_[i].generation = state_->runtime.submit(std::move(request), std::move(cb));
    }

    // n > 1: the choices after the first start once the first has its
    // prompt in the KV cache (its first token, or its end): the prefix cache
    // then hands them the prompt's blocks, so the prompt is computed once.
    void start_waiting_choices() {
        for (size_t i = 1; i < choices_.size(); ++i) {
            if (!choices_[i].waiting) continue;
            generate_request request = std::move(*choices_[i].waiting);
            choices_[i].waiting.reset();
            submit_choice(i, std::move(request));
        }
    }

    bool generating() const {
        for (const Choice& c : choices_)
            if (c.generation) return true;
        return false;
    }

    void cancel_choices() {
        for (Choice& c : choices_) {
            c.waiting.reset();
            if (c.generation) state_->runtime.cancel(c.generation);
        }
    }

    // Watches the socket while a generation runs (no read is pending then):
    // EOF or an error means the client went away, and the generation is
    // cancelled. The peek is non-blocking; a stale wait from an earlier
    // generation on this keep-alive connection does nothing.
    void watch_disconnect() {
        auto self = shared_from_this();
        const uint64_t watched = generation_serial_;
        stream_.socket().async_wait(tcp::socket::wait_read, [self, watched](beast::error_code ec) {
            if (!self->generating() || watched != self->generation_serial_) return;
            char probe;
            beast::error_code rec;
            size_t n = 0;
            if (!ec) {
                self->stream_.socket().non_blocking(true, rec);
                n = self->stream_.socket().receive(asio::buffer(&probe, 1), tcp::socket::message_peek, rec);
            }
            if (!ec && rec == asio::error::would_block) return self->watch_disconnect();  // spurious wake-up
            if (!ec && !rec && n > 0) return;  // the client sent more (a pipelined request): still there
            self->cancel_choices();
            self->client_gone_ = true;
        });
    }

    // A streamed response's bytes before choice c's first chunk: the head
    // (with the first choice to speak) and the choice's role chunk.
    std::string open_stream(Choice& c) {
        if (head_sent_) return c.sse->open_choice();
        head_sent_ = true;
        return c.sse->start(keep_alive_, cors_lines());
    }

    void on_token(size_t i, const token_event& e) {
        if (answered_) return;
        Choice& c = choices_[i];
        if (i == 0) {
            timing_.on_tokens(state_->metrics, e.tokens.size());
            start_waiting_choices();
        }
        if (!stream_mode_ && logprobs_asked_) {
            append_token_event(c.all, e);  // the whole run's figures go in the one response (its text in all.text)
            return;
        }
        c.text += e.text;
        if (llama_) {
            tokens_.insert(tokens_.end(), e.tokens.begin(), e.tokens.end());
            if (!stream_mode_) return;
            std::string bytes = llama_stream_start();
            bytes += sse_event(llama_completion_chunk(e.text, e.tokens, static_cast<int32_t>(tokens_.size())));
            return queue_raw(std::move(bytes));
        }
        if (!stream_mode_) return;
        std::string bytes = open_stream(c);
        bytes += c.sse->tokens(e, token_piece());
        if (!bytes.empty()) queue_raw(std::move(bytes));
    }

    // The whole (non-streamed) response of choice i alone, as n = 1 answers it.
    nlohmann::json choice_response(size_t i) {
        Choice& c = choices_[i];
        const done_event& d = *c.done;
        nlohmann::json logprobs = nullptr;
        if (logprobs_asked_) {
            logprobs = chat_ ? chat_logprobs_json(c.all, token_piece()) : completion_logprobs_json(c.all, token_piece(), 0);
            c.text = std::move(c.all.text);
        }
        std::vector<ToolCallOut> calls;
        if (chat_ && tool_calls_) {
            // The reply's <tool_call> blocks become tool_calls, the rest the content.
            if (tool_call_stop_ && d.stop_word == kToolCallClose) c.text += kToolCallClose;
            std::string content;
            parse_tool_calls(c.text, content, calls, tool_syntax_);
            c.text = std::move(content);
        }
        return chat_ ? chat_response(id_, model_, created_, c.text, d, logprobs, calls)
                     : completion_response(id_, model_, created_, c.text, d, logprobs);
    }

    // Usage of the whole response: the prompt once (the choices share it),
    // every choice's completion tokens.
    nlohmann::json total_usage() const {
        nlohmann::json usage = usage_json(*choices_[0].done);
        int64_t completion = 0;
        for (const Choice& c : choices_) completion += c.done->completion_tokens;
        usage["completion_tokens"] = completion;
        usage["total_tokens"] = completion + choices_[0].done->prompt_tokens;
        return usage;
    }

    void on_done(size_t i, const done_event& d) {
        if (answered_) return;
        Choice& c = choices_[i];
        c.generation = session_actor();
        c.done = d;
        if (client_gone_) {
            answered_ = true;
            cancel_choices();
            return shutdown();
        }
        if (i == 0) start_waiting_choices();  // (it ended before its first token)
        for (const Choice& other : choices_)
            if (!other.done) {
                // Streamed, this choice's last chunks go out now; the response ends with the last choice.
                if (stream_mode_ && !llama_) queue_raw(open_stream(c) + c.sse->finish(d));
                return;
            }
        answered_ = true;
        if (llama_) {
            if (!stream_mode_) {
                const std::vector<int32_t> none;
                return reply(200, dump_json(llama_completion_response(*llama_, model_, c.text, llama_->return_tokens ? tokens_ : none, d)),
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
            std::string bytes = open_stream(c);
            bytes += c.sse->finish(d);
            bytes += c.sse->end(total_usage());
            queue_raw(std::move(bytes));
            finish_stream_ = true;
            return;
        }
        nlohmann::json body = choice_response(0);
        for (size_t k = 1; k < choices_.size(); ++k) {
            nlohmann::json choice = std::move(choice_response(k)["choices"][0]);
            choice["index"] = k;
            body["choices"].push_back(std::move(choice));
        }
        if (choices_.size() > 1) body["usage"] = total_usage();
        reply(200, dump_json(body), "application/json");
    }

    void on_error(size_t i, const error_event& e) {
        if (answered_) return;
        choices_[i].generation = session_actor();
        answered_ = true;
        cancel_choices();  // the other choices of a failed request go too
        if (client_gone_) return shutdown();
        const int status = status_for_error_code(e.code);
        if (stream_mode_ && llama_ && llama_started_) {
            std::string bytes = sse_event(error_body(ApiError{status, e.code, e.message, ""}));
            bytes += kSseLastChunk;
            queue_raw(std::move(bytes));
            finish_stream_ = true;
            return;
        }
        if (stream_mode_ && !llama_ && head_sent_) {
            queue_raw(choices_[i].sse->error(ApiError{status, e.code, e.message, ""}));
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
            cancel_choices();
            client_gone_ = true;
            return;
        }
        out_.pop_front();
        if (!out_.empty()) return do_raw_write();
        if (finish_stream_) {
            finish_stream_ = false;
            stream_mode_ = false;
            choices_.clear();
            if (!keep_alive_) return shutdown();
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
            self->choices_.clear();
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
    // The generation in progress on this connection: one runtime request per
    // choice (OpenAI's n; Choice above).
    std::vector<Choice> choices_;     // (n) empty between generations
    bool head_sent_ = false;          // streamed: the response head is out
    bool answered_ = false;           // the response is complete or failed: the choices' later events are dropped
    uint64_t generation_serial_ = 0;  // bumped per generation (stale disconnect watches and events compare it)
    bool chat_ = false, stream_mode_ = false, finish_stream_ = false, client_gone_ = false;
    bool head_ = false;               // the request is HEAD: reply() sends no body
    std::optional<LlamaCompletionShape> llama_;  // answering POST /completion (llama-server's shapes)
    std::vector<int32_t> tokens_;     // /completion: the ids generated so far
    bool llama_started_ = false;      // /completion, streamed: the head is out
    bool logprobs_asked_ = false;     // the request asked for logprobs (the response then carries the object, even empty)
    bool tool_calls_ = false;         // chat with tools: the reply's <tool_call> blocks become tool_calls (ParsedRequest::tool_calls)
    bool tool_call_stop_ = false;     // ParsedRequest::tool_call_stop
    ToolCallSyntax tool_syntax_ = ToolCallSyntax::TaggedBlocks;  // ParsedRequest::tool_syntax

    // Token ids to their bytes, for the logprobs objects.
    TokenPiece token_piece() const {
        const Tokenizer* tok = &state_->runtime.tokenizer();
        return [tok](int32_t id) { return tok->token_to_piece(id, true); };
    }
    std::string id_, model_;
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
