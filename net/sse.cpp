// Server-sent event framing; see sse.h.
#include "net/sse.h"

#include <cstdio>

#include "config/json_text.h"

namespace specd::net {

using nlohmann::json;

std::string sse_event(std::string_view data) {
    char size[20];
    const int size_len = std::snprintf(size, sizeof size, "%zx\r\n", data.size() + 8);  // "data: " + "\n\n"
    std::string chunk;
    chunk.reserve(static_cast<size_t>(size_len) + data.size() + 10);
    chunk.append(size, static_cast<size_t>(size_len)).append("data: ").append(data).append("\n\n\r\n");
    return chunk;
}

std::string sse_head(bool keep_alive, const std::string& cors_lines) {
    return "HTTP/1.1 200 OK\r\nServer: specd\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
           "Transfer-Encoding: chunked\r\nConnection: " +
           std::string(keep_alive ? "keep-alive" : "close") + "\r\n" + cors_lines + "\r\n";
}

SseStream::SseStream(bool chat, std::string id, std::string model, int64_t created, bool include_usage, int index)
    : chat_(chat), id_(std::move(id)), model_(std::move(model)), created_(created), include_usage_(include_usage), index_(index) {}

std::string SseStream::event(json chunk) const {
    if (index_ != 0) chunk["choices"][0]["index"] = index_;
    return sse_event(dump_json(chunk));
}

std::string SseStream::start(bool keep_alive, const std::string& cors_lines) {
    if (started_) return "";
    return sse_head(keep_alive, cors_lines) + open_choice();
}

std::string SseStream::open_choice() {
    if (started_) return "";
    started_ = true;
    if (!chat_) return "";
    const std::string role = "assistant";
    return event(chat_chunk(id_, model_, created_, &role, nullptr, ""));
}

std::string SseStream::content(const std::string& text) const {
    if (text.empty()) return "";
    return sse_event(content_chunk_json(chat_, id_, model_, created_, text, index_));
}

std::string SseStream::release(const std::string& content, const std::vector<ToolCallOut>& calls, const json& logprobs) {
    std::string out;
    if (!content.empty() || !logprobs.is_null()) {
        out += logprobs.is_null() ? this->content(content)
                                  : event(chat_chunk(id_, model_, created_, nullptr, content.empty() ? nullptr : &content, "", logprobs));
    }
    if (!calls.empty()) {
        json chunk = chat_chunk(id_, model_, created_, nullptr, nullptr, "");
        chunk["choices"][0]["delta"]["tool_calls"] = tool_calls_json(calls, calls_.calls_made() - static_cast<int>(calls.size()));
        out += event(std::move(chunk));
    }
    return out;
}

std::string SseStream::tool_chunks(std::string_view text, const json& logprobs) {
    std::string content;
    std::vector<ToolCallOut> calls;
    calls_.feed(text, content, calls);
    return release(content, calls, logprobs);
}

std::string SseStream::tokens(const token_event& e, const TokenPiece& piece) {
    const size_t base = text_bytes_;
    text_bytes_ += e.text.size();
    if (tools_) return tool_chunks(e.text, e.logprobs.empty() ? json(nullptr) : chat_logprobs_json(e, piece));
    if (e.logprobs.empty()) return content(e.text);
    return event(chat_ ? chat_chunk(id_, model_, created_, nullptr, &e.text, "", chat_logprobs_json(e, piece))
                       : completion_chunk(id_, model_, created_, e.text, "", completion_logprobs_json(e, piece, base)));
}

std::string SseStream::done(const done_event& d) { return finish(d) + end(usage_json(d)); }

std::string SseStream::finish(const done_event& d) {
    std::string out;
    if (tools_) {
        // The block the stop sequence cut is closed; what is still held
        // (an unclosed or malformed block) is content.
        if (tool_stop_ && d.stop_word == kToolCallClose) out += tool_chunks(kToolCallClose, nullptr);
        std::string rest;
        std::vector<ToolCallOut> calls;
        calls_.flush(rest, calls);
        out += release(rest, calls, nullptr);
    }
    json last = chat_ ? chat_chunk(id_, model_, created_, nullptr, nullptr, chat_finish_reason(d.finish_reason, calls_.calls_made()))
                      : completion_chunk(id_, model_, created_, "", openai_finish_reason(d.finish_reason));
    last["usage"] = usage_json(d);
    last["timings"] = timings_json(d);
    last["speculative"] = speculative_json(d);
    out += event(std::move(last));
    return out;
}

std::string SseStream::end(const json& usage) const {
    std::string out;
    if (include_usage_) {
        // stream_options.include_usage, as OpenAI: one more chunk, no choices, the usage.
        json chunk = chat_ ? chat_chunk(id_, model_, created_, nullptr, nullptr, "") : completion_chunk(id_, model_, created_, "", "");
        chunk["choices"] = json::array();
        chunk["usage"] = usage;
        out += sse_event(dump_json(chunk));
    }
    out += sse_event("[DONE]");
    out += kSseLastChunk;
    return out;
}

std::string SseStream::error(const ApiError& e) const {
    std::string out = sse_event(error_body(e));
    out += sse_event("[DONE]");
    out += kSseLastChunk;
    return out;
}

}  // namespace specd::net
