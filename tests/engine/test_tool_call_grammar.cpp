// The grammar of a forced tool call (engine/tool_call_grammar.h): it accepts
// exactly the <tool_call> blocks Qwen2.5's template teaches, for the offered
// names with arguments of their schemas, one block or (parallel) several.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/grammar.h"
#include "engine/tool_call_grammar.h"

using namespace specd;

namespace {

bool matches(const std::string& gbnf, const std::string& text) {
    GrammarMatcher m(Grammar::parse(gbnf));
    return m.accept_bytes(text) && m.can_end();
}

const std::vector<ToolSchema> kTools = {
    {"get_weather", R"({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]})"},
    {"get_time", R"({"type": "object", "properties": {}})"},
    // Each schema's own $defs: rule names stay apart between tools.
    {"tag", R"({"type": "object", "properties": {"t": {"$ref": "#/$defs/t"}}, "required": ["t"], "$defs": {"t": {"type": "integer"}}})"},
};

std::string block(const std::string& name, const std::string& args) {
    return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

}  // namespace

TEST_CASE("tool call grammar: one block naming an offered function with arguments of its schema, nothing else", "[grammar][tools]") {
    const std::string g = tool_call_grammar(kTools, false);
    INFO(g);
    CHECK(matches(g, block("get_weather", R"({"city": "Paris"})")));
    CHECK(matches(g, block("get_weather", R"({"city": "Paris", "unit": "c"})")));
    CHECK(matches(g, std::string("\n").append(block("get_time", "{}"))));
    CHECK(matches(g, block("get_time", R"({"any": [1, 2]})")));  // properties {} without additionalProperties: any object
    CHECK(matches(g, block("tag", R"({"t": 3})")));
    CHECK_FALSE(matches(g, block("get_weather", R"({"unit": "c"})")));             // city is required
    CHECK_FALSE(matches(g, block("get_weather", R"({"city": "Paris", "unit": "k"})")));
    CHECK_FALSE(matches(g, block("tag", R"({"t": "3"})")));
    CHECK_FALSE(matches(g, block("get_wether", R"({"city": "Paris"})")));           // not offered
    CHECK_FALSE(matches(g, std::string("Sure! ").append(block("get_time", "{}"))));                    // no text before
    CHECK_FALSE(matches(g, block("get_time", "{}") + "\n" + block("get_time", "{}")));  // one call only
    CHECK_FALSE(matches(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}"));  // unclosed
}

TEST_CASE("tool call grammar: parallel allows several blocks, one per line, each of any offered function", "[grammar][tools]") {
    const std::string g = tool_call_grammar(kTools, true);
    CHECK(matches(g, block("get_time", "{}")));
    CHECK(matches(g, block("get_weather", R"({"city": "Oslo"})") + "\n" + block("get_time", "{}") + "\n" + block("tag", R"({"t": 1})")));
    CHECK_FALSE(matches(g, block("get_time", "{}") + "\n\n" + block("get_time", "{}")));
}

TEST_CASE("tool call grammar: a named choice is the grammar of that one tool", "[grammar][tools]") {
    const std::string g = tool_call_grammar(std::span(kTools).subspan(1, 1), false);
    CHECK(matches(g, block("get_time", "{}")));
    CHECK_FALSE(matches(g, block("get_weather", R"({"city": "Paris"})")));
}

TEST_CASE("tool call grammar: bad names and unsupported schemas are one-line errors naming the function", "[grammar][tools]") {
    CHECK_THROWS_WITH(tool_call_grammar(std::vector<ToolSchema>{}, false), Catch::Contains("no tools"));
    CHECK_THROWS_WITH(tool_call_grammar(std::vector<ToolSchema>{{"a\"b", "{}"}}, false), Catch::Contains("is not 1 to 64 letters"));
    CHECK_THROWS_WITH(tool_call_grammar(std::vector<ToolSchema>{{std::string(65, 'a'), "{}"}}, false), Catch::Contains("is not 1 to 64"));
    CHECK_THROWS_WITH(tool_call_grammar(std::vector<ToolSchema>{{"f", R"({"type": "string", "pattern": "x"})"}}, false),
                      Catch::Contains("function \"f\"") && Catch::Contains("pattern"));
}

TEST_CASE("tool call grammar: Llama 3.1's format is one bare {\"name\", \"parameters\"} object, parallel or not", "[grammar][tools]") {
    for (const bool parallel : {false, true}) {
        const std::string g = tool_call_grammar(kTools, parallel, ChatTemplate::ToolFormat::Llama3Json);
        CHECK(matches(g, R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));
        CHECK(matches(g, R"( {"name": "get_time", "parameters": {}})"));
        CHECK_FALSE(matches(g, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
        CHECK_FALSE(matches(g, block("get_time", "{}")));
        CHECK_FALSE(matches(g, R"({"name": "get_time", "parameters": {}}{"name": "get_time", "parameters": {}})"));
    }
    CHECK_THROWS_WITH(tool_call_grammar(kTools, false, ChatTemplate::ToolFormat::None), Catch::Contains("no tool format"));
}
