// The request parsers without a socket: parse_generation (both HTTP
// endpoints) and interpret_ws_message (WebSocket frames). Hostile input
// gets an error naming the problem in specd's words, never an exception
// from the JSON library; null for an optional parameter is its default.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/constraints.h"
#include "engine/utf8.h"
#include "net/api.h"
#include "net/ws_protocol.h"

using namespace specd;
using namespace specd::net;
using nlohmann::json;

namespace {

std::string plain_transcript(const void*, const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools,
                             ChatTemplate::ToolFormat& tool_format) {
    tool_format = ChatTemplate::ToolFormat::None;
    if (!tools.empty()) throw ApiError{400, "invalid_request", "this test's transcript has no tool format", "tools"};
    std::string out;
    for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
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

TEST_CASE("parse_generation: wrong types and out-of-range values name the parameter, and long values are echoed short", "[net][api]") {
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

TEST_CASE("error_body: 429 is rate_limit_exceeded, and invalid UTF-8 in a message becomes U+FFFD", "[net][api]") {
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

TEST_CASE("parse_generation: chat messages as SDKs send them: text parts, developer, assistant content null, tool turns", "[net][api]") {
    const auto chat = [](const std::string& messages) {
        return parse_generation(parse_json(R"({"messages":)" + messages + "}"), ApiKind::Chat, kLimits, plain_transcript, nullptr);
    };
    const ParsedRequest r = chat(R"([{"role":"developer","content":"Be brief."},)"
                                 R"({"role":"user","content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]},)"
                                 R"({"role":"assistant","content":null},{"role":"user","content":"again"}])");
    REQUIRE(r.messages.size() == 4);
    CHECK(r.messages[0].role == "system");
    CHECK(r.messages[0].content == "Be brief.");
    CHECK(r.messages[1].content == "Hello, world");
    CHECK(r.messages[2].role == "assistant");
    CHECK(r.messages[2].content.empty());
    CHECK(r.request.max_tokens == kLimits.max_tokens_limit);  // chat: until the answer or the context ends
    // Tool turns parse (the transcript renderer here ignores their calls).
    const ParsedRequest t = chat(R"([{"role":"user","content":"weather?"},)"
                                 R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function",)"
                                 R"("function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1, 2]}"}}]},)"
                                 R"({"role":"tool","tool_call_id":"call_0","content":"sunny"}])");
    REQUIRE(t.messages.size() == 3);
    REQUIRE(t.messages[1].tool_calls.size() == 1);
    CHECK(t.messages[1].tool_calls[0].name == "get_weather");
    CHECK(t.messages[1].tool_calls[0].arguments == R"({"city": "Paris", "days": [1, 2]})");  // as the template's tojson writes it
    CHECK(t.messages[2].role == "tool");
    CHECK(t.messages[2].content == "sunny");
    CHECK_FALSE(t.tool_calls);  // no tools offered: the reply is text
    CHECK_THAT(http_error(R"({"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{oops"}}]}]})",
                          ApiKind::Chat).message, Catch::Contains("not JSON"));
    CHECK(http_error(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})", ApiKind::Chat).param == "messages");
    CHECK(http_error(R"({"messages":[{"role":"function","name":"f","content":"x"}]})", ApiKind::Chat).message.find("deprecated") != std::string::npos);
    CHECK(http_error(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", ApiKind::Chat)
              .message.find("image_url") != std::string::npos);
    CHECK(http_error(R"({"messages":[{"role":"user","content":[]}]})", ApiKind::Chat).param == "messages");
    CHECK(http_error(R"({"messages":[{"role":"user"}]})", ApiKind::Chat).param == "messages");
}

TEST_CASE("parse_generation: n from 1 to 16 on both HTTP endpoints, best_of equal to n, anything else a 400 naming n or best_of", "[net][api]") {
    for (const ApiKind kind : {ApiKind::Completion, ApiKind::Chat}) {
        const std::string head = kind == ApiKind::Chat ? R"({"messages":[{"role":"user","content":"x"}],)" : R"({"prompt":"x",)";
        CHECK(parse_generation(parse_json(head + R"("n":3})"), kind, kLimits, plain_transcript, nullptr).n == 3);
        CHECK(parse_generation(parse_json(head + R"("n":16,"best_of":16})"), kind, kLimits, plain_transcript, nullptr).n == 16);
        CHECK(parse_generation(parse_json(head + R"("n":null})"), kind, kLimits, plain_transcript, nullptr).n == 1);
        CHECK(parse_generation(parse_json(head + R"("temperature":0})"), kind, kLimits, plain_transcript, nullptr).n == 1);
        for (const char* bad : {R"("n":0})", R"("n":17})", R"("n":2.5})", R"("n":"2"})"}) {
            INFO(bad);
            CHECK(http_error(head + bad, kind).param == "n");
        }
        const ApiError e = http_error(head + R"("n":2,"best_of":3})", kind);
        CHECK(e.param == "best_of");
        CHECK_THAT(e.message, Catch::Contains("n (2)"));
    }
    const WsContext ctx{&kLimits, false, plain_transcript, nullptr};
    const WsAction a = interpret_ws_message(R"({"type":"generate","id":"p","prompt":"x","n":2})", ctx);
    CHECK(a.kind == WsAction::Kind::Reply);
    CHECK_THAT(a.frame, Catch::Contains("n > 1"));
}

TEST_CASE("parse_generation: a parameter specd does not implement is refused naming it, and its off value is accepted", "[net][api]") {
    for (const char* param : {R"("echo":true)", R"("suffix":"end")", R"("best_of":2)"}) {
        const std::string body = std::string(R"({"prompt":"x",)") + param + "}";
        const ApiError e = http_error(body, ApiKind::Completion);
        INFO(body);
        CHECK(e.status == 400);
        CHECK_FALSE(e.param.empty());
        CHECK(std::string(param).find(e.param) == 1);
        CHECK_THAT(e.message, Catch::Contains("not supported"));
    }
    const ParsedRequest ok = parse_generation(
        parse_json(R"({"prompt":"x","presence_penalty":0,"frequency_penalty":0.0,"logprobs":false,"echo":false,"logit_bias":{},)"
                   R"("best_of":1,"tools":[],"tool_choice":"none","response_format":{"type":"text"},"user":"u1","cache_prompt":true,)"
                   R"("stream":true,"stream_options":{"include_usage":true}})"),
        ApiKind::Completion, kLimits, plain_transcript, nullptr);
    CHECK(ok.include_usage);
    CHECK(ok.request.max_tokens == kLimits.default_max_tokens);
}

// ------------------------------------------- penalties and logit_bias ---

namespace {
// The same parameters through /v1/completions, /v1/chat/completions and a
// WebSocket generate frame.
std::vector<ParsedRequest> parsed_everywhere(const std::string& params, const RequestLimits& limits = kLimits) {
    std::vector<ParsedRequest> out;
    // With the body's text, as the routes parse it (a schema keeps its order).
    const std::string completion = R"({"prompt":"x",)" + params + "}";
    const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)" + params + "}";
    out.push_back(parse_generation(parse_json(completion), ApiKind::Completion, limits, plain_transcript, nullptr, completion));
    out.push_back(parse_generation(parse_json(chat), ApiKind::Chat, limits, plain_transcript, nullptr, chat));
    const WsContext ctx{&limits, false, plain_transcript, nullptr};
    WsAction a = interpret_ws_message(R"({"type":"generate","id":"p","prompt":"x",)" + params + "}", ctx);
    REQUIRE(a.kind == WsAction::Kind::Generate);
    out.push_back(std::move(a.parsed));
    return out;
}

