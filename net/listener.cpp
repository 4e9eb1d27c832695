// The listener; see listener.h.
#include "net/listener.h"

#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include "actors/error_code.h"
#include "net/http_session.h"
#include "net/server_state.h"

namespace specd::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void open_acceptor(tcp::acceptor& acceptor, const std::string& host, uint16_t port, bool listen) {
    const auto fail = [&](const std::string& why) {
        throw Error("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
    };
    boost::system::error_code ec;
    const asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) fail("not an IP address (give one, e.g. 127.0.0.1 or 0.0.0.0)");
    const tcp::endpoint ep(address, port);
    if (acceptor.open(ep.protocol(), ec); ec) fail(ec.message());
    if (acceptor.set_option(asio::socket_base::reuse_address(true), ec); ec) fail(ec.message());
    if (acceptor.bind(ep, ec); ec) fail(ec.message());
    if (listen) {
        if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) fail(ec.message());
    }
}

void Listener::do_accept() {
    state_->acceptor->async_accept(asio::make_strand(*state_->ioc),
                                   [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
                                       self->on_accept(ec, std::move(socket));
                                   });
}

void Listener::on_accept(const boost::system::error_code& ec, tcp::socket socket) {
    if (ec) {
        if (!state_->stopped) do_accept();
        return;
    }
    boost::system::error_code sec;
    // Token events are small writes in quick succession: without this,
    // Nagle holds each one back until the client ACKs the previous one,
    // and the client delays its ACKs (milliseconds added to TTFT and ITL).
    socket.set_option(tcp::no_delay(true), sec);
    if (state_->opt.socket_send_buffer > 0) {
        socket.set_option(asio::socket_base::send_buffer_size(state_->opt.socket_send_buffer), sec);
    }
    if (state_->connections >= state_->opt.max_connections) {
        // Over the limit: a short 503 on the way out.
        static const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                        "Content-Length: 104\r\n\r\n"
                                        "{\"error\":{\"message\":\"too many connections\",\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}";
        boost::system::error_code wec;
        asio::write(socket, asio::buffer(busy), wec);
        socket.close(wec);
    } else {
        ++state_->connections;
        run_http_session(std::move(socket), state_);
    }
    do_accept();
}

}  // namespace specd::net
