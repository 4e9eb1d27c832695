// Tool calls in a model's reply, as OpenAI's API returns them: the
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks that
// Qwen2.5's (Hermes') format writes (engine/chat_template.h, ToolFormat)
// become `tool_calls` entries, the text around them the message content;
// in Llama 3.1's format the whole reply is one call, {"name": ...,
// "parameters": {...}}, or it is content.
//
// Streamed, the text before a block goes out as content deltas at once;
// from the first byte that could open a block ("<" of "<tool_call>") it is
// held until the block closes (a call delta) or turns out to be text. A
// whole-reply call is held from its opening "{" to the end of the reply.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace specd {

// The tag that closes a call block.
inline constexpr std::string_view kToolCallClose = "</tool_call>";

enum class ToolCallSyntax {
    TaggedBlocks,  // Qwen2.5 / Hermes: <tool_call> blocks among text
    WholeReply,    // Llama 3.1: the reply, trimmed, is one JSON call object
};

struct ToolCallOut {
    std::string id;         // "call_" + a per-reply counter, unique in the reply
    std::string name;
    std::string arguments;  // a JSON object as text (OpenAI sends arguments as a string)
};

class ToolCallStream {
public:
    explicit ToolCallStream(ToolCallSyntax syntax = ToolCallSyntax::TaggedBlocks) : syntax_(syntax) {}
    // Feeds reply text. Appends the content that can be shown now to
    // `content` and each call that completed to `calls`.
    void feed(std::string_view text, std::string& content, std::vector<ToolCallOut>& calls);
    // The end of the reply: a whole-reply call completes here; text still
    // held (an unclosed or malformed block) is released as content, as
    // llama.cpp returns what it cannot parse.
    void flush(std::string& content, std::vector<ToolCallOut>& calls);
    int calls_made() const { return next_id_; }

private:
    void feed_whole_reply(std::string_view text, std::string& content);

    ToolCallSyntax syntax_;
    bool whole_call_ = false;  // WholeReply: the reply opened with "{" and is held as a possible call
    bool decided_ = false;     // WholeReply: its first non-space byte was seen
    std::string held_;     // text from a possible "<tool_call>" on
    std::string held_ws_;  // whitespace after the content written so far: written only if more content follows
    bool started_ = false; // content written (leading whitespace is trimmed)
    int next_id_ = 0;
};

// The whole reply at once: content (blocks removed, the rest trimmed as
// llama.cpp trims it) and the calls.
void parse_tool_calls(std::string_view reply, std::string& content, std::vector<ToolCallOut>& calls,
                      ToolCallSyntax syntax = ToolCallSyntax::TaggedBlocks);

}  // namespace specd