// The field a bad value is refused under, on both HTTP endpoints and the WebSocket.
void refused_everywhere(const std::string& params, const std::string& field, const RequestLimits& limits = kLimits,
                        const std::string& says = "") {
    INFO(params);
    for (const ApiKind kind : {ApiKind::Completion, ApiKind::Chat}) {
        const std::string body = kind == ApiKind::Chat ? R"({"messages":[{"role":"user","content":"x"}],)" + params + "}"
                                                       : R"({"prompt":"x",)" + params + "}";
        ApiError e{0, "", "", ""};
        try {
            parse_generation(parse_json(body), kind, limits, plain_transcript, nullptr, body);
        } catch (const ApiError& caught) {
            e = caught;
        }
        CHECK(e.status == 400);
        CHECK(e.param == field);
        CHECK_THAT(e.message, Catch::Contains(field));
        if (!says.empty()) CHECK_THAT(e.message, Catch::Contains(says));
    }
    const WsContext ctx{&limits, false, plain_transcript, nullptr};
    const WsAction a = interpret_ws_message(R"({"type":"generate","id":"p","prompt":"x",)" + params + "}", ctx);
    REQUIRE(a.kind == WsAction::Kind::Reply);
    CHECK_THAT(a.frame, Catch::Contains(field));
}
}  // namespace

