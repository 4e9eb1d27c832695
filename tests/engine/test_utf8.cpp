// UTF-8 repair (engine/utf8.h): what every string leaving the process goes
// through, so client bytes never reach a JSON writer invalid.
#include <catch2/catch.hpp>

#include <string>

#include "engine/utf8.h"

using namespace specd;

TEST_CASE("valid_utf8: valid text passes unchanged, each invalid sequence becomes one U+FFFD", "[utf8]") {
    const std::string ok = "plain, h\xC3\xA9llo, \xE6\x97\xA5\xE6\x9C\xAC, \xF0\x9F\x8E\x89";
    CHECK(valid_utf8(ok) == ok);
    CHECK(is_valid_utf8(ok));
    CHECK(valid_utf8("a\xFF" "b") == "a\xEF\xBF\xBD" "b");           // a byte that never starts a character
    CHECK(valid_utf8("\xFF\xFE") == "\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(valid_utf8("x\xE2\x80") == "x\xEF\xBF\xBD");               // truncated at the end: one replacement
    CHECK(valid_utf8("\xE2\x80" "a") == "\xEF\xBF\xBD" "a");         // broken off mid-character, 'a' read afresh
    CHECK(valid_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");     // overlong '/'
    CHECK(valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate half
    CHECK(valid_utf8("\xF4\x90\x80\x80").find("\xF4\x90") == std::string::npos);   // above U+10FFFF
    CHECK_FALSE(is_valid_utf8("\x80"));
}

TEST_CASE("valid_utf8: a multi-byte text cut at every byte position is repaired to valid UTF-8", "[utf8]") {
    const std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x8E\x89";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
        const std::string head = valid_utf8(text.substr(0, cut));
        CHECK(is_valid_utf8(head));
        const std::string tail = valid_utf8(text.substr(cut));
        CHECK(is_valid_utf8(tail));
    }
}

TEST_CASE("Utf8Repair: a character split across feeds is passed through whole once complete", "[utf8]") {
    Utf8Repair r;
    std::string out;
    r.feed("a\xF0\x9F", out);
    CHECK(out == "a");
    r.feed("\x8E\x89!", out);
    CHECK(out == "a\xF0\x9F\x8E\x89!");
    r.feed("\xE6\x97", out);
    r.finish(out);
    CHECK(out == "a\xF0\x9F\x8E\x89!\xEF\xBF\xBD");
}

TEST_CASE("utf8_excerpt: cut at a character boundary within the limit, marked with ...", "[utf8]") {
    CHECK(utf8_excerpt("short", 10) == "short");
    CHECK(utf8_excerpt("\xE6\x97\xA5\xE6\x9C\xAC", 4) == "\xE6\x97\xA5...");  // 3 bytes kept, not 4
    CHECK(utf8_excerpt("ab\xFF", 10) == "ab\xEF\xBF\xBD");
    CHECK(utf8_excerpt(std::string(1000, 'x'), 40).size() == 43);
}
