// The network front end with a C++ Beast client over loopback: health,
// models, a completion (equal to the runtime's own greedy output), SSE
// framing, a WebSocket generation, errors with their status codes, and
// draining (/health turns 503, new work is refused), and slow readers
// (nothing lost; closed with 1013 past the send-queue limit).
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "net/server.h"
#include "support/http_client.h"
#include "support/models.h"

using namespace specd;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

using Reply = test::HttpReply;

Reply call(uint16_t port, http::verb method, const std::string& target, const std::string& body = "", const std::string& key = "") {
    return test::http_call(port, method, target, body, key);
}

RuntimeConfig config() {
    RuntimeConfig c;
    c.target_model = test::model_path("stories15M-f32.gguf");
    c.draft_model = test::model_path("stories15M-q8_0.gguf");
    c.threads_target = 2;
    c.max_sequences = 8;
    c.memory_budget_bytes = int64_t{1} << 30;
    return c;
}

}  // namespace

TEST_CASE("HTTP and WebSocket on one port answer a real Beast client, and draining turns /health to 503", "[net]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::ServerOptions opt;
    opt.port = 0;
    opt.api_key = "k";
    net::Server server(host.runtime(), opt);
    const uint16_t port = server.start();

    CHECK(call(port, http::verb::get, "/health").status == 200);
    CHECK(call(port, http::verb::get, "/v1/models").status == 401);
    const Reply models = call(port, http::verb::get, "/v1/models", "", "k");
    REQUIRE(models.status == 200);
    CHECK(json::parse(models.body)["data"][0]["id"] == "stories15M-f32");

    // A greedy completion equals the runtime's own output for the prompt.
    generate_request direct;
    direct.prompt = "Once upon a time";
    direct.max_tokens = 24;
    direct.sampling.temperature = 0.0f;
    const GenerateResult expected = host.runtime().generate(direct);
    REQUIRE(expected.ok);
    const Reply completion = call(port, http::verb::post, "/v1/completions",
                                  R"({"prompt":"Once upon a time","max_tokens":24,"temperature":0})", "k");
    REQUIRE(completion.status == 200);
    const json cj = json::parse(completion.body);
    CHECK(cj["choices"][0]["text"] == expected.text);
    CHECK(cj["usage"]["completion_tokens"] == 24);
    CHECK(cj["choices"][0]["finish_reason"] == "length");

    // SSE: data: lines ending in [DONE], concatenating to the same text.
    const Reply sse = call(port, http::verb::post, "/v1/completions",
                           R"({"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true})", "k");
    REQUIRE(sse.status == 200);
    CHECK(sse.content_type == "text/event-stream");
    std::string text;
    bool done = false;
    for (const std::string& data : test::sse_data(sse.body)) {
        if (data == "[DONE]") {
            done = true;
            break;
        }
        text += json::parse(data)["choices"][0]["text"].get<std::string>();
    }
    CHECK(done);
    CHECK(text == expected.text);

    // Errors keep OpenAI's shape and status codes.
    const Reply bad = call(port, http::verb::post, "/v1/completions", R"({"prompt":"x","top_p":3})", "k");
    CHECK(bad.status == 400);
    CHECK(json::parse(bad.body)["error"]["param"] == "top_p");
    CHECK(call(port, http::verb::post, "/v1/chat/completions", R"({"messages":[{"role":"robot","content":"x"}]})", "k").status == 400);
    CHECK(call(port, http::verb::delete_, "/v1/models", "", "k").status == 405);

    // WebSocket: tokens then done, the same text.
    {
        asio::io_context ioc;
        websocket::stream<tcp::socket> ws(ioc);
        ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        ws.handshake("127.0.0.1", "/v1/ws?api_key=k");
        ws.write(asio::buffer(std::string(R"({"type":"generate","id":"w","prompt":"Once upon a time","max_tokens":24,"temperature":0})")));
        std::string ws_text;
        json last;
        for (;;) {
            beast::flat_buffer buf;
            ws.read(buf);
            last = json::parse(beast::buffers_to_string(buf.data()));
            if (last["type"] != "token") break;
            ws_text += last["text"].get<std::string>();
        }
        CHECK(last["type"] == "done");
        CHECK(last["usage"]["completion_tokens"] == 24);
        CHECK(ws_text == expected.text);
        ws.close(websocket::close_code::normal);
    }

    server.drain();
    const Reply draining = call(port, http::verb::get, "/health");
    CHECK(draining.status == 503);
    CHECK(json::parse(draining.body)["status"] == "draining");
    const Reply refused = call(port, http::verb::post, "/v1/completions", R"({"prompt":"x"})", "k");
    CHECK(refused.status == 503);
    CHECK(json::parse(refused.body)["error"]["code"] == "draining");
    server.stop();
    // Every generation's blocks come back (releases travel through the actors).
    runtime_stats s;
    for (int i = 0; i < 200; ++i) {
        s = host.runtime().stats();
        if (s.kv_target_free == s.kv_target_blocks) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(s.kv_target_free == s.kv_target_blocks);
}