TEST_CASE("parse_generation: presence_penalty and frequency_penalty are honoured everywhere, counting the output (OpenAI)", "[net][api]") {
    for (const ParsedRequest& p : parsed_everywhere(R"("presence_penalty":0.5,"frequency_penalty":-1.25)")) {
        CHECK(p.request.sampling.presence_penalty == 0.5f);
        CHECK(p.request.sampling.frequency_penalty == -1.25f);
        CHECK(p.request.sampling.penalty_window == PenaltyWindow::Output);
        CHECK_FALSE(p.request.sampling.plain_argmax());
    }
    for (const ParsedRequest& p : parsed_everywhere(R"("presence_penalty":2,"frequency_penalty":-2)")) {
        CHECK(p.request.sampling.presence_penalty == 2.0f);
        CHECK(p.request.sampling.frequency_penalty == -2.0f);
    }
    // null is the default (off).
    for (const ParsedRequest& p : parsed_everywhere(R"("presence_penalty":null,"frequency_penalty":null,"logit_bias":null)")) {
        CHECK(p.request.sampling.presence_penalty == 0.0f);
        CHECK(p.request.sampling.frequency_penalty == 0.0f);
        CHECK(p.request.sampling.logit_bias.empty());
    }
    refused_everywhere(R"("presence_penalty":2.5)", "presence_penalty");
    refused_everywhere(R"("frequency_penalty":99)", "frequency_penalty");
    refused_everywhere(R"("frequency_penalty":-2.01)", "frequency_penalty");
    refused_everywhere(R"("presence_penalty":"0.5")", "presence_penalty");
}

TEST_CASE("parse_generation: repeat_last_n is llama-server's dialect: the penalties then count its window of prompt + output", "[net][api]") {
    for (const ParsedRequest& p : parsed_everywhere(R"("repeat_last_n":32,"repeat_penalty":1.1,"presence_penalty":0.3)")) {
        CHECK(p.request.sampling.repeat_last_n == 32);
        CHECK(p.request.sampling.repeat_penalty == 1.1f);
        CHECK(p.request.sampling.penalty_window == PenaltyWindow::LastN);
    }
    for (const ParsedRequest& p : parsed_everywhere(R"("repeat_last_n":-1)")) CHECK(p.request.sampling.repeat_last_n == -1);
    refused_everywhere(R"("repeat_last_n":-2)", "repeat_last_n");
    refused_everywhere(R"("repeat_last_n":1.5)", "repeat_last_n");
}

