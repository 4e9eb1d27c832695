// libFuzzer target for the tool-call parser (net/tool_calls.h), which reads
// a model's reply: arbitrary text, since a model can write anything. The
// first byte seeds the piece sizes the rest is streamed in.
//
// Properties checked on every input:
//  1. Streamed in pieces of 1-16 bytes, the reply gives the same content and
//     the same calls as parsed whole (where the cuts fall changes nothing).
//  2. Every call has a name and arguments that are one JSON object's text,
//     and ids run call_0, call_1, ...
//  3. No content byte is invented: with no calls, the content is the reply
//     without its surrounding whitespace.
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/tool_calls/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/tool_calls.h"

namespace {
[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_tool_calls: property violated: %s\n", what);
    std::abort();
}
bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const unsigned seed = data[0];
    const std::string_view reply(reinterpret_cast<const char*>(data) + 1, size - 1);

    // The seed's top bit picks the syntax: Qwen's tagged blocks or Llama 3.1's whole-reply call.
    const specd::ToolCallSyntax syntax = (seed & 0x80) != 0 ? specd::ToolCallSyntax::WholeReply : specd::ToolCallSyntax::TaggedBlocks;
    std::string whole_content;
    std::vector<specd::ToolCallOut> whole_calls;
    specd::parse_tool_calls(reply, whole_content, whole_calls, syntax);

    specd::ToolCallStream stream(syntax);
    std::string content;
    std::vector<specd::ToolCallOut> calls;
    size_t at = 0, step = seed % 16 + 1;
    while (at < reply.size()) {
        const std::string_view piece = reply.substr(at, step);
        stream.feed(piece, content, calls);
        at += piece.size();
        step = (step * 7 + seed) % 16 + 1;
    }
    stream.flush(content, calls);

    if (syntax == specd::ToolCallSyntax::WholeReply && calls.size() > 1) fail("a whole-reply call gave more than one call");
    if (content != whole_content) fail("streamed content differs from the whole parse");
    if (calls.size() != whole_calls.size()) fail("streamed calls differ from the whole parse");
    for (size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].name != whole_calls[i].name || calls[i].arguments != whole_calls[i].arguments) fail("a streamed call differs");
        if (calls[i].id != "call_" + std::to_string(i)) fail("call ids do not run call_0, call_1, ...");
        const nlohmann::json args = nlohmann::json::parse(calls[i].arguments, nullptr, false);
        if (args.is_discarded() || !args.is_object()) fail("arguments are not one JSON object");
    }
    if (calls.empty()) {
        size_t b = 0, e = reply.size();
        while (b < e && space(reply[b])) ++b;
        while (e > b && space(reply[e - 1])) --e;
        if (content != reply.substr(b, e - b)) fail("content without calls is not the trimmed reply");
    }
    return 0;
}