namespace {

// A WebSocket client with a 4 KiB receive buffer (so the server's writes
// back up as soon as it stops reading) that starts `n` greedy generations
// of `max_tokens` tokens without speculation (one token per event).
void start_generations(websocket::stream<tcp::socket>& ws, uint16_t port, int n, int max_tokens) {
    ws.next_layer().open(tcp::v4());
    ws.next_layer().set_option(asio::socket_base::receive_buffer_size(4096));
    ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws.handshake("127.0.0.1", "/v1/ws");
    for (int i = 0; i < n; ++i) {
        const json g = {{"type", "generate"},       {"id", "s" + std::to_string(i)},
                        {"prompt", "Once upon a time"}, {"max_tokens", max_tokens},
                        {"temperature", 0},         {"speculative", {{"enabled", false}}}};
        ws.write(asio::buffer(g.dump()));
    }
}

// Waits until the runtime has taken a client's generations and then ended
// them all (finished or cancelled): with nobody reading, every frame they
// made is by then in the kernel's buffers or in the server's send queue,
// however slowly the machine decodes. A fixed sleep was not enough on a
// loaded machine: the few frames made in it fitted the kernel's buffers, the
// server's queue never backed up and nothing was coalesced.
bool wait_until_generations_end(Runtime& rt) {
    using namespace std::chrono;
    const auto busy = [&rt] {
        const runtime_stats s = rt.stats();
        return s.running + s.waiting > 0;
    };
    auto deadline = steady_clock::now() + seconds(30);
    while (!busy()) {
        if (steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(milliseconds(2));
    }
    deadline = steady_clock::now() + seconds(300);
    while (busy()) {
        if (steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(milliseconds(10));
    }
    return true;
}

}  // namespace

TEST_CASE("a WebSocket client that stops reading loses no token, and one whose send queue overflows is closed with 1013 and its blocks come back",
          "[net]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    constexpr int kGenerations = 8, kTokens = 240;  // 8 x 240 token frames: far more than the socket buffers hold
    generate_request direct;
    direct.prompt = "Once upon a time";
    direct.max_tokens = kTokens;
    direct.sampling.temperature = 0.0f;
    direct.speculative = 0;
    const GenerateResult expected = host.runtime().generate(direct);
    REQUIRE(expected.ok);

    SECTION("a slow reader gets every generation whole once it reads") {
        net::ServerOptions opt;
        opt.port = 0;
        opt.socket_send_buffer = 4096;  // so the frames back up in the server's queue, not the kernel's
        net::Server server(host.runtime(), opt);
        const uint16_t port = server.start();
        asio::io_context ioc;
        websocket::stream<tcp::socket> ws(ioc);
        start_generations(ws, port, kGenerations, kTokens);
        REQUIRE(wait_until_generations_end(host.runtime()));  // the generations run to their end; nobody reads
        std::map<std::string, std::string> text;
        std::map<std::string, int> tokens;
        int done = 0, frames = 0;
        while (done < kGenerations) {
            beast::flat_buffer buf;
            ws.read(buf);
            ++frames;
            const json f = json::parse(beast::buffers_to_string(buf.data()));
            REQUIRE(f["type"] != "error");
            const std::string id = f["id"];
            if (f["type"] == "token") {
                text[id] += f["text"].get<std::string>();
                tokens[id] += static_cast<int>(f["token_ids"].size());
                // A merged frame still gives each token its own text.
                REQUIRE(f["token_texts"].size() == f["token_ids"].size());
                std::string joined;
                for (const json& t : f["token_texts"]) joined += t.get<std::string>();
                CHECK(joined == f["text"]);
            } else if (f["type"] == "done") {
                ++done;
                CHECK(f["usage"]["completion_tokens"] == kTokens);
            }
        }
        for (int i = 0; i < kGenerations; ++i) {
            const std::string id = "s" + std::to_string(i);
            CHECK(tokens[id] == kTokens);
            CHECK(text[id] == expected.text);
        }
        // Coalesced frames carry several tokens: fewer frames than tokens.
        CHECK(frames < kGenerations * (kTokens + 1));
        ws.close(websocket::close_code::normal);
        server.stop();
    }

    SECTION("past max_queued_frames the reader is closed with 1013, its generations are cancelled, others are served") {
        net::ServerOptions opt;
        opt.port = 0;
        opt.max_queued_frames = 16;  // below the coalescing threshold: nothing merges, the queue overflows
        opt.socket_send_buffer = 4096;
        net::Server server(host.runtime(), opt);
        const uint16_t port = server.start();
        asio::io_context ioc;
        websocket::stream<tcp::socket> ws(ioc);
        start_generations(ws, port, kGenerations, kTokens);
        REQUIRE(wait_until_generations_end(host.runtime()));  // overflowed and cancelled while nobody reads
        beast::error_code ec;
        int frames = 0;
        for (;;) {
            beast::flat_buffer buf;
            ws.read(buf, ec);
            if (ec) break;
            ++frames;
        }
        CHECK(ec == websocket::error::closed);
        CHECK(ws.reason().code == websocket::close_code::try_again_later);
        CHECK(std::string(ws.reason().reason.c_str()).find("reads too slowly") != std::string::npos);
        CHECK(frames < kGenerations * (kTokens + 1));
        // The cancelled generations give their blocks back, and the server
        // goes on serving other clients.
        runtime_stats s;
        for (int i = 0; i < 500; ++i) {
            s = host.runtime().stats();
            if (s.kv_target_free == s.kv_target_blocks && s.running == 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        CHECK(s.kv_target_free == s.kv_target_blocks);
        const Reply after = call(port, http::verb::post, "/v1/completions",
                                 R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
        CHECK(after.status == 200);
        server.stop();
    }
}

TEST_CASE("llama-server's POST /completion over a real socket: its shapes, the same greedy text as /v1/completions, streamed alike",
          "[net][llama_server]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::ServerOptions opt;
    opt.port = 0;
    net::Server server(host.runtime(), opt);
    const uint16_t port = server.start();

    const Reply openai = call(port, http::verb::post, "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0})");
    REQUIRE(openai.status == 200);
    const std::string expected = json::parse(openai.body)["choices"][0]["text"].get<std::string>();

    // Whole answer: llama-server's fields, n_predict reached ("limit").
    const Reply whole = call(port, http::verb::post, "/completion",
                             R"({"prompt":"Once upon a time","n_predict":20,"temperature":0,"return_tokens":true,"cache_prompt":true,"id_slot":-1})");
    REQUIRE(whole.status == 200);
    CHECK(whole.content_type == "application/json");
    const json w = json::parse(whole.body);
    CHECK(w["content"] == expected);
    CHECK(w["stop"] == true);
    CHECK(w["stop_type"] == "limit");
    CHECK(w["stopping_word"] == "");
    CHECK(w["tokens_predicted"] == 20);
    CHECK(w["tokens"].size() == 20);
    CHECK(w["tokens_evaluated"].get<int>() > 1);
    CHECK(w["prompt"] == "Once upon a time");
    CHECK(w["truncated"] == false);
    CHECK(w["generation_settings"]["n_predict"] == 20);
    CHECK(w["timings"]["predicted_n"] == 20);
    CHECK(w["model"] == "stories15M-f32");

    // A stop word inside the greedy text: the content ends before it.
    const size_t cut = expected.find(' ', 8);
    REQUIRE(cut != std::string::npos);
    const std::string word = expected.substr(cut, 3);
    const Reply stopped = call(port, http::verb::post, "/completion",
                               json{{"prompt", "Once upon a time"}, {"n_predict", 20}, {"temperature", 0}, {"stop", {word}}}.dump());
    REQUIRE(stopped.status == 200);
    const json s = json::parse(stopped.body);
    CHECK(s["stop_type"] == "word");
    CHECK(s["stopping_word"] == word);
    CHECK(s["content"] == expected.substr(0, expected.find(word)));
    CHECK(s["tokens"] == json::array());  // return_tokens not asked

    // Streamed: one event per token event with its ids, then the whole
    // answer with stop true; no [DONE].
    const Reply sse = call(port, http::verb::post, "/completion",
                           R"({"prompt":"Once upon a time","n_predict":20,"temperature":0,"stream":true})");
    REQUIRE(sse.status == 200);
    CHECK(sse.content_type == "text/event-stream");
    std::string text;
    size_t ids = 0;
    json last;
    for (const std::string& data : test::sse_data(sse.body)) {
        REQUIRE(data != "[DONE]");
        last = json::parse(data);
        text += last["content"].get<std::string>();
        ids += last["tokens"].size();
        if (last["stop"] == true) break;
    }
    CHECK(text == expected);
    CHECK(ids == 20);
    CHECK(last["stop"] == true);
    CHECK(last["stop_type"] == "limit");
    CHECK(last["tokens_predicted"] == 20);

    // ignore_eos is honoured: EOS (id 2) pushed to the top ends the text at
    // once, and with ignore_eos it is never sampled.
    const Reply ends = call(port, http::verb::post, "/completion", R"({"prompt":"The end.","n_predict":12,"temperature":0,"logit_bias":[[2, 50]]})");
    REQUIRE(ends.status == 200);
    CHECK(json::parse(ends.body)["stop_type"] == "eos");
    CHECK(json::parse(ends.body)["content"] == "");
    const Reply on = call(port, http::verb::post, "/completion",
                          R"({"prompt":"The end.","n_predict":12,"temperature":0,"logit_bias":[[2, 50]],"ignore_eos":true})");
    REQUIRE(on.status == 200);
    CHECK(json::parse(on.body)["stop_type"] == "limit");
    CHECK(json::parse(on.body)["tokens_predicted"] == 12);

    // Refused with a 400 naming the field.
    const Reply typical = call(port, http::verb::post, "/completion", R"({"prompt":"x","typical_p":0.5})");
    CHECK(typical.status == 400);
    CHECK(json::parse(typical.body)["error"]["param"] == "typical_p");
    CHECK(call(port, http::verb::get, "/completion").status == 405);
}

TEST_CASE("prefix cache over a real socket: a chat's next turn reports its cached prompt tokens and answers as with cache_prompt false",
          "[net][prefix]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::ServerOptions opt;
    opt.port = 0;
    net::Server server(host.runtime(), opt);
    const uint16_t port = server.start();

    json messages = json::array({{{"role", "user"}, {"content", "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun."}}});
    const auto chat = [&](bool cache_prompt) {
        const Reply r = call(port, http::verb::post, "/v1/chat/completions",
                             json{{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}, {"cache_prompt", cache_prompt}}.dump());
        REQUIRE(r.status == 200);
        return json::parse(r.body);
    };
    const json first = chat(true);
    CHECK(first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
    messages.push_back({{"role", "user"}, {"content", "One day she found a ball."}});
    const json second = chat(true);
    const int cached = second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    // stories15M has no chat template: each turn's prompt is the last one,
    // its reply and the new text, so all but the last partial block is cached.
    CHECK(cached >= first["usage"]["prompt_tokens"].get<int>() - 16);
    CHECK(cached % 16 == 0);
    CHECK(cached < second["usage"]["prompt_tokens"].get<int>());
    const json uncached = chat(false);
    CHECK(uncached["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    CHECK(uncached["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]);

    // llama-server's counters on /completion; a non-boolean is a 400 naming it.
    const Reply again = call(port, http::verb::post, "/completion", R"({"prompt":"Once upon a time, there was a little girl named Lily. She loved to play","n_predict":4,"temperature":0})");
    REQUIRE(again.status == 200);
    const json a = json::parse(again.body);
    CHECK(a["timings"]["cache_n"].get<int>() > 0);
    CHECK(a["tokens_cached"] == a["timings"]["cache_n"]);
    CHECK(a["timings"]["prompt_n"].get<int>() + a["timings"]["cache_n"].get<int>() == a["tokens_evaluated"].get<int>());
    const Reply bad = call(port, http::verb::post, "/v1/completions", R"({"prompt":"x","cache_prompt":"yes"})");
    CHECK(bad.status == 400);
    CHECK(bad.body.find("cache_prompt") != std::string::npos);
}

namespace {

// The JSON objects of an SSE body's "data:" lines, up to [DONE] (which sets `done`).
std::vector<json> sse_objects(const std::string& body, bool& done) {
    std::vector<json> out;
    done = false;
    for (const std::string& data : test::sse_data(body)) {
        if (data == "[DONE]") {
            done = true;
            break;
        }
        out.push_back(json::parse(data));
    }
    return out;
}

}  // namespace

TEST_CASE("n = 3 over a real socket: three choices, greedy each equal to n = 1, seeded each its own and reproducible, "
          "the prompt computed once, streamed as indexed chunks with one DONE line", "[net][n]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::ServerOptions opt;
    opt.port = 0;
    net::Server server(host.runtime(), opt);
    const uint16_t port = server.start();
    const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog";

    const auto post = [&](const std::string& path, const json& body) {
        const Reply r = call(port, http::verb::post, path, body.dump());
        INFO(r.body);
        REQUIRE(r.status == 200);
        return r;
    };
    // Greedy: every choice is the one greedy text.
    const json one = json::parse(post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}}).body);
    const json three = json::parse(post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"n", 3}}).body);
    REQUIRE(three["choices"].size() == 3);
    for (int i = 0; i < 3; ++i) {
        CHECK(three["choices"][i]["index"] == i);
        CHECK(three["choices"][i]["text"] == one["choices"][0]["text"]);
    }
    CHECK(three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]);
    CHECK(three["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"].get<int>());

    // Seeded chat: the choices differ from each other, a rerun gives them again,
    // and choice i is what a request with seed + i alone gives.
    const json chat_body = {{"messages", json::array({{{"role", "user"}, {"content", prompt}}})}, {"max_tokens", 20},
                            {"temperature", 1.0}, {"seed", 99}, {"n", 3}};
    const json a = json::parse(post("/v1/chat/completions", chat_body).body);
    const json b = json::parse(post("/v1/chat/completions", chat_body).body);
    REQUIRE(a["choices"].size() == 3);
    std::set<std::string> distinct;
    for (int i = 0; i < 3; ++i) {
        CHECK(a["choices"][i]["index"] == i);
        CHECK(a["choices"][i]["message"] == b["choices"][i]["message"]);
        distinct.insert(a["choices"][i]["message"]["content"].get<std::string>());
    }
    CHECK(distinct.size() == 3);
    json alone_body = chat_body;
    alone_body["n"] = 1;
    alone_body["seed"] = 101;
    const json alone = json::parse(post("/v1/chat/completions", alone_body).body);
    CHECK(alone["choices"][0]["message"] == a["choices"][2]["message"]);

    // The prompt is computed once: the choices after the first start when
    // its prompt is in the prefix cache. (A fresh prompt, so no earlier
    // request's blocks serve the first choice.)
    const std::string fresh = "The big brown bear walked slowly through the quiet green forest, looking for some sweet honey to eat before the night came";
    const auto cached_total = [&] {  // specd_prompt_tokens_cached_total from /metrics
        const std::string page = call(port, http::verb::get, "/metrics").body;
        const std::string name = "\nspecd_prompt_tokens_cached_total ";
        const size_t at = page.find(name);
        REQUIRE(at != std::string::npos);
        return std::stod(page.substr(at + name.size()));
    };
    const double cached_before = cached_total();
    const json cached = json::parse(post("/v1/completions", {{"prompt", fresh}, {"max_tokens", 8}, {"temperature", 0}, {"n", 3}}).body);
    CHECK(cached["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);  // choice 0's: it computed the prompt
    const int n_prompt = cached["usage"]["prompt_tokens"].get<int>();
    REQUIRE(n_prompt > 16);
    // Choices 1 and 2 each took every full block of the prompt but the last token's.
    CHECK(cached_total() - cached_before == 2 * ((n_prompt - 1) / 16 * 16));

    // Streamed: each choice's chunks carry its index, each choice ends with
    // its finish reason, then one usage chunk for all and one [DONE].
    const Reply sse = post("/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", prompt}}})}, {"max_tokens", 12},
                                                    {"temperature", 0}, {"n", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
    bool done = false;
    const std::vector<json> chunks = sse_objects(sse.body, done);
    CHECK(done);
    std::string text[2];
    int finishes[2] = {0, 0}, roles[2] = {0, 0};
    json usage;
    for (const json& c : chunks) {
        if (c["choices"].empty()) {
            usage = c["usage"];
            continue;
        }
        const int i = c["choices"][0]["index"].get<int>();
        REQUIRE((i == 0 || i == 1));
        const json& delta = c["choices"][0]["delta"];
        if (delta.contains("role")) ++roles[i];
        if (delta.contains("content") && delta["content"].is_string()) text[i] += delta["content"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) ++finishes[i];
    }
    CHECK(roles[0] == 1);
    CHECK(roles[1] == 1);
    CHECK(finishes[0] == 1);
    CHECK(finishes[1] == 1);
    CHECK(text[0] == text[1]);  // greedy
    CHECK(usage["completion_tokens"] == 24);
    CHECK(chunks.back()["choices"].empty());  // the usage chunk is the last before [DONE]
}
