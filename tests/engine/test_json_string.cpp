// The JSON string literal writer (engine/json_string.h) against a real JSON
// parser, and against the bytes Python's json.dumps(ensure_ascii=False)
// writes (what the chat templates' tojson must reproduce).
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/json_string.h"

using nlohmann::json;
using specd::append_json_string;

TEST_CASE("append_json_string: every ASCII byte and multi-byte UTF-8 text survive a JSON parser", "[json]") {
    std::string text;
    for (int c = 1; c < 128; ++c) text += static_cast<char>(c);
    text += "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";  // é € 😀
    std::string literal;
    append_json_string(literal, text);
    CHECK(json::parse(literal).get<std::string>() == text);
    // Control characters never appear raw (JSON forbids them in strings).
    for (char c : literal) CHECK(static_cast<unsigned char>(c) >= 0x20);

    std::string empty;
    append_json_string(empty, "");
    CHECK(empty == "\"\"");
}

TEST_CASE("append_json_string: escapes as json.dumps(ensure_ascii=False) writes them, byte for byte", "[json]") {
    std::string out;
    append_json_string(out, "a\"b\\c\nd\re\tf\bg\fh\x01i\x1fj\x7fk \xc3\xa9/");
    // Python: json.dumps('a"b\\c\nd\re\tf\bg\fh\x01i\x1fj\x7fk \u00e9/', ensure_ascii=False)
    CHECK(out == "\"a\\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u001fj\x7fk \xc3\xa9/\"");
}
