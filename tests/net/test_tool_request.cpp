// Tool calling on /v1/chat/completions without a socket (issue 35, item 6):
// tools, tool_choice and parallel_tool_calls parsed and refused as the API
// states them; OpenAI-shaped tool turns rendered into the next prompt
// exactly as the model's Jinja template renders them; the reply's calls in
// OpenAI's response and stream shapes.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "engine/grammar.h"
#include "net/api.h"
#include "net/routes.h"
#include "net/sse.h"
#include "net/tool_request.h"

using namespace specd;
using namespace specd::net;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Qwen2.5's template as specd recognises it (the real text is only needed
// for the Jinja comparison below).
const ChatTemplate& qwen() {
    static const ChatTemplate t = ChatTemplate::from_gguf_template("<|im_start|> <tools> <tool_call> You are Qwen, created by Alibaba Cloud.");
    return t;
}
const ChatTemplate& llama31() {
    static const ChatTemplate t =
        ChatTemplate::from_gguf_template("<|start_header_id|> <|end_header_id|> Environment: ipython tools_in_user_message \"parameters\": ");
    return t;
}
const ChatTemplate& plain() {
    static const ChatTemplate t = ChatTemplate::plain();
    return t;
}

const RequestLimits kToolLimits;

const std::string kTools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather now.",)"
                           R"("parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}},)"
                           R"({"type":"function","function":{"name":"get_time","parameters":{}}}])";

ParsedRequest chat_with(const std::string& params, const ChatTemplate& t = qwen()) {
    const std::string body = R"({"messages":[{"role":"user","content":"Weather in Paris?"}],)" + params + "}";
    return parse_generation(parse_json(body), ApiKind::Chat, kToolLimits, render_chat_messages, &t, body);
}

ApiError refusal(const std::string& params, const ChatTemplate& t = qwen(), ApiKind kind = ApiKind::Chat) {
    const std::string body = kind == ApiKind::Chat ? R"({"messages":[{"role":"user","content":"x"}],)" + params + "}"
                                                   : R"({"prompt":"x",)" + params + "}";
    try {
        parse_generation(parse_json(body), kind, kToolLimits, render_chat_messages, &t, body);
    } catch (const ApiError& e) {
        return e;
    }
    return ApiError{0, "", "accepted", ""};
}

bool grammar_matches(const std::string& gbnf, const std::string& text) {
    GrammarMatcher m(Grammar::parse(gbnf));
    return m.accept_bytes(text) && m.can_end();
}

}  // namespace

TEST_CASE("tools: offered in the prompt in the client's key order, auto leaves the reply free and parses its calls", "[net][api][tools]") {
    const ParsedRequest r = chat_with(R"("tools":)" + kTools);
    CHECK(r.tool_calls);
    CHECK_FALSE(r.tool_call_stop);
    CHECK(r.request.sampling.grammar.empty());
    CHECK_THAT(r.request.prompt, Catch::Contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                                                 "\"description\": \"Weather now.\", \"parameters\": {\"type\": \"object\", "
                                                 "\"properties\": {\"city\": {\"type\": \"string\"}"));
    CHECK_THAT(r.request.prompt, Catch::EndsWith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"));
    // "auto" said, and parallel calls allowed (the default) say the same.
    CHECK(chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"auto","parallel_tool_calls":true)").request.prompt == r.request.prompt);
}

TEST_CASE("tools: tool_choice required and a named function become a grammar of calls, parallel_tool_calls false allows one",
          "[net][api][tools]") {
    const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    const ParsedRequest any = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"required")");
    CHECK(any.tool_calls);
    CHECK(grammar_matches(any.request.sampling.grammar, weather));
    CHECK(grammar_matches(any.request.sampling.grammar, time));
    CHECK(grammar_matches(any.request.sampling.grammar, weather + "\n" + time));  // parallel by default
    CHECK_FALSE(grammar_matches(any.request.sampling.grammar, "It is sunny."));
    CHECK_FALSE(grammar_matches(any.request.sampling.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));

    const ParsedRequest one = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"required","parallel_tool_calls":false)");
    CHECK(grammar_matches(one.request.sampling.grammar, weather));
    CHECK_FALSE(grammar_matches(one.request.sampling.grammar, weather + "\n" + time));

    const ParsedRequest named = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})");
    CHECK(grammar_matches(named.request.sampling.grammar, time));
    CHECK_FALSE(grammar_matches(named.request.sampling.grammar, weather));

    // "auto" with parallel_tool_calls false: the reply ends where its first call closes.
    const ParsedRequest auto_one = chat_with(R"("tools":)" + kTools + R"(,"parallel_tool_calls":false,"stop":["END"])");
    CHECK(auto_one.tool_call_stop);
    CHECK(auto_one.request.stop == std::vector<std::string>{"END", "</tool_call>"});
    CHECK(auto_one.request.sampling.grammar.empty());
}