TEST_CASE("parse_generation: logit_bias as OpenAI's object or llama-server's pairs, and ids outside the vocabulary are a 400 naming it",
          "[net][api]") {
    RequestLimits limits;
    limits.n_vocab = 32000;
    const auto sorted = [](std::vector<LogitBias> v) {
        std::sort(v.begin(), v.end(), [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
        return v;
    };
    for (const ParsedRequest& p : parsed_everywhere(R"("logit_bias":{"15043":-100,"2":5.5,"31999":100})", limits)) {
        const std::vector<LogitBias> b = sorted(p.request.sampling.logit_bias);
        REQUIRE(b.size() == 3);
        CHECK((b[0].token == 2 && b[0].bias == 5.5f));
        CHECK((b[1].token == 15043 && b[1].bias == -100.0f));
        CHECK((b[2].token == 31999 && b[2].bias == 100.0f));
        CHECK_FALSE(p.request.sampling.plain_argmax());
    }
    for (const ParsedRequest& p : parsed_everywhere(R"("logit_bias":[[15043,false],[7,1]])", limits)) {
        const std::vector<LogitBias> b = sorted(p.request.sampling.logit_bias);
        REQUIRE(b.size() == 2);
        CHECK((b[0].token == 7 && b[0].bias == 1.0f));
        CHECK((b[1].token == 15043 && b[1].bias == -INFINITY));  // false: never
    }
    for (const char* empty : {R"("logit_bias":{})", R"("logit_bias":[])"}) {
        for (const ParsedRequest& p : parsed_everywhere(empty, limits)) CHECK(p.request.sampling.logit_bias.empty());
    }
    refused_everywhere(R"("logit_bias":{"32000":1})", "logit_bias", limits, "outside the vocabulary");
    refused_everywhere(R"("logit_bias":[[32000,1]])", "logit_bias", limits, "outside the vocabulary");
    refused_everywhere(R"("logit_bias":[[-1,1]])", "logit_bias", limits, "outside the vocabulary");
    refused_everywhere(R"("logit_bias":{"1":101})", "logit_bias", limits, "[-100, 100]");
    refused_everywhere(R"("logit_bias":{"1":-100.5})", "logit_bias", limits);
    refused_everywhere(R"("logit_bias":{"1":"5"})", "logit_bias", limits);
    refused_everywhere(R"("logit_bias":{"1":true})", "logit_bias", limits);
    refused_everywhere(R"("logit_bias":{"hello":1})", "logit_bias", limits, "token ids");
    refused_everywhere(R"("logit_bias":[["hello",1]])", "logit_bias", limits, "token strings");
    refused_everywhere(R"("logit_bias":[[1]])", "logit_bias", limits);
    refused_everywhere(R"("logit_bias":[1,2])", "logit_bias", limits);
    refused_everywhere(R"("logit_bias":"x")", "logit_bias", limits);
    std::string many = R"("logit_bias":{)";
    for (size_t i = 0; i <= kMaxLogitBias; ++i) {
        if (i) many += ',';
        many += '"';
        many += std::to_string(i);
        many += "\":1";
    }
    refused_everywhere(many + "}", "logit_bias", limits, "at most 300");
}

// ------------------------------------------------- logprobs and seeds ---

TEST_CASE("parse_generation: logprobs as each API states it (completions' integer, chat's and the WebSocket's pair), and past 20 or "
          "malformed is a 400 naming the field",
          "[net][api][logprobs]") {
    const auto completion = [](const std::string& params) {
        return parse_generation(parse_json(R"({"prompt":"x")" + params + "}"), ApiKind::Completion, kLimits, plain_transcript, nullptr);
    };
    const auto chat = [](const std::string& params) {
        return parse_generation(parse_json(R"({"messages":[{"role":"user","content":"x"}])" + params + "}"), ApiKind::Chat, kLimits,
                                plain_transcript, nullptr);
    };
    CHECK(completion("").request.sampling.logprobs == -1);
    CHECK(completion(R"(,"logprobs":null)").request.sampling.logprobs == -1);
    CHECK(completion(R"(,"logprobs":false)").request.sampling.logprobs == -1);
    CHECK(completion(R"(,"logprobs":0)").request.sampling.logprobs == 0);
    CHECK(completion(R"(,"logprobs":5)").request.sampling.logprobs == 5);
    CHECK(completion(R"(,"logprobs":20)").request.sampling.logprobs == 20);
    CHECK(chat("").request.sampling.logprobs == -1);
    CHECK(chat(R"(,"logprobs":false,"top_logprobs":0)").request.sampling.logprobs == -1);
    CHECK(chat(R"(,"logprobs":true)").request.sampling.logprobs == 0);
    CHECK(chat(R"(,"logprobs":true,"top_logprobs":20)").request.sampling.logprobs == 20);
    const WsAction a = ws(R"({"type":"generate","id":"l","prompt":"x","logprobs":true,"top_logprobs":3})");
    REQUIRE(a.kind == WsAction::Kind::Generate);
    CHECK(a.parsed.request.sampling.logprobs == 3);

    struct Bad {
        std::string body;
        ApiKind kind;
        std::string field;
    };
    const std::vector<Bad> bad = {
        {R"({"prompt":"x","logprobs":21})", ApiKind::Completion, "logprobs"},
        {R"({"prompt":"x","logprobs":-1})", ApiKind::Completion, "logprobs"},
        {R"({"prompt":"x","logprobs":true})", ApiKind::Completion, "logprobs"},
        {R"({"prompt":"x","logprobs":2.5})", ApiKind::Completion, "logprobs"},
        {R"({"prompt":"x","top_logprobs":2})", ApiKind::Completion, "top_logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", ApiKind::Chat, "top_logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":-1})", ApiKind::Chat, "top_logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", ApiKind::Chat, "top_logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"logprobs":false,"top_logprobs":2})", ApiKind::Chat, "top_logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"logprobs":3})", ApiKind::Chat, "logprobs"},
    };
    for (const Bad& b : bad) {
        INFO(b.body);
        const ApiError e = http_error(b.body, b.kind);
        CHECK(e.status == 400);
        CHECK(e.param == b.field);
        CHECK_THAT(e.message, Catch::Contains(b.field));
    }
    const WsAction w = ws(R"({"type":"generate","id":"l","prompt":"x","logprobs":true,"top_logprobs":50})");
    REQUIRE(w.kind == WsAction::Kind::Reply);
    CHECK_THAT(w.frame, Catch::Contains("top_logprobs"));
    // llama-server's n_probs is still refused, not read as something else.
    CHECK(http_error(R"({"prompt":"x","n_probs":3})", ApiKind::Completion).param == "n_probs");
}

