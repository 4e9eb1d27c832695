// Protocol details a real client meets, over raw loopback sockets so each
// byte is ours: HEAD, case-sensitive methods, the Bearer scheme in any
// case, a percent-encoded ?api_key=, a non-UTF-8 path, JSON the library
// cannot represent, a WebSocket frame in the same write as the upgrade,
// the 101's Server header, CORS preflights from the OpenAI SDKs, a
// streamed request that fails before its first token, 429 with
// Retry-After, close code 1001 on shutdown, and a busy port found early.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "actors/runtime.h"
#include "engine/error.h"
#include "engine/utf8.h"
#include "net/server.h"
#include "support/models.h"

using namespace specd;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

namespace {

// Sends `bytes` on a new connection and reads until the server closes it
// (or 20 s pass): the whole answer, as bytes.
std::string send_raw(uint16_t port, const std::string& bytes) {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    stream.expires_after(std::chrono::seconds(20));
    asio::write(stream.socket(), asio::buffer(bytes));
    std::string out;
    char buf[4096];
    beast::error_code ec;
    for (;;) {
        const size_t n = stream.socket().read_some(asio::buffer(buf), ec);
        out.append(buf, n);
        if (ec) break;
    }
    return out;
}

int status_of(const std::string& answer) { return answer.size() > 12 ? std::stoi(answer.substr(9, 3)) : 0; }
std::string body_of(const std::string& answer) {
    const size_t at = answer.find("\r\n\r\n");
    return at == std::string::npos ? "" : answer.substr(at + 4);
}
std::string header_of(const std::string& answer, const std::string& name) {
    std::string lower = answer.substr(0, answer.find("\r\n\r\n"));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n" + name + ": ";
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = lower.find(key);
    if (at == std::string::npos) return "";
    const size_t from = at + key.size();
    return answer.substr(from, answer.find("\r\n", from) - from);
}

std::string post(const std::string& path, const std::string& body, const std::string& auth = "Authorization: Bearer k%y\r\n") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "Content-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A client WebSocket text frame (masked, as RFC 6455 requires of clients).
std::string masked_text_frame(const std::string& payload) {
    std::string f;
    f += static_cast<char>(0x81);
    REQUIRE(payload.size() < 126);
    f += static_cast<char>(0x80 | payload.size());
    const char mask[4] = {0x12, 0x34, 0x56, 0x78};
    f.append(mask, 4);
    for (size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
    return f;
}

RuntimeConfig config(int32_t max_sequences = 8, int32_t max_waiting = 256) {
    RuntimeConfig c;
    c.target_model = test::model_path("stories15M-f32.gguf");
    c.draft_model = test::model_path("stories15M-q8_0.gguf");
    c.threads_target = 2;
    c.max_sequences = max_sequences;
    c.max_waiting = max_waiting;
    c.memory_budget_bytes = int64_t{1} << 30;
    return c;
}

net::ServerOptions options() {
    net::ServerOptions opt;
    opt.port = 0;
    opt.api_key = "k%y";  // percent-encoded in a query string as k%25y
    opt.cors_origin = "*";
    return opt;
}

}  // namespace

TEST_CASE("HTTP details: HEAD, case-sensitive methods, any-case Bearer, non-UTF-8 paths, unrepresentable JSON, CORS preflight",
          "[net][protocol]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::Server server(host.runtime(), options());
    const uint16_t port = server.start();

    // The chat page holds no secret: it loads without the key.
    const std::string page = send_raw(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(status_of(page) == 200);
    CHECK(header_of(page, "Content-Type").find("text/html") == 0);

    const std::string get = send_raw(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string head = send_raw(port, "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(status_of(head) == 200);
    CHECK(header_of(head, "Content-Length") == std::to_string(body_of(get).size()));
    CHECK(body_of(head).empty());

    const std::string lower = send_raw(port, "get /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(status_of(lower) == 400);
    CHECK_THAT(body_of(lower), Catch::Contains("upper case"));

    CHECK(status_of(send_raw(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: bearer k%y\r\nConnection: close\r\n\r\n")) == 200);
    CHECK(status_of(send_raw(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: BEARER k%y\r\nConnection: close\r\n\r\n")) == 200);
    CHECK(status_of(send_raw(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nConnection: close\r\n\r\n")) == 401);
    CHECK(status_of(send_raw(port, "GET /v1/models?api_key=k%25y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200);
    CHECK(status_of(send_raw(port, "GET /v1/models?x=1&api_key=k%y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200);

    const std::string models = send_raw(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k%y\r\nConnection: close\r\n\r\n");
    const std::string id = json::parse(body_of(models))["data"][0]["id"];
    const std::string one = send_raw(port, "GET /v1/models/" + id + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k%y\r\nConnection: close\r\n\r\n");
    CHECK(status_of(one) == 200);
    CHECK(json::parse(body_of(one))["id"] == id);
    const std::string other = send_raw(port, "GET /v1/models/gpt-4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k%y\r\nConnection: close\r\n\r\n");
    CHECK(status_of(other) == 404);
    CHECK(json::parse(body_of(other))["error"]["code"] == "model_not_found");
    CHECK(status_of(send_raw(port, post("/v1/embeddings", R"({"input":"x","model":"m"})"))) == 501);

    // stream_options.include_usage: after the finish chunk, one with no choices and the usage.
    const std::string streamed = send_raw(port, post("/v1/chat/completions",
        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}})"));
    CHECK(status_of(streamed) == 200);
    const size_t done = streamed.rfind("data: [DONE]");
    REQUIRE(done != std::string::npos);
    const size_t last = streamed.rfind("data: {", done);
    const json usage_chunk = json::parse(streamed.substr(last + 6, streamed.find("\n\n", last) - last - 6));
    CHECK(usage_chunk["choices"].empty());
    CHECK(usage_chunk["usage"]["completion_tokens"] == 4);
    CHECK(usage_chunk["system_fingerprint"].is_string());

    const std::string no_upgrade = send_raw(port, "GET /v1/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k%y\r\nConnection: close\r\n\r\n");
    CHECK(status_of(no_upgrade) == 426);

    const std::string bad_path = send_raw(port, "GET /\xFF\xFE HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k%y\r\nConnection: close\r\n\r\n");
    CHECK(status_of(bad_path) == 404);
    CHECK(is_valid_utf8(body_of(bad_path)));
    CHECK(json::parse(body_of(bad_path))["error"]["code"] == "not_found");

    for (const std::string& body : {std::string("1e400"), std::string(R"({"prompt":"x","temperature":1e400})"),
                                   std::string("{\xE2\x80\x9Cprompt\xE2\x80\x9D: \xE2\x80\x9Chi\xE2\x80\x9D}"),
                                   std::string("{\"prompt\":\"\xFF\xFE\"}")}) {
        const std::string answer = send_raw(port, post("/v1/completions", body));
        CHECK(status_of(answer) == 400);
        const json e = json::parse(body_of(answer));
        CHECK(e["error"]["code"] == "invalid_json");
        CHECK(e["error"]["message"].get<std::string>().find("json.exception") == std::string::npos);
    }

    const std::string preflight = send_raw(port,
        "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"
        "Access-Control-Request-Headers: authorization, content-type, x-stainless-os, x-stainless-retry-count, x-custom-thing\r\n"
        "Connection: close\r\n\r\n");
    CHECK(status_of(preflight) == 204);
    CHECK(header_of(preflight, "Access-Control-Allow-Origin") == "*");
    CHECK_THAT(header_of(preflight, "Access-Control-Allow-Headers"), Catch::Contains("x-stainless-os") && Catch::Contains("x-custom-thing"));
    server.stop();
}

TEST_CASE("WebSocket details: a frame sent with the upgrade is read, the 101 names specd, shutdown closes with 1001", "[net][protocol]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config());
    net::Server server(host.runtime(), options());
    const uint16_t port = server.start();

    // The upgrade request and a first frame in one write; the key is in the query, percent-encoded.
    const std::string upgrade =
        "GET /v1/ws?api_key=k%25y HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" +
        masked_text_frame(R"({"type":"cancel","id":"nobody"})");
    {
        asio::io_context ioc;
        tcp::socket sock(ioc);
        sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        asio::write(sock, asio::buffer(upgrade));
        asio::streambuf buf;
        asio::read_until(sock, buf, "\r\n\r\n");
        std::string answer(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
        CHECK(status_of(answer) == 101);
        CHECK(header_of(answer, "Server") == "specd");
        const size_t head_end = answer.find("\r\n\r\n") + 4;
        buf.consume(head_end);
        // The reply frame: unmasked text, short payload.
        while (buf.size() < 2) asio::read(sock, buf, asio::transfer_at_least(1));
        std::string frame(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
        CHECK(static_cast<uint8_t>(frame[0]) == 0x81);
        const size_t len = static_cast<uint8_t>(frame[1]) & 0x7F;
        REQUIRE(len < 126);
        while (buf.size() < 2 + len) asio::read(sock, buf, asio::transfer_at_least(1));
        frame.assign(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
        const json reply = json::parse(frame.substr(2, len));
        CHECK(reply["code"] == "unknown_id");
        CHECK(reply["id"] == "nobody");
    }

    // An idle WebSocket is told why the server goes away.
    asio::io_context ioc;
    websocket::stream<tcp::socket> ws(ioc);
    ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws.set_option(websocket::stream_base::decorator([](websocket::request_type& req) { req.set(http::field::authorization, "Bearer k%y"); }));
    ws.handshake("127.0.0.1", "/v1/ws");
    std::thread stopper([&] { server.stop(); });
    beast::flat_buffer b;
    beast::error_code ec;
    ws.read(b, ec);
    stopper.join();
    INFO(ec.message());
    CHECK(ec == websocket::error::closed);
    CHECK(ws.reason().code == websocket::close_code::going_away);
}

TEST_CASE("Failures before the first token keep their status when streamed, and a full server is 429 with Retry-After naming the limit",
          "[net][protocol]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    StandaloneRuntime host(config(1, 0));  // one request decodes, none may wait
    net::Server server(host.runtime(), options());
    const uint16_t port = server.start();

    std::string long_prompt;
    for (int i = 0; i < 400; ++i) long_prompt += "the cat sat on the mat and ";
    const std::string too_long = send_raw(port, post("/v1/completions", json{{"prompt", long_prompt}, {"stream", true}}.dump()));
    CHECK(status_of(too_long) == 400);
    CHECK(header_of(too_long, "Content-Type") == "application/json");
    CHECK(json::parse(body_of(too_long))["error"]["code"] == "context_exceeded");

    // The one slot is busy with a generation (its SSE head arrives with its
    // first token, so it is running then); the next request is refused.
    asio::io_context ioc;
    tcp::socket first(ioc);
    first.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    asio::write(first, asio::buffer(post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true})")));
    asio::streambuf first_answer;
    asio::read_until(first, first_answer, "\r\n\r\n");
    const std::string refused = send_raw(port, post("/v1/completions", R"({"prompt":"Hello","max_tokens":5})"));
    CHECK(status_of(refused) == 429);
    CHECK(header_of(refused, "Retry-After") == "1");
    const json e = json::parse(body_of(refused));
    CHECK(e["error"]["type"] == "rate_limit_exceeded");
    CHECK_THAT(e["error"]["message"].get<std::string>(), Catch::Contains("max_sessions 1"));
    beast::error_code ec;
    asio::read(first, first_answer, ec);  // to the end of the stream
    const std::string streamed(asio::buffers_begin(first_answer.data()), asio::buffers_end(first_answer.data()));
    CHECK(status_of(streamed) == 200);
    CHECK_THAT(streamed, Catch::Contains("data: [DONE]"));

    // The bound port is busy: found before anything loads, in one line naming the address.
    try {
        net::Server::check_address("127.0.0.1", port);
        FAIL("a bound port was accepted");
    } catch (const Error& err) {
        CHECK_THAT(err.what(), Catch::StartsWith("cannot listen on 127.0.0.1:" + std::to_string(port) + ": "));
    }
    server.stop();
}