TEST_CASE("tools: tool_choice none renders the tools but reads no calls, on a template without a tool format they are left out",
          "[net][api][tools]") {
    const ParsedRequest none = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"none")");
    CHECK_FALSE(none.tool_calls);
    CHECK(none.request.sampling.grammar.empty());
    CHECK_THAT(none.request.prompt, Catch::Contains("<tools>"));  // as llama-server: the template still sees them
    const ParsedRequest dropped = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"none")", plain());
    CHECK_FALSE(dropped.tool_calls);
    CHECK(dropped.request.prompt == "Weather in Paris?");
    // Any other choice on such a template is a 400 naming tools and the template.
    for (const char* choice : {R"("auto")", R"("required")"}) {
        const ApiError e = refusal(R"("tools":)" + kTools + R"(,"tool_choice":)" + choice, plain());
        CHECK(e.status == 400);
        CHECK(e.param == "tools");
        CHECK_THAT(e.message, Catch::Contains("tool format") && Catch::Contains("template is plain"));
    }
    const ApiError turns = refusal("\"n\":1", plain());  // control: plain chat is fine
    CHECK(turns.status == 0);
    const std::string history = R"({"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c","content":"42"}]})";
    try {
        parse_generation(parse_json(history), ApiKind::Chat, kToolLimits, render_chat_messages, &plain(), history);
        FAIL("a tool result was rendered by a template without a tool format");
    } catch (const ApiError& e) {
        CHECK(e.param == "messages");
        CHECK_THAT(e.message, Catch::Contains("tool results"));
    }
}

TEST_CASE("tools: every malformed tools, tool_choice or parallel_tool_calls is a 400 naming it", "[net][api][tools]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"("tools":{"type":"function"})", "tools"},
        {R"("tools":[{"type":"code_interpreter"}])", "tools"},
        {R"("tools":[{"type":"function"}])", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"has space"}}])", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"array"}}}])", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"x"}}}}}],"tool_choice":"required")", "tools"},
        {R"("tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}])", "tools"},
        {R"("tool_choice":"required")", "tool_choice"},
        {R"("tools":)" + kTools + R"(,"tool_choice":"always")", "tool_choice"},
        {R"("tools":)" + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_date"}})", "tool_choice"},
        {R"("tools":)" + kTools + R"(,"tool_choice":{"type":"function"})", "tool_choice"},
        {R"("tools":)" + kTools + R"(,"parallel_tool_calls":"no")", "parallel_tool_calls"},
        {R"("tools":)" + kTools + R"(,"tool_choice":"required","response_format":{"type":"json_object"})", "tool_choice"},
        {R"("tools":)" + kTools + R"(,"response_format":{"type":"json_object"})", "response_format"},
        {R"("functions":[{"name":"f"}])", "functions"},
        {R"("function_call":"f")", "function_call"},
    };
    for (const auto& [params, field] : cases) {
        INFO(params);
        const ApiError e = refusal(params);
        CHECK(e.status == 400);
        CHECK(e.param == field);
    }
    // Strict arguments are what required enforces: accepted there.
    CHECK(chat_with(R"("tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}],"tool_choice":"required")")
              .tool_calls);
    // Tools belong to chat completions; "none"/"auto" alone mean plain text anywhere.
    CHECK(refusal(R"("tools":)" + kTools, qwen(), ApiKind::Completion).param == "tools");
    CHECK(refusal(R"("tool_choice":"required")", qwen(), ApiKind::Completion).param == "tool_choice");
    CHECK(refusal(R"("tools":[],"tool_choice":"none")", qwen(), ApiKind::Completion).status == 0);
}

