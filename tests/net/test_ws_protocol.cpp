// The request parsers without a socket: parse_generation (both HTTP
// endpoints) and interpret_ws_message (WebSocket frames). Hostile input
// gets an error naming the problem in specd's words, never an exception
// from the JSON library; null for an optional parameter is its default.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/utf8.h"
#include "net/api.h"
#include "net/ws_protocol.h"

using namespace specd;
using namespace specd::net;
using nlohmann::json;

namespace {

std::string plain_transcript(const void*, const std::vector<std::pair<std::string, std::string>>& messages) {
    std::string out;
    for (const auto& [role, content] : messages) out += role + ": " + content + "\n";
    return out;
}

const RequestLimits kLimits;

WsAction ws(const std::string& text, bool draining = false) {
    WsContext ctx{&kLimits, draining, plain_transcript, nullptr};
    return interpret_ws_message(text, ctx);
}

ApiError http_error(const std::string& body, ApiKind kind) {
    try {
        parse_generation(parse_json(body), kind, kLimits, plain_transcript, nullptr);
    } catch (const ApiError& e) {
        return e;
    }
    return ApiError{0, "", "", ""};
}

}  // namespace

TEST_CASE("parse_generation: null for an optional parameter means its default, as OpenAI reads it", "[net][api]") {
    const ParsedRequest r = parse_generation(
        parse_json(R"({"prompt":"x","temperature":null,"top_p":null,"max_tokens":null,"seed":null,"stop":null,"n":null,)"
                   R"("stream":null,"model":null,"speculative":null,"min_p":null,"top_k":null})"),
        ApiKind::Completion, kLimits, plain_transcript, nullptr);
    const ParsedRequest d = parse_generation(parse_json(R"({"prompt":"x"})"), ApiKind::Completion, kLimits, plain_transcript, nullptr);
    CHECK(r.request.max_tokens == d.request.max_tokens);
    CHECK(r.request.sampling.temperature == d.request.sampling.temperature);
    CHECK(r.request.sampling.top_p == d.request.sampling.top_p);
    CHECK_FALSE(r.stream);
    CHECK(r.request.model.empty());
    CHECK(http_error(R"({"messages":null})", ApiKind::Chat).param == "messages");
    const auto stops = [](const char* body) {
        return parse_generation(parse_json(body), ApiKind::Completion, kLimits, plain_transcript, nullptr).request.stop;
    };
    CHECK(stops(R"({"prompt":"x","stop":"\n\n"})") == std::vector<std::string>{"\n\n"});
    CHECK(stops(R"({"prompt":"x","stop":["A:","B:"]})") == std::vector<std::string>{"A:", "B:"});
}

TEST_CASE("parse_generation: wrong types and out-of-range values name the parameter; long values are echoed short", "[net][api]") {
    const ApiError t = http_error(R"({"prompt":"x","temperature":"hot"})", ApiKind::Completion);
    CHECK(t.status == 400);
    CHECK(t.param == "temperature");
    const ApiError big = http_error(R"({"prompt":"x","max_tokens":")" + std::string(100000, '9') + R"("})", ApiKind::Completion);
    CHECK(big.param == "max_tokens");
    CHECK(big.message.size() < 200);
    CHECK(http_error(R"({"prompt":"x","temperature":1e400})", ApiKind::Completion).code == "invalid_json");
    CHECK(http_error(R"({"prompt":"x","stream":"yes"})", ApiKind::Completion).param == "stream");
    const ApiError model = http_error(R"({"prompt":"x","model":")" + std::string(1000000, 'm') + R"("})", ApiKind::Completion);
    CHECK(model.param == "model");
    CHECK(model.message.size() < 200);
    CHECK(http_error(R"({"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", ApiKind::Completion).param == "stop");
    CHECK(http_error(R"({"prompt":"x","stop":[""]})", ApiKind::Completion).param == "stop");
    CHECK(http_error(R"({"prompt":"x","stop":[1]})", ApiKind::Completion).param == "stop");
    CHECK(http_error(R"({"prompt":"x","speculative":{"enabled":1}})", ApiKind::Completion).param == "speculative.enabled");
}

TEST_CASE("error_body: 429 is rate_limit_exceeded; invalid UTF-8 in a message becomes U+FFFD", "[net][api]") {
    const json j = json::parse(error_body(ApiError{429, "overloaded", "too many requests", ""}));
    CHECK(j["error"]["type"] == "rate_limit_exceeded");
    const std::string body = error_body(ApiError{404, "not_found", "no endpoint /\xFF\xFE", "p\xC3"});
    CHECK(is_valid_utf8(body));
    CHECK(json::parse(body)["error"]["message"] == "no endpoint /\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("interpret_ws_message: every crash reproduction of issue 31 is an error frame naming the problem", "[net][ws]") {
    for (const std::string& text : {std::string("1e400"), std::string("\xC3\xA9"), std::string("{\"prompt\":\"\xFF\xFE\"}"),
                                   std::string("{\xE2\x80\x9Ctype\xE2\x80\x9D: 1}"), std::string(200000, '['), std::string("")}) {
        const WsAction a = ws(text);
        REQUIRE(a.kind == WsAction::Kind::Reply);
        const json f = json::parse(a.frame);
        CHECK(f["type"] == "error");
        CHECK(f["code"] == "invalid_json");
        CHECK(f["message"].get<std::string>().find("json.exception") == std::string::npos);
    }
}

TEST_CASE("interpret_ws_message: generate, cancel, and the checks on type, id and draining", "[net][ws]") {
    const WsAction g = ws(R"({"type":"generate","id":"r1","prompt":"Once","max_tokens":3})");
    REQUIRE(g.kind == WsAction::Kind::Generate);
    CHECK(g.id == "r1");
    CHECK(g.parsed.request.id == "r1");
    CHECK(g.parsed.request.max_tokens == 3);
    const WsAction c = ws(R"({"type":"cancel","id":"r1"})");
    CHECK(c.kind == WsAction::Kind::Cancel);
    CHECK(c.id == "r1");
    CHECK(json::parse(ws(R"({"type":"cancel"})").frame)["code"] == "invalid_request");
    CHECK(json::parse(ws(R"({"type":"nope","id":"r"})").frame)["code"] == "invalid_request");
    CHECK(json::parse(ws(R"([1,2])").frame)["code"] == "invalid_request");
    CHECK(json::parse(ws(R"({"type":"generate","id":"r2","prompt":"x"})", true).frame)["code"] == "draining");

    const std::string longest(kMaxWsIdBytes, 'i');
    CHECK(ws(R"({"type":"generate","id":")" + longest + R"(","prompt":"x"})").kind == WsAction::Kind::Generate);
    const WsAction too_long = ws(R"({"type":"generate","id":")" + longest + R"(i","prompt":"x"})");
    REQUIRE(too_long.kind == WsAction::Kind::Reply);
    CHECK_THAT(json::parse(too_long.frame)["message"].get<std::string>(), Catch::Contains("at most 128"));
    CHECK(json::parse(too_long.frame)["id"].is_null());  // not echoed
}
