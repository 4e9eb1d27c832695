#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "net/tool_calls.h"

using namespace specd;

namespace {
const char* kReply =
    "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"unit\": \"c\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
}

TEST_CASE("tool calls: Qwen's <tool_call> blocks become calls, the text around them trimmed content", "[tools]") {
    std::string content;
    std::vector<ToolCallOut> calls;
    parse_tool_calls(kReply, content, calls);
    CHECK(content == "Let me check both.");
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].id == "call_0");
    CHECK(calls[0].name == "get_weather");
    CHECK(calls[0].arguments == R"({"city":"Zürich","unit":"c"})");
    CHECK(calls[1].id == "call_1");
    CHECK(calls[1].name == "get_time");
    CHECK(calls[1].arguments == "{}");
}

TEST_CASE("tool calls: streamed one byte at a time, the same content and calls come out, text before a block at once", "[tools]") {
    ToolCallStream stream;
    std::string content;
    std::vector<ToolCallOut> calls;
    const std::string reply = kReply;
    size_t content_after_text = 0;
    for (size_t i = 0; i < reply.size(); ++i) {
        stream.feed(std::string_view(reply).substr(i, 1), content, calls);
        if (i + 1 == reply.find('\n')) content_after_text = content.size();
    }
    stream.flush(content, calls);
    CHECK(content_after_text == std::string("Let me check both.").size());  // not held for the block that follows
    CHECK(content == "Let me check both.");
    REQUIRE(calls.size() == 2);
    CHECK(calls[1].name == "get_time");
}

TEST_CASE("tool calls: malformed or unfinished blocks stay text, as llama.cpp returns what it cannot parse", "[tools]") {
    for (const char* reply : {"<tool_call>\n{\"name\": 3}\n</tool_call>", "<tool_call>{not json}</tool_call>",
                              "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", "x <tool_call>{\"name\": \"f\""}) {
        std::string content;
        std::vector<ToolCallOut> calls;
        parse_tool_calls(reply, content, calls);
        INFO(reply);
        CHECK(calls.empty());
        CHECK(content == std::string(reply));
    }
    // A '<' that is not a block is released once it cannot start one.
    ToolCallStream stream;
    std::string content;
    std::vector<ToolCallOut> calls;
    stream.feed("a <tool", content, calls);
    CHECK(content == "a");
    stream.feed("box> b", content, calls);
    CHECK(content == "a <toolbox> b");
    // Llama 3.1 style "parameters", and arguments given as a string of JSON.
    parse_tool_calls("<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": 1}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"y\\\": 2}\"}</tool_call>",
                     content, calls);
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].arguments == R"({"x":1})");
    CHECK(calls[1].arguments == R"({"y":2})");
}

TEST_CASE("tool calls: arguments keep the model's key order, as OpenAI returns them", "[net][tools]") {
    std::string content;
    std::vector<ToolCallOut> calls;
    parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": {\"y\": [2], \"b\": null}}}\n</tool_call>"
                     "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"z\\\": 1, \\\"a\\\": 2}\"}</tool_call>",
                     content, calls);
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].arguments == R"({"z":1,"a":{"y":[2],"b":null}})");
    CHECK(calls[1].arguments == R"({"z":1,"a":2})");
}

TEST_CASE("tool calls: Llama 3.1's whole-reply call, streamed in any pieces, and a reply that is not one stays content", "[net][tools]") {
    const std::string call = "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n";
    for (const size_t piece : {size_t{1}, size_t{4}, call.size()}) {
        ToolCallStream stream(ToolCallSyntax::WholeReply);
        std::string content;
        std::vector<ToolCallOut> calls;
        for (size_t i = 0; i < call.size(); i += piece) stream.feed(std::string_view(call).substr(i, piece), content, calls);
        CHECK(calls.empty());  // held to the end of the reply
        stream.flush(content, calls);
        CHECK(content.empty());
        REQUIRE(calls.size() == 1);
        CHECK(calls[0].id == "call_0");
        CHECK(calls[0].name == "get_weather");
        CHECK(calls[0].arguments == R"({"city":"Oslo","unit":"c"})");
    }
    // Text streams at once; a reply that opens with "{" but is no call is returned as content at the end.
    ToolCallStream text(ToolCallSyntax::WholeReply);
    std::string content;
    std::vector<ToolCallOut> calls;
    text.feed(" It is sunny", content, calls);
    CHECK(content == "It is sunny");
    text.feed(" {\"name\": 1}", content, calls);
    text.flush(content, calls);
    CHECK(content == "It is sunny {\"name\": 1}");
    CHECK(calls.empty());
    parse_tool_calls("{\"a\": 1}", content = "", calls, ToolCallSyntax::WholeReply);
    CHECK(content == "{\"a\": 1}");
    CHECK(calls.empty());
    // A <tool_call> block is not Llama's syntax: content.
    parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", content = "", calls, ToolCallSyntax::WholeReply);
    CHECK(calls.empty());
}