// ------------------------------------------------- against the template ---

namespace {

std::string jinja_templates_dir() {
    if (const char* env = std::getenv("SPECD_LLAMA_VOCAB_DIR"); env && *env) return std::string(env) + "/templates";
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::string cache = xdg && *xdg ? std::string(xdg) : std::string(home ? home : ".") + "/.cache";
    return cache + "/specd/llama-cpp-vocab-3.22.1/templates";
}

// Jinja2's rendering (tests/support/render_jinja.py) of `request`, or "" when it cannot run.
std::string jinja(const std::string& template_path, const ordered_json& request) {
    const std::filesystem::path input = std::filesystem::temp_directory_path() / ("specd-tools-" + std::to_string(::getpid()) + ".json");
    std::ofstream(input) << request.dump();
    const std::string command = std::string("python3 ") + SPECD_SOURCE_DIR + "/tests/support/render_jinja.py '" + template_path + "' < '" +
                                input.string() + "'";
    std::string out;
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) return "";
    std::array<char, 4096> buf;
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
    const int status = ::pclose(pipe);
    std::filesystem::remove(input);
    return status == 0 ? out : "";
}

}  // namespace

TEST_CASE("tools: an OpenAI request's tools and tool turns render into the next prompt exactly as Qwen2.5's Jinja template does",
          "[net][api][tools][chat_template]") {
    const std::string path = jinja_templates_dir() + "/Qwen-Qwen2.5-7B-Instruct.jinja";
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cout << "skipped: llama.cpp vocabulary files not fetched (" << path << ")\n";
        return;
    }
    std::ostringstream text;
    text << in.rdbuf();
    const ChatTemplate t = ChatTemplate::from_gguf_template(text.str());
    REQUIRE(t.tool_format() == ChatTemplate::ToolFormat::QwenHermes);
    // As an OpenAI client sends the second turn: the call with its
    // arguments as a string, content null, the result as role "tool".
    const std::string body = R"({"model":"m","messages":[{"role":"system","content":"Be exact."},)"
                             R"({"role":"user","content":"Weather in Paris and Zürich?"},)"
                             R"({"role":"assistant","content":null,"tool_calls":[)"
                             R"({"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}},)"
                             R"({"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Zürich\"}"}}]},)"
                             R"({"role":"tool","tool_call_id":"call_0","content":"18 C"},)"
                             R"({"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"12 C"}]}],)"
                             R"("tools":)" + kTools + "}";
    const ParsedRequest r = parse_generation(parse_json(body), ApiKind::Chat, kToolLimits, render_chat_messages, &t, body);
    // The same conversation as Hugging Face's apply_chat_template takes it:
    // arguments as objects, the tool content as text.
    ordered_json hf = ordered_json::parse(body);
    for (auto& m : hf["messages"]) {
        if (m.contains("tool_calls")) {
            for (auto& c : m["tool_calls"]) c["function"]["arguments"] = ordered_json::parse(c["function"]["arguments"].get<std::string>());
        }
        if (m["content"].is_array()) m["content"] = m["content"][0]["text"];
    }
    const std::string expected = jinja(path, ordered_json{{"messages", hf["messages"]}, {"tools", hf["tools"]}, {"add_generation_prompt", true}});
    if (expected.empty()) {
        std::cout << "skipped: python3 with Jinja2 did not run (tools/install-deps.sh installs python3-jinja2)\n";
        return;
    }
    CHECK(r.request.prompt == expected);
    CHECK_THAT(r.request.prompt, Catch::Contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"));
    CHECK_THAT(r.request.prompt, Catch::Contains("<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\n12 C\n</tool_response><|im_end|>"));
}

// ------------------------------------------------------- the reply shapes ---

