// Server-sent events for streamed completions, as OpenAI streams them: the
// response head, then one "data: <json>" event per HTTP chunk (chunked
// transfer encoding), the final chunk with the finish reason, usage,
// timings and speculation figures, "data: [DONE]" and the last (empty)
// chunk. Bytes only: the HTTP session writes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/api.h"
#include "net/tool_calls.h"

namespace specd::net {

// One SSE event as one HTTP chunk: "<size>\r\ndata: <data>\n\n\r\n".
std::string sse_event(std::string_view data);

// The head of a streamed response: 200, text/event-stream, chunked;
// `cors_lines`: CORS header lines, each ending in CRLF.
std::string sse_head(bool keep_alive, const std::string& cors_lines);

// The last (empty) chunk, which ends a chunked body.
inline constexpr std::string_view kSseLastChunk = "0\r\n\r\n";

// One streamed completion's bytes, in order. The head goes out with the
// first token (or the end), not at submission: a request that fails before
// it (context_exceeded, a full queue) then answers with the status a
// non-streamed one gets.
class SseStream {
public:
    // `chat`: chat.completion.chunk objects (and a first chunk with the
    // assistant role), else text_completion ones; `include_usage`:
    // stream_options.include_usage (one more chunk with the usage and no choices).
    // `index`: the choice this stream's chunks belong to (n > 1: one SseStream per choice).
    SseStream(bool chat, std::string id, std::string model, int64_t created, bool include_usage, int index = 0);

    bool started() const { return started_; }
    // Chat with tools (ParsedRequest::tool_calls): the text goes through a
    // ToolCallStream (net/tool_calls.h), content deltas carry the text
    // around the calls and each completed call goes out as a
    // delta.tool_calls chunk ({index, id, type, function {name, arguments}},
    // whole); the last chunk says "tool_calls" when calls were made.
    // `close_at_stop`: ParsedRequest::tool_call_stop; `syntax`: its tool_syntax.
    void parse_tool_calls(bool close_at_stop, ToolCallSyntax syntax) {
        tools_ = true;
        tool_stop_ = close_at_stop;
        calls_ = ToolCallStream(syntax);
    }
    // The response head (200, text/event-stream, chunked; `cors_lines`:
    // CORS header lines, each ending in CRLF) and, for chat, the role
    // chunk; "" once started.
    std::string start(bool keep_alive, const std::string& cors_lines);
    // start() without the head, for a choice after the first (the head is
    // out already): chat's role chunk; "" once started.
    std::string open_choice();
    // A content chunk for `text` ("" for empty text). After start().
    std::string content(const std::string& text) const;
    // The chunk of one token event: content(e.text) when it carries no
    // log-probabilities; else a chunk with its text and its tokens'
    // logprobs (net/logprobs_json.h), sent even when the text is held back.
    std::string tokens(const token_event& e, const TokenPiece& piece);
    // The last chunks after start(): the finish reason with usage, timings
    // and speculation, the usage chunk when asked, [DONE], the last chunk.
    std::string done(const done_event& d);
    // done() in two parts, for n > 1: finish() writes this choice's last
    // chunks (its finish reason, with its own usage, timings and
    // speculation); end() then, once for the response, the usage chunk when
    // asked (`usage`: every choice's, usage_json's shape), [DONE], the last chunk.
    std::string finish(const done_event& d);
    std::string end(const nlohmann::json& usage) const;
    // An error after start(): the error object as an event, [DONE], the last chunk.
    std::string error(const ApiError& e) const;

private:
    bool chat_;
    std::string id_, model_;
    int64_t created_;
    bool include_usage_;
    int index_;
    bool started_ = false;
    size_t text_bytes_ = 0;  // completion text sent so far (completions' text_offset counts from its start)
    bool tools_ = false, tool_stop_ = false;  // parse_tool_calls()
    ToolCallStream calls_;

    // The chunks of the content and calls `calls_` released for `text`
    // (`logprobs`, when not null, ride on the first chunk, sent even when
    // no content is released).
    std::string tool_chunks(std::string_view text, const nlohmann::json& logprobs);
    std::string release(const std::string& content, const std::vector<ToolCallOut>& calls, const nlohmann::json& logprobs);
    // One chunk (a choices[0] entry) as an event, its index set to this stream's.
    std::string event(nlohmann::json chunk) const;
};

}  // namespace specd::net
