// llama-server's endpoints through the router (net/llama_server_routes.h),
// without sockets: /tokenize and /detokenize agree with the model's own
// tokenizer (itself checked against llama.cpp in tests/engine), /props
// shows the settings a request gets, and what specd does not serve answers
// 501 or 405 naming the endpoint.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "net/routes.h"
#include "support/models.h"

using namespace specd;
using nlohmann::json;

namespace {

RuntimeConfig config() {
    RuntimeConfig c;
    c.target_model = test::model_path("stories15M-q8_0.gguf");
    c.threads_target = 1;
    c.max_sequences = 4;
    c.memory_budget_bytes = int64_t{1} << 30;
    return c;
}

struct Call {
    int status;
    json body;
};

Call call(Runtime& rt, const net::ServerOptions& options, net::RouteRequest::Method method, const char* name,
          const std::string& path, const std::string& body = "") {
    net::RouteRequest req;
    req.method = method;
    req.method_name = name;
    req.target = path;
    req.body = body;
    const net::RouteContext ctx{rt, options};
    const net::RouteResult r = net::handle_request(req, ctx);
    REQUIRE(r.kind == net::RouteResult::Kind::Respond);
    CHECK(r.content_type == "application/json");
    return {r.status, json::parse(r.body)};
}

Call post(Runtime& rt, const net::ServerOptions& o, const std::string& path, const std::string& body) {
    return call(rt, o, net::RouteRequest::Method::post, "POST", path, body);
}

}  // namespace

TEST_CASE("llama-server endpoints: /tokenize and /detokenize round-trip text through the model's tokenizer", "[net][llama_server]") {
    REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
    StandaloneRuntime host(config());
    Runtime& rt = host.runtime();
    const net::ServerOptions options;
    const Tokenizer& tok = rt.tokenizer();
    const std::string text = "Once upon a time, Lily found a shiny stone. \xC3\xA9t\xC3\xA9 \xE2\x9C\x93";

    const Call plain = post(rt, options, "/tokenize", json{{"content", text}}.dump());
    REQUIRE(plain.status == 200);
    const std::vector<int32_t> expected = tok.encode(text, false, true);
    CHECK(plain.body["tokens"].get<std::vector<int32_t>>() == expected);

    // add_special: the BOS the model asks for, as llama-server adds it.
    const Call special = post(rt, options, "/tokenize", json{{"content", text}, {"add_special", true}}.dump());
    REQUIRE(special.status == 200);
    CHECK(special.body["tokens"][0] == tok.bos_id());
    CHECK(special.body["tokens"].size() == expected.size() + 1);

    // with_pieces: each id with its text; the pieces concatenate to the text.
    const Call pieces = post(rt, options, "/tokenize", json{{"content", text}, {"with_pieces", true}}.dump());
    REQUIRE(pieces.status == 200);
    std::string joined;
    for (const json& p : pieces.body["tokens"]) {
        REQUIRE(p.contains("id"));
        if (p["piece"].is_string()) joined += p["piece"].get<std::string>();
        else for (const json& b : p["piece"]) joined += static_cast<char>(b.get<int>());  // a byte token
    }
    CHECK(joined.find("Once upon a time") != std::string::npos);

    const Call back = post(rt, options, "/detokenize", json{{"tokens", expected}}.dump());
    REQUIRE(back.status == 200);
    const std::string content = back.body["content"];
    // SentencePiece writes the space prefix it added to the first word.
    CHECK((content == text || content == " " + text));

    // Special tokens: parsed from text by default, rendered back as text.
    const Call bos_text = post(rt, options, "/tokenize", json{{"content", "<s>Hi"}}.dump());
    REQUIRE(bos_text.status == 200);
    CHECK(bos_text.body["tokens"][0] == tok.bos_id());
    const Call bos_literal = post(rt, options, "/tokenize", json{{"content", "<s>Hi"}, {"parse_special", false}}.dump());
    CHECK(bos_literal.body["tokens"][0] != tok.bos_id());
}