TEST_CASE("tools: a reply's calls as OpenAI returns them: message.tool_calls, content null, finish_reason tool_calls", "[net][api][tools]") {
    done_event d;
    d.finish_reason = "stop";
    const std::vector<ToolCallOut> calls = {{"call_0", "get_weather", R"({"city":"Paris"})"}};
    const json r = chat_response("id", "m", 1, "", d, nullptr, calls);
    const json& m = r["choices"][0]["message"];
    CHECK(m["content"].is_null());
    CHECK(m["tool_calls"] == json::parse(R"([{"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}])"));
    CHECK(r["choices"][0]["finish_reason"] == "tool_calls");
    CHECK(chat_response("id", "m", 1, "Let me check.", d, nullptr, calls)["choices"][0]["message"]["content"] == "Let me check.");
    d.finish_reason = "length";
    CHECK(chat_response("id", "m", 1, "", d, nullptr, calls)["choices"][0]["finish_reason"] == "length");
    CHECK_FALSE(chat_response("id", "m", 1, "hi", d)["choices"][0]["message"].contains("tool_calls"));
}

namespace {
// The chunks' JSON of an SSE body.
std::vector<json> sse_chunks(const std::string& bytes) {
    std::vector<json> out;
    size_t at = 0;
    while ((at = bytes.find("data: ", at)) != std::string::npos) {
        const size_t end = bytes.find("\n\n", at);
        const std::string data = bytes.substr(at + 6, end - at - 6);
        at = end;
        if (data != "[DONE]") out.push_back(json::parse(data));
    }
    return out;
}
}  // namespace

TEST_CASE("tools: streamed, content goes out as deltas and each call as one delta.tool_calls entry with its index, the last chunk "
          "says tool_calls", "[net][api][tools]") {
    const std::string reply = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                              "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    for (const size_t piece : {size_t{1}, size_t{3}, size_t{7}, reply.size()}) {
        SseStream s(true, "c", "m", 1, false);
        s.parse_tool_calls(false, ToolCallSyntax::TaggedBlocks);
        std::string bytes = s.start(true, "");
        for (size_t i = 0; i < reply.size(); i += piece) {
            token_event e;
            e.text = reply.substr(i, piece);
            bytes += s.tokens(e, [](int32_t) { return std::string(); });
        }
        done_event d;
        d.finish_reason = "stop";
        bytes += s.done(d);
        std::string content;
        json calls = json::array();
        std::string finish;
        for (const json& c : sse_chunks(bytes)) {
            const json& ch = c["choices"][0];
            if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
            if (ch["delta"].contains("tool_calls")) {
                for (const json& t : ch["delta"]["tool_calls"]) calls.push_back(t);
            }
            if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
        }
        INFO("pieces of " << piece);
        CHECK(content == "Checking.");
        REQUIRE(calls.size() == 2);
        CHECK(calls[0] == json::parse(R"({"index":0,"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})"));
        CHECK(calls[1]["index"] == 1);
        CHECK(calls[1]["function"]["name"] == "get_time");
        CHECK(finish == "tool_calls");
    }
    // parallel_tool_calls false with "auto": the stop sequence cut the closing tag; it is put back.
    SseStream s(true, "c", "m", 1, false);
    s.parse_tool_calls(true, ToolCallSyntax::TaggedBlocks);
    std::string bytes = s.start(true, "");
    token_event e;
    e.text = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n";
    bytes += s.tokens(e, [](int32_t) { return std::string(); });
    done_event d;
    d.finish_reason = "stop";
    d.stop_word = "</tool_call>";
    bytes += s.done(d);
    const std::vector<json> chunks = sse_chunks(bytes);
    REQUIRE(chunks.size() >= 2);
    CHECK(chunks[chunks.size() - 2]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_time");
    CHECK(chunks.back()["choices"][0]["finish_reason"] == "tool_calls");
}

