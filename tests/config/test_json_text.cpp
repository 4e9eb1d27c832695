// config/json_text.h: every JSON text from outside (request bodies, frames,
// config files) is parsed here; errors come out in specd's words, one
// line, valid UTF-8; replies are written without ever throwing.
#include <catch2/catch.hpp>

#include <string>

#include "config/json_text.h"
#include "engine/utf8.h"

using namespace specd;

namespace {

// The message of the JsonTextError that parsing `text` throws ("" if none).
std::string parse_error(const std::string& text) {
    try {
        parse_json_text(text);
    } catch (const JsonTextError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("parse_json_text: well-formed JSON parses as the library does", "[json]") {
    const nlohmann::json j = parse_json_text(R"({"prompt": "h\u00e9", "n": [1, 2.5, null, true]})");
    CHECK(j["prompt"] == "h\xC3\xA9");
    CHECK(j["n"].size() == 4);
}

TEST_CASE("parse_json_text: numbers beyond a double, bad UTF-8 and smart quotes are one-line errors in our words", "[json]") {
    for (const std::string& text : {std::string("1e400"), std::string(R"({"prompt":"x","temperature":1e400})"), std::string("-1e999")}) {
        const std::string e = parse_error(text);
        CHECK_THAT(e, Catch::Contains("out of range"));
    }
    const std::string cases[] = {
        "{\xE2\x80\x9Cprompt\xE2\x80\x9D: \xE2\x80\x9Chi\xE2\x80\x9D}",  // {“prompt”: “hi”}
        "\xC3\xA9",                                                      // a bare é
        "{\"prompt\":\"\xFF\xFE\"}",                                     // raw invalid bytes in a string
        "{\"prompt\":\"h\xC3",                                           // truncated mid-character
        "{\"a\":NaN}", "[Infinity]", "{\"a\":", "", "   ",
        "{\"prompt\": \"a\nb\x01\"}",                                    // raw control bytes: the message stays one line
        "{\"max_tokens\": 5\x01\n\"temperature\": 0}",
    };
    for (const std::string& text : cases) {
        const std::string e = parse_error(text);
        INFO(e);
        CHECK_FALSE(e.empty());
        CHECK(is_valid_utf8(e));
        CHECK(e.find("json.exception") == std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
    }
    CHECK_THAT(parse_error("{\xE2\x80\x9Cprompt\xE2\x80\x9D: 1}"), Catch::StartsWith("malformed JSON at byte 2"));
}

TEST_CASE("parse_json_text: nesting deeper than kMaxJsonDepth is refused before parsing, and brackets in strings do not count", "[json]") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK_THAT(parse_error(deep), Catch::Contains("nested deeper than"));
    CHECK_THAT(parse_error(std::string(50000, '[')), Catch::Contains("nested deeper than"));
    const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
    CHECK(parse_error(at_limit).empty());
    CHECK(parse_error(R"({"s": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[["})").empty());
}

TEST_CASE("dump_json: invalid UTF-8 in any string is replaced, never thrown", "[json]") {
    nlohmann::json j = {{"message", "no endpoint /\xFF"}, {"k\xFE", "v"}};
    const std::string out = dump_json(j);
    CHECK(is_valid_utf8(out));
    CHECK_THAT(out, Catch::Contains("/\xEF\xBF\xBD"));
    CHECK(parse_json_text(out)["message"] == "no endpoint /\xEF\xBF\xBD");
}