TEST_CASE("parse_generation: a seed asks for coupled sampling (the same text whatever the speculation), and no seed keeps the stream",
          "[net][api][seed]") {
    for (const ParsedRequest& p : parsed_everywhere(R"("seed":42)")) {
        CHECK(p.request.sampling.coupled);
        CHECK(p.request.sampling.seed == 42);
    }
    for (const ParsedRequest& p : parsed_everywhere(R"("seed":null)")) {
        CHECK_FALSE(p.request.sampling.coupled);
        CHECK(p.request.sampling.seed == kRandomSeed);
    }
    refused_everywhere(R"("seed":-3)", "seed");
    refused_everywhere(R"("seed":"abc")", "seed");
}

// ------------------------------------------------ constrained output ---

namespace {
// Whether `text` is a complete match of the request's grammar.
bool grammar_matches(const ParsedRequest& p, const std::string& text) {
    GrammarMatcher m(Grammar::parse(p.request.sampling.grammar));
    return m.accept_bytes(text) && m.can_end();
}
}  // namespace

TEST_CASE("parse_generation: response_format json_object and json_schema, grammar and json_schema are honoured everywhere", "[net][api]") {
    for (const ParsedRequest& p : parsed_everywhere(R"("response_format":{"type":"json_object"})")) {
        CHECK(p.request.sampling.grammar == Grammar::json_object_text());
        CHECK_FALSE(p.request.sampling.plain_argmax());
    }
    const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
                               R"("required":["name","age"],"additionalProperties":false})";
    for (const std::string& params : {R"("response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":)" + schema + "}}",
                                      R"("json_schema":)" + schema, R"("response_format":{"type":"json_object","schema":)" + schema + "}"}) {
        INFO(params);
        for (const ParsedRequest& p : parsed_everywhere(params)) {
            CHECK(grammar_matches(p, R"({"name": "Lily", "age": 3})"));
            CHECK_FALSE(grammar_matches(p, R"({"name": "Lily"})"));
            CHECK_FALSE(grammar_matches(p, R"({"name": "Lily", "age": 3, "x": 1})"));
        }
    }
    for (const ParsedRequest& p : parsed_everywhere(R"("grammar":"root ::= \"yes\" | \"no\"")")) {
        CHECK(p.request.sampling.grammar == R"(root ::= "yes" | "no")");
        CHECK(grammar_matches(p, "no"));
        CHECK_FALSE(grammar_matches(p, "maybe"));
    }
    // Their off values: no grammar.
    for (const char* off : {R"("response_format":{"type":"text"})", R"("grammar":"")", R"("json_schema":{})", R"("response_format":null)",
                            R"("grammar":null,"json_schema":null)"}) {
        for (const ParsedRequest& p : parsed_everywhere(off)) CHECK(p.request.sampling.grammar.empty());
    }
    // Without the body's text a schema's properties come in nlohmann's sorted order ("age" before "name").
    const ParsedRequest sorted_order =
        parse_generation(parse_json(R"({"prompt":"x","json_schema":)" + schema + "}"), ApiKind::Completion, kLimits, plain_transcript, nullptr);
    CHECK(grammar_matches(sorted_order, R"({"age": 3, "name": "Lily"})"));
    // json_schema without a schema: any object, as json_object.
    for (const ParsedRequest& p : parsed_everywhere(R"("response_format":{"type":"json_schema","json_schema":{"name":"any"}})"))
        CHECK(p.request.sampling.grammar == Grammar::json_object_text());
}