TEST_CASE("tools: Llama 3.1's format: tools open the first user turn, required is one bare JSON call, the whole reply is read as "
          "the call", "[net][api][tools]") {
    REQUIRE(llama31().tool_format() == ChatTemplate::ToolFormat::Llama3Json);
    const ParsedRequest any = chat_with(R"("tools":)" + kTools + R"(,"tool_choice":"required")", llama31());
    CHECK(any.tool_calls);
    CHECK(any.tool_syntax == ToolCallSyntax::WholeReply);
    CHECK_THAT(any.request.prompt, Catch::Contains("<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions"));
    CHECK_THAT(any.request.prompt, Catch::Contains("{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\","));
    CHECK(grammar_matches(any.request.sampling.grammar, R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));
    CHECK_FALSE(grammar_matches(any.request.sampling.grammar, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    // One call per reply already: parallel_tool_calls false adds no stop sequence.
    const ParsedRequest one = chat_with(R"("tools":)" + kTools + R"(,"parallel_tool_calls":false)", llama31());
    CHECK_FALSE(one.tool_call_stop);
    CHECK(one.request.stop.empty());
    // Two calls in one history turn: the template cannot render them.
    const std::string two = R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[)"
                            R"({"id":"a","type":"function","function":{"name":"get_time","arguments":"{}"}},)"
                            R"({"id":"b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}],"tools":)" + kTools + "}";
    try {
        parse_generation(parse_json(two), ApiKind::Chat, kToolLimits, render_chat_messages, &llama31(), two);
        FAIL("two calls in one Llama 3.1 turn were rendered");
    } catch (const ApiError& e) {
        CHECK(e.param == "messages");
        CHECK_THAT(e.message, Catch::Contains("one tool call per assistant message"));
    }
    // Streamed: the call goes out at the end as one delta.
    SseStream s(true, "c", "m", 1, false);
    s.parse_tool_calls(false, ToolCallSyntax::WholeReply);
    std::string bytes = s.start(true, "");
    token_event e;
    e.text = "{\"name\": \"get_time\", \"parameters\": {}}";
    bytes += s.tokens(e, [](int32_t) { return std::string(); });
    done_event d;
    d.finish_reason = "stop";
    bytes += s.done(d);
    const std::vector<json> chunks = sse_chunks(bytes);
    REQUIRE(chunks.size() >= 2);
    CHECK(chunks[chunks.size() - 2]["choices"][0]["delta"]["tool_calls"][0]["function"] == json::parse(R"({"name":"get_time","arguments":"{}"})"));
    CHECK(chunks.back()["choices"][0]["finish_reason"] == "tool_calls");
}

TEST_CASE("tools: an OpenAI request's tools and tool turns render into the next prompt exactly as Llama 3.1's Jinja template does",
          "[net][api][tools][chat_template]") {
    const std::string path = jinja_templates_dir() + "/meta-llama-Llama-3.1-8B-Instruct.jinja";
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cout << "skipped: llama.cpp vocabulary files not fetched (" << path << ")\n";
        return;
    }
    std::ostringstream text;
    text << in.rdbuf();
    const ChatTemplate t = ChatTemplate::from_gguf_template(text.str());
    REQUIRE(t.tool_format() == ChatTemplate::ToolFormat::Llama3Json);
    const std::string body = R"({"messages":[{"role":"developer","content":"Be exact."},{"role":"user","content":"Weather in Zürich?"},)"
                             R"({"role":"assistant","content":null,"tool_calls":[)"
                             R"({"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Zürich\", \"unit\": \"c\"}"}}]},)"
                             R"({"role":"tool","tool_call_id":"call_0","content":"12 C \"mild\""}],"tools":)" + kTools + "}";
    const ParsedRequest r = parse_generation(parse_json(body), ApiKind::Chat, kToolLimits, render_chat_messages, &t, body);
    ordered_json hf = ordered_json::parse(body);
    hf["messages"][0]["role"] = "system";
    for (auto& m : hf["messages"]) {
        if (m.contains("tool_calls")) {
            for (auto& c : m["tool_calls"]) c["function"]["arguments"] = ordered_json::parse(c["function"]["arguments"].get<std::string>());
        }
    }
    const std::string expected = jinja(path, ordered_json{{"messages", hf["messages"]}, {"tools", hf["tools"]}, {"add_generation_prompt", true}});
    if (expected.empty()) {
        std::cout << "skipped: python3 with Jinja2 did not run (tools/install-deps.sh installs python3-jinja2)\n";
        return;
    }
    CHECK(r.request.prompt == expected);
}
