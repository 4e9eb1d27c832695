// The tool formats of chat templates against the real templates rendered by
// Jinja2 (tests/support/render_jinja.py; the templates come with llama.cpp's
// source, tools/fetch-llama-cpp-vocab.sh).
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/error.h"

using namespace specd;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

std::string templates_dir() {
    if (const char* env = std::getenv("SPECD_LLAMA_VOCAB_DIR"); env && *env) return std::string(env) + "/templates";
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::string cache = xdg && *xdg ? std::string(xdg) : std::string(home ? home : ".") + "/.cache";
    return cache + "/specd/llama-cpp-vocab-3.22.1/templates";
}

// The template's text, or "" after saying the test is skipped (ctest's skip phrase).
std::string read_template(const std::string& name) {
    const std::string path = templates_dir() + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cout << "skipped: llama.cpp vocabulary files not fetched (" << path << ")\n";
        return "";
    }
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// What Jinja2 renders for `request` ({"messages", "tools", "add_generation_prompt"}).
std::string jinja_render(const std::string& template_name, const ordered_json& request) {
    const fs::path input = fs::temp_directory_path() / ("specd-jinja-" + std::to_string(::getpid()) + ".json");
    std::ofstream(input) << request.dump();
    const std::string command = std::string("python3 ") + SPECD_SOURCE_DIR + "/tests/support/render_jinja.py '" +
                                templates_dir() + "/" + template_name + "' < '" + input.string() + "'";
    std::string out;
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe);
    std::array<char, 4096> buf;
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
    const int status = ::pclose(pipe);
    fs::remove(input);
    INFO("python3 with Jinja2 (tools/install-deps.sh installs python3-jinja2): " << command);
    REQUIRE(status == 0);
    return out;
}

// Python's json.dumps spacing (", " and ": "), as the templates' tojson writes.
std::string py_dumps(const ordered_json& j) {
    if (j.is_object()) {
        std::string s = "{";
        bool first = true;
        for (const auto& [k, v] : j.items()) {
            s += (first ? "" : ", ") + ordered_json(k).dump() + ": " + py_dumps(v);
            first = false;
        }
        return s + "}";
    }
    if (j.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + py_dumps(j[i]);
        return s + "]";
    }
    return j.dump(-1, ' ', false, ordered_json::error_handler_t::strict);
}

// specd's rendering of the same request.
std::string specd_render(const ChatTemplate& t, const ordered_json& request) {
    std::vector<ChatMessage> messages;
    for (const auto& m : request["messages"]) {
        ChatMessage msg{m["role"].get<std::string>(), m.value("content", ordered_json("")).is_null() ? "" : m.value("content", "")};
        if (m.contains("tool_calls")) {
            for (const auto& c : m["tool_calls"]) msg.tool_calls.push_back({c["function"]["name"], py_dumps(c["function"]["arguments"])});
        }
        messages.push_back(std::move(msg));
    }
    std::vector<std::string> tools;
    if (request.contains("tools")) {
        for (const auto& tool : request["tools"]) tools.push_back(py_dumps(tool));
    }
    return t.render_with_tools(messages, tools, request.value("add_generation_prompt", true));
}

const ordered_json kWeatherTool = ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "The weather in a city, now.", "parameters": {"type": "object", "properties":
    {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"]}}})");
const ordered_json kTimeTool = ordered_json::parse(R"({"type": "function", "function": {"name": "get_time",
    "parameters": {"type": "object", "properties": {}}}})");

}  // namespace

TEST_CASE("chat tools: Qwen2.5's template is recognised as the <tool_call> format, others are not", "[chat_template][tools]") {
    const std::string qwen = read_template("Qwen-Qwen2.5-7B-Instruct.jinja");
    if (qwen.empty()) return;
    CHECK(ChatTemplate::from_gguf_template(qwen).tool_format() == ChatTemplate::ToolFormat::QwenHermes);
    CHECK(ChatTemplate::by_name("chatml").tool_format() == ChatTemplate::ToolFormat::None);
    const ChatMessage hi{"user", "hi"};
    try {
        ChatTemplate::by_name("llama3").render_with_tools(std::span<const ChatMessage>(&hi, 1), {});
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(std::string(e.what()) == "the model's chat template (llama3) has no tool format specd renders (supported: Qwen2.5's <tool_call> template, Llama 3.1's JSON calls)");
    }
}