TEST_CASE("parse_generation: a bad grammar or schema is a 400 naming its field with the parser's one-line message", "[net][api]") {
    refused_everywhere(R"("grammar":"root ::= \"a")", "grammar", kLimits, "line 1, column");
    refused_everywhere(R"("grammar":"root ::= undefined-rule")", "grammar", kLimits, "undefined-rule");
    refused_everywhere(R"("grammar":"start ::= \"a\"")", "grammar", kLimits, "no root rule");
    refused_everywhere(R"("grammar":42)", "grammar", kLimits, "GBNF");
    refused_everywhere(R"("json_schema":{"type":"string","pattern":"^a"})", "json_schema", kLimits, "unsupported keyword \"pattern\"");
    refused_everywhere(R"("json_schema":{"type":"strin"})", "json_schema", kLimits, "unknown type");
    refused_everywhere(R"("json_schema":"x")", "json_schema", kLimits, "JSON schema object");
    refused_everywhere(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"properties":{"a":{"minimum":1}}}}})",
                       "response_format", kLimits, "response_format.json_schema.schema: at /properties/a: unsupported keyword \"minimum\"");
    refused_everywhere(R"("response_format":{"type":"json_schema"})", "response_format", kLimits, "needs a json_schema object");
    refused_everywhere(R"("response_format":{"type":"xml"})", "response_format", kLimits, "not supported");
    refused_everywhere(R"("response_format":"json_object")", "response_format", kLimits, "must be an object");
    refused_everywhere(R"("response_format":{})", "response_format", kLimits, "type");
    refused_everywhere(R"("response_format":{"type":"json_object"},"grammar":"root ::= \"a\"")", "grammar", kLimits, "give one of");
    refused_everywhere(R"("grammar":"root ::= \"a\"","json_schema":{"type":"integer"})", "json_schema", kLimits, "give one of");
    std::string big = R"("grammar":"root ::= \")" + std::string(kMaxGrammarBytes, 'a') + R"(\"")";
    refused_everywhere(big, "grammar", kLimits, "at most");
    for (const char* params : {R"("grammar":"root ::= (")", R"("json_schema":{"type":"array","minItems":"x"})"}) {
        const ApiError e = http_error(std::string(R"({"prompt":"x",)") + params + "}", ApiKind::Completion);
        CHECK(e.message.find('\n') == std::string::npos);  // one line
    }
}
