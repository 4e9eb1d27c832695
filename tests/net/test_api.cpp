// The hand-written JSON of WebSocket token frames (net/api.cpp) against a
// real JSON parser: every field must come back as it went in, whatever the
// token text holds.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "net/api.h"

using nlohmann::json;
using specd::token_event;
using specd::net::append_json_string;
using specd::net::chat_chunk;
using specd::net::completion_chunk;
using specd::net::content_chunk_json;
using specd::net::ws_token_frame;

TEST_CASE("append_json_string: every ASCII byte and multi-byte UTF-8 text survive a JSON parser", "[net][api]") {
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

TEST_CASE("ws_token_frame: parses as the documented token frame, with quotes, backslashes and newlines in id and text", "[net][api]") {
    token_event e;
    e.id = "client \"7\"\\a";
    e.text = " said \"hi\"\n\tand\\left \xe2\x82\xac";
    e.tokens = {727, 0, 31999};
    e.from_draft = {0, 1, 1};
    const std::string frame = ws_token_frame(e);
    const json f = json::parse(frame);
    CHECK(f.size() == 5);
    CHECK(f["type"] == "token");
    CHECK(f["id"] == e.id);
    CHECK(f["text"] == e.text);
    CHECK(f["token_ids"] == json::array({727, 0, 31999}));
    CHECK(f["from_draft"] == json::array({false, true, true}));
    // The documented key order: type first, so a reader can tell frames apart by their start.
    CHECK(frame.rfind(R"({"type":"token","id":)", 0) == 0);

    token_event none;
    none.id = "x";
    const json g = json::parse(ws_token_frame(none));
    CHECK(g["token_ids"].empty());
    CHECK(g["from_draft"].empty());
    CHECK(g["text"] == "");
}

TEST_CASE("ws_token_frame: token_texts gives each token its own text, and is left out when the ends do not describe the text", "[net][api]") {
    token_event e;
    e.id = "r1";
    e.text = " a\xe2\x82\xac b";  // the euro sign's three bytes all belong to the token that completed it
    e.tokens = {10, 11, 12, 13};
    e.from_draft = {0, 1, 1, 0};
    e.text_ends = {2, 2, 5, 7};
    const json f = json::parse(ws_token_frame(e));
    CHECK(f.size() == 6);
    CHECK(f["token_texts"] == json::array({" a", "", "\xe2\x82\xac", " b"}));

    e.text_ends = {2, 5, 7};  // one end short: no per-token text rather than a wrong one
    CHECK_FALSE(json::parse(ws_token_frame(e)).contains("token_texts"));
    e.text_ends = {2, 2, 5, 6};  // the last end misses the text's end
    CHECK_FALSE(json::parse(ws_token_frame(e)).contains("token_texts"));
    e.text_ends = {2, 5, 2, 7};  // not in order
    CHECK_FALSE(json::parse(ws_token_frame(e)).contains("token_texts"));
}

TEST_CASE("content_chunk_json: the same JSON as the completion and chat chunk objects, in OpenAI's key order", "[net][api]") {
    const std::string id = "cmpl-1\"x", model = "stories15M \\ f32", text = "Once\nupon \"a\" time \xe2\x82\xac";
    const std::string completion = content_chunk_json(false, id, model, 1733390000, text);
    CHECK(json::parse(completion) == completion_chunk(id, model, 1733390000, text, ""));
    CHECK(completion.rfind(R"({"id":)", 0) == 0);
    const std::string chat = content_chunk_json(true, id, model, 1733390000, text);
    CHECK(json::parse(chat) == chat_chunk(id, model, 1733390000, nullptr, &text, ""));
    CHECK(json::parse(chat)["choices"][0]["delta"]["content"] == text);
}

TEST_CASE("openai_finish_reason: a cancelled generation stays \"cancelled\" (a cut answer must not read as complete)", "[net][api]") {
    CHECK(specd::net::openai_finish_reason("cancelled") == "cancelled");
    CHECK(specd::net::openai_finish_reason("context") == "length");
    CHECK(specd::net::openai_finish_reason("length") == "length");
    CHECK(specd::net::openai_finish_reason("stop") == "stop");
}
