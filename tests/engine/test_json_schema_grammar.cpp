// JSON Schema → GBNF (engine/json_schema_grammar.h): the grammar accepts
// the JSON texts a schema allows and refuses the others; unsupported
// keywords and bad schemas are one-line errors naming what and where.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/grammar.h"
#include "engine/json_schema_grammar.h"

using namespace specd;

namespace {

// Whether the whole text is a complete match of the schema's grammar.
bool matches(const std::string& gbnf, const std::string& text) {
    GrammarMatcher m(Grammar::parse(gbnf));
    return m.accept_bytes(text) && m.can_end();
}

std::string error_of(const std::string& schema) {
    try {
        json_schema_to_grammar(schema);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void check(const std::string& schema, const std::vector<std::string>& valid, const std::vector<std::string>& invalid) {
    const std::string gbnf = json_schema_to_grammar(schema);
    INFO("schema " << schema << "\ngrammar:\n" << gbnf);
    for (const std::string& v : valid) {
        INFO("valid: " << v);
        CHECK(matches(gbnf, v));
    }
    for (const std::string& v : invalid) {
        INFO("invalid: " << v);
        CHECK_FALSE(matches(gbnf, v));
    }
}

}  // namespace

TEST_CASE("json_schema: primitive types", "[json_schema]") {
    check(R"({"type": "string"})", {R"("")", R"("hi there")", R"("a\"b\\c\u00e9")", R"( "lead")"}, {R"(hi)", R"("unterminated)", "\"a\nb\"", "1"});
    check(R"({"type": "integer"})", {"0", "-12", "42"}, {"1.5", "01", "\"1\"", "-", "1e3"});
    check(R"({"type": "number"})", {"0", "-1.25", "3e10", "2.5E-3"}, {".5", "1.", "\"1\"", "--1"});
    check(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"});
    check(R"({"type": "null"})", {"null"}, {"nil", "\"null\""});
    check(R"({"type": ["string", "null"]})", {"null", "\"x\""}, {"1"});
    check(R"({"type": "string", "minLength": 2, "maxLength": 3})", {R"("ab")", R"("abc")"}, {R"("a")", R"("abcd")"});
    check(R"({})", {"1", "\"s\"", R"({"a": [1, {"b": null}]})"}, {"{", "nope"});
    check(R"(true)", {"[]", "false"}, {"]"});
}

TEST_CASE("json_schema: objects keep the schema's property order, required and optional, no other keys", "[json_schema]") {
    const std::string person = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "email": {"type": "string"}}, "required": ["name", "age"], "additionalProperties": false})";
    check(person,
          {R"({"name": "Lily", "age": 3})", R"({"name": "Lily", "age": 3, "email": "l@x"})", R"({ "name":"A","age":-1 })",
           "{\n  \"name\": \"A\",\n  \"age\": 1\n}"},
          {R"({"age": 3, "name": "Lily"})", R"({"name": "Lily"})", R"({"name": "Lily", "age": 3, "other": 1})",
           R"({"name": "Lily", "age": "3"})", R"({"name": "Lily", "age": 3,})", R"({"name": "Lily" "age": 3})"});
    // Every property optional: any subset, in order, commas right.
    const std::string opt = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})";
    check(opt, {"{}", R"({"a": 1})", R"({"b": 2})", R"({"c": 3})", R"({"a": 1, "c": 3})", R"({"b": 2, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"},
          {R"({, "b": 2})", R"({"a": 1,})", R"({"c": 3, "a": 1})", R"({"a": 1 "b": 2})"});
    // Required after optional.
    check(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["b"]})", {R"({"b": 2})", R"({"a": 1, "b": 2})"},
          {"{}", R"({"a": 1})"});
    // Nested objects and arrays of objects.
    check(R"({"type": "object", "properties": {"pets": {"type": "array", "items": {"type": "object",
            "properties": {"kind": {"enum": ["dog", "cat"]}}, "required": ["kind"]}}}, "required": ["pets"]})",
          {R"({"pets": []})", R"({"pets": [{"kind": "dog"}, {"kind": "cat"}]})"}, {R"({"pets": [{"kind": "cow"}]})", R"({"pets": [{}]})"});
    // Free-form objects.
    check(R"({"type": "object"})", {"{}", R"({"x": [1, 2], "y": {"z": null}})"}, {"[]", R"({"x"})"});
    check(R"({"type": "object", "additionalProperties": {"type": "integer"}})", {"{}", R"({"x": 1, "y": 2})"}, {R"({"x": "1"})"});
    check(R"({"type": "object", "additionalProperties": false})", {"{}"}, {R"({"x": 1})"});
    // Keys that need escaping in JSON and in GBNF.
    check(R"({"properties": {"say \"hi\"": {"const": 1}}, "required": ["say \"hi\""]})", {R"({"say \"hi\"": 1})"}, {R"({"say "hi"": 1})"});
}

