// The hand-written JSON of WebSocket token frames (net/api.cpp) against a
// real JSON parser: every field must come back as it went in, whatever the
// token text holds.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "net/api.h"
#include "net/logprobs_json.h"
#include "net/sse.h"

using nlohmann::json;
using specd::token_event;
using specd::net::chat_chunk;
using specd::net::completion_chunk;
using specd::net::content_chunk_json;
using specd::net::ws_token_frame;

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

// ------------------------------------------------------------ logprobs ---

namespace {
// Token ids to bytes for the logprobs tests: 12 is half of a character.
std::string test_piece(int32_t id) {
    switch (id) {
        case 10: return " a";
        case 11: return "\"b\"";
        case 12: return "\xe2\x82";
        case 20: return "x";
        default: return "y";
    }
}

token_event logprob_event() {
    // (the half character waits for its last byte: text_ends 5, 5)
    token_event e{"r", {10, 11, 12}, {1, 1, 0}, " a\"b\"", {2, 5, 5}, {}};
    e.logprobs.n_top = 2;
    e.logprobs.logprob = {-0.25f, -1.5f, -3.0f};
    e.logprobs.top_ids = {10, 20, 11, 21, 20, 12};
    e.logprobs.top_logprobs = {-0.25f, -2.0f, -1.5f, -1.75f, -0.5f, -3.0f};
    return e;
}
}  // namespace

TEST_CASE("logprobs objects: chat's content entries and completions' parallel lists, shaped as OpenAI's", "[net][api][logprobs]") {
    using namespace specd::net;
    const token_event e = logprob_event();
    const json chat = chat_logprobs_json(e, test_piece);
    REQUIRE(chat.at("content").size() == 3);
    const json& first = chat["content"][0];
    CHECK(first.at("token") == " a");
    CHECK(first.at("logprob").get<double>() == Approx(-0.25));
    CHECK(first.at("bytes") == json::array({32, 97}));
    REQUIRE(first.at("top_logprobs").size() == 2);
    CHECK(first["top_logprobs"][1].at("token") == "x");
    CHECK(first["top_logprobs"][1].at("logprob").get<double>() == Approx(-2.0));
    CHECK(first["top_logprobs"][1].at("bytes") == json::array({120}));
    // Half a character: the token text is repaired (U+FFFD), the bytes are exact.
    CHECK(chat["content"][2].at("token") == "\xef\xbf\xbd");
    CHECK(chat["content"][2].at("bytes") == json::array({0xe2, 0x82}));
    for (const json& c : chat["content"]) CHECK(c.size() == 4);  // token, logprob, bytes, top_logprobs and nothing else

    const json comp = completion_logprobs_json(e, test_piece, 7);
    CHECK(comp.at("tokens") == json::array({" a", "\"b\"", "\xef\xbf\xbd"}));
    REQUIRE(comp.at("token_logprobs").size() == 3);
    CHECK(comp["token_logprobs"][1].get<double>() == Approx(-1.5));
    REQUIRE(comp.at("top_logprobs").size() == 3);
    CHECK(comp["top_logprobs"][0].size() == 2);
    CHECK(comp["top_logprobs"][0].at("x").get<double>() == Approx(-2.0));
    CHECK(comp["top_logprobs"][2].at("x").get<double>() == Approx(-0.5));
    CHECK(comp.at("text_offset") == json::array({7, 9, 12}));  // each token's text starts where the one before ended

    // A mismatched event is a programming error, not a silently short object.
    token_event broken = e;
    broken.logprobs.logprob.pop_back();
    CHECK_THROWS(chat_logprobs_json(broken, test_piece));
}

TEST_CASE("logprobs in a WebSocket token frame (when asked) and across merged events and streamed chunks", "[net][api][logprobs]") {
    using namespace specd::net;
    const token_event e = logprob_event();
    const TokenPiece piece = test_piece;
    const json frame = json::parse(ws_token_frame(e, &piece));
    REQUIRE(frame.at("logprobs").size() == 3);
    CHECK(frame["logprobs"] == chat_logprobs_json(e, piece)["content"]);
    CHECK(frame.at("token_ids") == json::array({10, 11, 12}));
    CHECK_FALSE(json::parse(ws_token_frame(e)).contains("logprobs"));
    token_event plain = e;
    plain.logprobs = {};
    CHECK_FALSE(json::parse(ws_token_frame(plain, &piece)).contains("logprobs"));

    token_event merged = e;
    append_token_event(merged, e);
    CHECK(merged.tokens.size() == 6);
    CHECK(merged.logprobs.size() == 6);
    CHECK(merged.text_ends == std::vector<uint32_t>{2, 5, 5, 7, 10, 10});
    CHECK(chat_logprobs_json(merged, piece)["content"][4] == chat_logprobs_json(e, piece)["content"][1]);

    // Streamed completions: text_offset goes on from the text already sent;
    // a chunk whose text is held back still carries its tokens' figures.
    SseStream comp(false, "c", "m", 1, false);
    (void)comp.start(true, "");
    const auto data_of = [](const std::string& event) {
        const size_t at = event.find("data: ");
        return json::parse(event.substr(at + 6, event.find("\n\n", at) - at - 6));
    };
    (void)comp.tokens(e, piece);
    token_event held = e;
    held.text.clear();
    held.text_ends = {0, 0, 0};
    const json chunk = data_of(comp.tokens(held, piece));
    CHECK(chunk["choices"][0].at("text") == "");
    CHECK(chunk["choices"][0]["logprobs"].at("text_offset") == json::array({5, 5, 5}));
    SseStream chat(true, "c", "m", 1, false);
    (void)chat.start(true, "");
    const json cchunk = data_of(chat.tokens(e, piece));
    CHECK(cchunk["choices"][0]["delta"].at("content") == e.text);
    CHECK(cchunk["choices"][0]["logprobs"] == chat_logprobs_json(e, piece));
    CHECK(data_of(chat.tokens(plain, piece))["choices"][0]["logprobs"].is_null());
}
