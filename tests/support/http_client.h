// A blocking HTTP/1.1 client over loopback for the server tests (a Beast
// stream per call), and the "data:" payloads of a server-sent-event body.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

namespace specd::test {

struct HttpReply {
    int status = 0;
    std::string body;
    std::string content_type;
};

// One request to 127.0.0.1:port; `body` (JSON) and a bearer `key` when not empty.
inline HttpReply http_call(uint16_t port, boost::beast::http::verb method, const std::string& target, const std::string& body = "",
                           const std::string& key = "") {
    namespace http = boost::beast::http;
    boost::asio::io_context ioc;
    boost::beast::tcp_stream stream(ioc);
    stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    if (!body.empty()) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
        req.prepare_payload();
    }
    http::write(stream, req);
    boost::beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(stream, buf, res);
    return HttpReply{static_cast<int>(res.result_int()), res.body(), std::string(res[http::field::content_type])};
}

// The payload of each "data: ...\n\n" event, in order ("[DONE]" included).
inline std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
        const size_t end = body.find("\n\n", at);
        out.push_back(body.substr(at + 6, end - at - 6));
        at = end;
    }
    return out;
}

}  // namespace specd::test