TEST_CASE("json_schema: enum, const, arrays with bounds, anyOf, oneOf", "[json_schema]") {
    check(R"({"enum": ["red", "green", 3, null, true, {"a": [1]}]})", {"\"red\"", "\"green\"", "3", "null", "true", R"({"a":[1]})"},
          {"\"blue\"", "4", "false"});
    check(R"({"const": "fixed"})", {"\"fixed\""}, {"\"other\""});
    check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})", {"[1]", "[1, 2]", "[1,2,3]"},
          {"[]", "[1, 2, 3, 4]", "[\"a\"]", "[1,]"});
    check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2})", {"[1, 2]", "[1, 2, 3, 4, 5]"}, {"[1]"});
    check(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
    check(R"({"type": "array"})", {"[]", "[1, \"a\", null]"}, {"[1,]"});
    check(R"({"anyOf": [{"type": "integer"}, {"type": "string"}]})", {"1", "\"a\""}, {"null"});
    check(R"({"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "boolean"}}]})", {"true", "[false]"}, {"1"});
}

TEST_CASE("json_schema: $ref to $defs and definitions, recursive ones too", "[json_schema]") {
    check(R"({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
             "type": "array", "items": {"$ref": "#/$defs/pt"}})",
          {R"([{"x": 1, "y": 2}])", "[]"}, {R"([{"x": 1}])"});
    check(R"({"definitions": {"color": {"enum": ["r", "g"]}}, "properties": {"c": {"$ref": "#/definitions/color"}}, "required": ["c"]})",
          {R"({"c": "r"})"}, {R"({"c": "b"})"});
    const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})";
    check(tree, {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]})"}, {R"({"v": 1, "kids": [{}]})"});
}

TEST_CASE("json_schema: what it cannot enforce is refused, naming the keyword and where", "[json_schema]") {
    CHECK(error_of(R"({"type": "string", "pattern": "^a"})") == "json_schema: at the top: unsupported keyword \"pattern\"");
    CHECK(error_of(R"({"properties": {"age": {"type": "integer", "minimum": 0}}})") ==
          "json_schema: at /properties/age: unsupported keyword \"minimum\"");
    CHECK(error_of(R"({"allOf": [{}]})").find("unsupported keyword \"allOf\"") != std::string::npos);
    CHECK(error_of(R"({"type": "string", "format": "date"})").find("\"format\"") != std::string::npos);
    CHECK(error_of(R"({"type": "array", "prefixItems": []})").find("\"prefixItems\"") != std::string::npos);
    CHECK(error_of(R"({"type": "strin"})").find("unknown type \"strin\"") != std::string::npos);
    CHECK(error_of(R"({"$ref": "#/$defs/missing"})").find("points at nothing") != std::string::npos);
    CHECK(error_of(R"({"$ref": "http://example.com/s.json"})").find("not supported") != std::string::npos);
    CHECK(error_of(R"({"required": ["a"], "properties": {}})").find("\"a\" is not in properties") != std::string::npos);
    CHECK(error_of(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("below minItems") != std::string::npos);
    CHECK(error_of(R"({"enum": []})").find("non-empty") != std::string::npos);
    CHECK(error_of(R"(false)").find("admits nothing") != std::string::npos);
    CHECK(error_of(R"({"properties": {"a": {}}, "additionalProperties": true})").find("additionalProperties") != std::string::npos);
    // Invalid JSON: where it broke.
    CHECK(error_of(R"({"type": )").find("invalid JSON at byte") != std::string::npos);
    CHECK(error_of(R"({"a": 1, "a": 2})").find("duplicate member") != std::string::npos);
    CHECK(error_of(std::string(100, '[')).find("invalid JSON") != std::string::npos);
    CHECK(error_of(std::string(kMaxJsonSchemaBytes + 1, ' ')).find("at most") != std::string::npos);
    // Every message is one line.
    for (const char* s : {R"({"pattern": "x"})", R"({"type": 1})", "{\n\"a\"\n"}) CHECK(error_of(s).find('\n') == std::string::npos);
}
