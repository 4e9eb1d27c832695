#include "net/tool_calls.h"

#include <nlohmann/json.hpp>

#include "config/json_text.h"

namespace specd {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = kToolCallClose;
// A block longer than this is not a call a client can use: released as text.
constexpr size_t kMaxBlockBytes = 256 * 1024;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The call in a block's JSON, or false. Qwen writes {"name", "arguments":
// {...}}; Llama 3.1's JSON calls say "parameters"; a string of JSON is
// accepted too (some fine-tunes quote it). The arguments keep the model's
// key order (as OpenAI returns them): checked with the depth-limited
// parser, written from an order-keeping parse of the same text.
bool read_call(std::string_view json_text, ToolCallOut& call) {
    nlohmann::json j;
    try {
        j = parse_json_text(json_text);
    } catch (const JsonTextError&) {
        return false;
    }
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
    std::string args = "{}";
    if (key && j[key].is_string()) {
        args = j[key].get<std::string>();
        try {
            if (!parse_json_text(args).is_object()) return false;
        } catch (const JsonTextError&) {
            return false;
        }
    } else if (key) {
        if (!j[key].is_object()) return false;
        args = nlohmann::ordered_json::parse(json_text)[key].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    if (key && j[key].is_string())
        args = nlohmann::ordered_json::parse(args).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    call.name = j["name"].get<std::string>();
    call.arguments = std::move(args);
    return true;
}

// How much of `text`'s end could be the start of kOpen.
size_t open_prefix_at_end(std::string_view text) {
    for (size_t n = std::min(text.size(), kOpen.size() - 1); n > 0; --n) {
        if (text.substr(text.size() - n) == kOpen.substr(0, n)) return n;
    }
    return 0;
}

// Content trimming as llama.cpp's: no whitespace at the start or the end of
// the content, none left over where a block was cut out. Whitespace is held
// (in held_ws_) until text follows it.
class ContentWriter {
public:
    ContentWriter(std::string& out, std::string& held_ws, bool& started) : out_(out), held_ws_(held_ws), started_(started) {}
    void write(std::string_view s) {
        size_t end = s.size();
        while (end > 0 && is_space(s[end - 1])) --end;
        if (end == 0) {
            if (started_) held_ws_.append(s);
            return;
        }
        size_t begin = 0;
        if (!started_) {
            while (is_space(s[begin])) ++begin;
            started_ = true;
        } else {
            out_ += held_ws_;
        }
        held_ws_.assign(s.substr(end));
        out_.append(s.substr(begin, end - begin));
    }

private:
    std::string& out_;
    std::string& held_ws_;
    bool& started_;
};

}  // namespace

void ToolCallStream::feed_whole_reply(std::string_view text, std::string& content) {
    ContentWriter writer(content, held_ws_, started_);
    if (decided_ && !whole_call_) return writer.write(text);
    held_.append(text);
    if (!decided_) {
        size_t first = 0;
        while (first < held_.size() && is_space(held_[first])) ++first;
        if (first == held_.size()) return;  // only whitespace so far
        decided_ = true;
        whole_call_ = held_[first] == '{';
    }
    if (whole_call_ && held_.size() <= kMaxBlockBytes) return;  // held to the end of the reply
    whole_call_ = false;
    writer.write(held_);
    held_.clear();
}

void ToolCallStream::feed(std::string_view text, std::string& content, std::vector<ToolCallOut>& calls) {
    if (syntax_ == ToolCallSyntax::WholeReply) return feed_whole_reply(text, content);
    held_.append(text);
    ContentWriter writer(content, held_ws_, started_);
    while (!held_.empty()) {
        if (held_.compare(0, kOpen.size(), kOpen) == 0) {
            const size_t close = held_.find(kClose, kOpen.size());
            if (close == std::string::npos) {
                if (held_.size() <= kMaxBlockBytes) return;  // the block is still arriving
                writer.write(held_);
                held_.clear();
                return;
            }
            ToolCallOut call;
            if (read_call(std::string_view(held_).substr(kOpen.size(), close - kOpen.size()), call)) {
                call.id = "call_" + std::to_string(next_id_++);
                calls.push_back(std::move(call));
                held_ws_.clear();
            } else {
                writer.write(std::string_view(held_).substr(0, close + kClose.size()));
            }
            held_.erase(0, close + kClose.size());
            continue;
        }
        const size_t open = held_.find(kOpen);
        if (open != std::string::npos) {
            writer.write(std::string_view(held_).substr(0, open));
            held_.erase(0, open);
            continue;
        }
        const size_t keep = open_prefix_at_end(held_);
        writer.write(std::string_view(held_).substr(0, held_.size() - keep));
        held_.erase(0, held_.size() - keep);
        return;
    }
}

void ToolCallStream::flush(std::string& content, std::vector<ToolCallOut>& calls) {
    ContentWriter writer(content, held_ws_, started_);
    if (whole_call_) {
        whole_call_ = false;
        ToolCallOut call;
        if (read_call(held_, call)) {
            call.id = "call_" + std::to_string(next_id_++);
            calls.push_back(std::move(call));
            held_.clear();
        }
    }
    writer.write(held_);
    held_.clear();
    held_ws_.clear();  // trailing whitespace is trimmed
}

void parse_tool_calls(std::string_view reply, std::string& content, std::vector<ToolCallOut>& calls, ToolCallSyntax syntax) {
    ToolCallStream stream(syntax);
    stream.feed(reply, content, calls);
    stream.flush(content, calls);
}

}  // namespace specd