TEST_CASE("llama-server endpoints: bad input gets a 400 naming the field", "[net][llama_server]") {
    REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
    StandaloneRuntime host(config());
    Runtime& rt = host.runtime();
    const net::ServerOptions options;
    struct Case {
        const char* path;
        std::string body;
        const char* param;
        const char* says;
    };
    const Case cases[] = {
        {"/tokenize", "{}", "content", "content must be a string"},
        {"/tokenize", R"({"content": 5})", "content", "content must be a string"},
        {"/tokenize", R"({"content": "x", "add_special": "yes"})", "add_special", "true or false"},
        {"/tokenize", "[1,2]", "", "JSON object"},
        {"/tokenize", "{\"content\": \"x\"", "", "JSON"},
        {"/detokenize", R"({"tokens": "1 2"})", "tokens", "array of token ids"},
        {"/detokenize", R"({"tokens": [1, 32000]})", "tokens", "32000, not a token id of this model (0 to 31999)"},
        {"/detokenize", R"({"tokens": [1, -1]})", "tokens", "-1, not a token id"},
        {"/detokenize", R"({"tokens": [1.5]})", "tokens", "1.5, not a token id"},
    };
    for (const Case& c : cases) {
        INFO(c.path << " " << c.body);
        const Call r = post(rt, options, c.path, c.body);
        CHECK(r.status == 400);
        const std::string message = r.body["error"]["message"];
        CHECK_THAT(message, Catch::Contains(c.says));
        if (*c.param) CHECK(r.body["error"]["param"] == c.param);
    }
}

TEST_CASE("llama-server endpoints: /props shows the defaults a request gets, and /slots and POST /props answer 501",
          "[net][llama_server]") {
    REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
    StandaloneRuntime host(config());
    Runtime& rt = host.runtime();
    net::ServerOptions options;
    options.limits.default_max_tokens = 77;
    const Call props = call(rt, options, net::RouteRequest::Method::get, "GET", "/props");
    REQUIRE(props.status == 200);
    const json& settings = props.body["default_generation_settings"];
    CHECK(settings["n_ctx"] == rt.n_ctx());
    CHECK(settings["params"]["n_predict"] == 77);
    CHECK(settings["params"]["temperature"].get<double>() == Approx(SamplingParams{}.temperature));
    CHECK(settings["params"]["top_k"] == SamplingParams{}.top_k);
    CHECK(settings["params"]["presence_penalty"].get<double>() == 0.0);
    CHECK(settings["params"]["frequency_penalty"].get<double>() == 0.0);
    CHECK(settings["params"]["logit_bias"] == json::array());
    CHECK(settings["params"]["grammar"] == "");  // no grammar unless a request gives one
    CHECK(props.body["total_slots"] == 4);
    CHECK(props.body["model_path"] == test::model_path("stories15M-q8_0.gguf"));
    CHECK(props.body["chat_template"] == rt.chat_template_text());

    CHECK(post(rt, options, "/props", "{}").status == 501);
    const Call slots = call(rt, options, net::RouteRequest::Method::get, "GET", "/slots");
    CHECK(slots.status == 501);
    CHECK_THAT(slots.body["error"]["message"].get<std::string>(), Catch::Contains("/slots"));
    CHECK(call(rt, options, net::RouteRequest::Method::get, "GET", "/tokenize").status == 405);
    CHECK(call(rt, options, net::RouteRequest::Method::post, "POST", "/nothing", "{}").status == 404);
}

namespace {

// POST /completion through the router: the parsed request, or the error.
net::RouteResult completion(Runtime& rt, const net::ServerOptions& options, const std::string& body) {
    net::RouteRequest req;
    req.method = net::RouteRequest::Method::post;
    req.method_name = "POST";
    req.target = "/completion";
    req.body = body;
    return net::handle_request(req, net::RouteContext{rt, options});
}

}  // namespace