TEST_CASE("chat tools: Qwen2.5 conversations with tools render exactly as its Jinja template does", "[chat_template][tools]") {
    const std::string name = "Qwen-Qwen2.5-7B-Instruct.jinja";
    const std::string text = read_template(name);
    if (text.empty()) return;
    const ChatTemplate t = ChatTemplate::from_gguf_template(text);
    const ordered_json call = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Zürich"}, {"unit", "c"}}}}}};
    const ordered_json call2 = {{"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", ordered_json::object()}}}};
    const std::vector<ordered_json> requests = {
        // tools, no system message: the default one carries them
        {{"messages", {{{"role", "user"}, {"content", "Weather in Zürich?"}}}}, {"tools", {kWeatherTool, kTimeTool}}},
        // a system message of the user's own
        {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Weather?"}}}}, {"tools", {kWeatherTool}}},
        // a whole round: two calls, two results in one user turn, the answer, a new question
        {{"messages", {{{"role", "user"}, {"content", "Weather and time?"}},
                       {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call, call2}}},
                       {{"role", "tool"}, {"content", "{\"temp\": 3}"}},
                       {{"role", "tool"}, {"content", "09:30"}},
                       {{"role", "assistant"}, {"content", "3 °C at 09:30."}},
                       {{"role", "user"}, {"content", "Thanks!"}}}},
         {"tools", {kWeatherTool, kTimeTool}}},
        // an assistant turn with both text and a call; no generation prompt
        {{"messages", {{{"role", "user"}, {"content", "Weather?"}},
                       {{"role", "assistant"}, {"content", "Let me check."}, {"tool_calls", {call}}},
                       {{"role", "tool"}, {"content", "sunny"}}}},
         {"tools", {kWeatherTool}}, {"add_generation_prompt", false}},
        // tool turns without tool definitions, a later system message
        {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call2}}},
                       {{"role", "tool"}, {"content", "noon"}}, {{"role", "system"}, {"content", "Answer in French."}}}}},
    };
    for (const ordered_json& request : requests) {
        INFO(request.dump());
        CHECK(specd_render(t, request) == jinja_render(name, request));
    }
}

TEST_CASE("chat tools: Llama 3.1's and 3.2's templates are the JSON call format, and their conversations with tools render exactly as "
          "their Jinja does", "[chat_template][tools]") {
    const ordered_json call = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Zürich"}, {"unit", "c"}}}}}};
    const ordered_json nested = {{"type", "function"}, {"function", {{"name", "plan"}, {"description", "Plans \"a trip\"\n\tnow."},
        {"parameters", {{"type", "object"}, {"properties", {{"stops", {{"type", "array"}, {"items", {{"type", "string"}}}}},
                                                              {"opts", {{"type", "object"}, {"properties", ordered_json::object()}}}}},
                        {"required", ordered_json::array()}}}}}};
    for (const std::string name : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja"}) {
        const std::string text = read_template(name);
        if (text.empty()) return;
        const ChatTemplate t = ChatTemplate::from_gguf_template(text);
        REQUIRE(t.tool_format() == ChatTemplate::ToolFormat::Llama3Json);
        const std::vector<ordered_json> requests = {
            // tools open the first user turn; no system message
            {{"messages", {{{"role", "user"}, {"content", "  Weather in Zürich?\n"}}}}, {"tools", {kWeatherTool, kTimeTool, nested}}},
            // a system message, a call, its result (quoted as JSON), the answer, a new question
            {{"messages", {{{"role", "system"}, {"content", " Be brief. "}}, {{"role", "user"}, {"content", "Weather?"}},
                           {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}},
                           {{"role", "tool"}, {"content", "{\"temp\": 3, \"sky\": \"clear\\n\"}"}},
                           {{"role", "assistant"}, {"content", "3 °C."}}, {{"role", "user"}, {"content", "Thanks!\u00a0"}}}},
             {"tools", {kWeatherTool}}},
            // tool turns without tool definitions; no generation prompt
            {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}},
                           {{"role", "tool"}, {"content", "noon"}}}},
             {"add_generation_prompt", false}},
            // no tools at all: the date header still opens the system turn
            {{"messages", {{{"role", "user"}, {"content", "hi"}}}}},
        };
        for (const ordered_json& request : requests) {
            INFO(name << ": " << request.dump());
            CHECK(specd_render(t, request) == jinja_render(name, request));
        }
        // What the template refuses, refused: two calls in a turn, tools with no user turn to open.
        const ChatMessage two{"assistant", "", {{"a", "{}"}, {"b", "{}"}}};
        const std::vector<ChatMessage> msgs = {{"user", "x"}, two};
        CHECK_THROWS_WITH(t.render_with_tools(msgs, {}), Catch::Contains("one tool call per assistant message"));
        const std::vector<ChatMessage> sys = {{"system", "x"}};
        const std::vector<std::string> tools = {py_dumps(kTimeTool)};
        CHECK_THROWS_WITH(t.render_with_tools(sys, tools), Catch::Contains("first user message"));
    }
}