TEST_CASE("llama-server /completion: its fields map onto the request, its off values are accepted, what specd would not honour "
          "is a 400 naming the field",
          "[net][llama_server]") {
    REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
    StandaloneRuntime host(config());
    Runtime& rt = host.runtime();
    net::ServerOptions options;
    options.limits.max_tokens_limit = 500;

    const net::RouteResult plain = completion(rt, options, R"({"prompt": "Hello", "n_predict": -1, "seed": -1, "temperature": -1,
        "top_k": -5, "cache_prompt": true, "id_slot": -1, "n_keep": 4, "dry_multiplier": 0, "mirostat": 0, "ignore_eos": true})");
    REQUIRE(plain.kind == net::RouteResult::Kind::Generate);
    REQUIRE(plain.llama.has_value());
    CHECK(plain.llama->prompt == "Hello");
    CHECK_FALSE(plain.llama->return_tokens);
    const generate_request& r = plain.parsed.request;
    CHECK(r.max_tokens == 500);  // -1: until the end, bounded by max_tokens_limit
    CHECK(r.sampling.temperature == 0.0f);
    CHECK(r.sampling.top_k == 0);
    CHECK(r.sampling.seed == SamplingParams{}.seed);
    CHECK_FALSE(r.stop_at_eos);
    CHECK(plain.llama->generation_settings["ignore_eos"] == true);

    // samplers: the ones left out are off; the order must be llama.cpp's.
    const net::RouteResult chain = completion(rt, options, R"({"prompt": [1, 15043], "n_predict": 8, "samplers": ["top_k", "temperature"]})");
    REQUIRE(chain.kind == net::RouteResult::Kind::Generate);
    CHECK(chain.parsed.request.prompt_tokens == std::vector<int32_t>{1, 15043});
    CHECK(chain.parsed.request.max_tokens == 8);
    CHECK(chain.parsed.request.sampling.top_k == SamplingParams{}.top_k);
    CHECK(chain.parsed.request.sampling.top_p == 1.0f);
    CHECK(chain.parsed.request.sampling.min_p == 0.0f);
    CHECK(chain.parsed.request.sampling.repeat_penalty == 1.0f);

    const std::pair<const char*, const char*> refused[] = {
        {R"({"prompt": "x", "typical_p": 0.5})", "typical_p"},
        {R"({"prompt": "x", "mirostat": 2})", "mirostat"},
        {R"({"prompt": "x", "dry_multiplier": 0.8})", "dry_multiplier"},
        {R"({"prompt": "x", "xtc_probability": 0.5})", "xtc_probability"},
        {R"({"prompt": "x", "dynatemp_range": 0.5})", "dynatemp_range"},
        {R"({"prompt": "x", "n_probs": 3})", "n_probs"},
        {R"({"prompt": "x", "n_cmpl": 2})", "n_cmpl"},
        {R"({"prompt": "x", "id_slot": 2})", "id_slot"},
        {R"({"prompt": "x", "n_predict": 0})", "n_predict"},
        {R"({"prompt": "x", "n_predict": 501})", "n_predict"},
        {R"({"prompt": ["a", 15043]})", "prompt"},
        {R"({"prompt": [[1, 2], [3]]})", "prompt"},
        {R"({"prompt": "x", "samplers": ["temperature", "top_k"]})", "samplers"},
        {R"({"prompt": "x", "samplers": ["mirostat"]})", "samplers"},
        {R"({"prompt": "x", "max_tokens": 5})", "max_tokens"},
        {R"({"prompt": "x", "ignore_eos": "yes"})", "ignore_eos"},
        {R"({"prompt": "x", "lora": [{"id": 0, "scale": 1}]})", "lora"},
        {R"({"n_predict": 4})", "prompt"},
    };
    for (const auto& [body, param] : refused) {
        INFO(body);
        const net::RouteResult bad = completion(rt, options, body);
        REQUIRE(bad.kind == net::RouteResult::Kind::Respond);
        CHECK(bad.status == 400);
        CHECK(json::parse(bad.body)["error"]["param"] == param);
    }
}
