// The listener: accepts connections on the server's port and hands each to
// an HTTP session on a strand of its own; past max_connections a short 503
// and the connection is closed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

namespace specd::net {

struct ServerState;

// Opens, binds and (when `listen`) listens; a failure throws specd::Error
// naming the address, e.g. "cannot listen on 127.0.0.1:8080: Address
// already in use".
void open_acceptor(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host, uint16_t port, bool listen);

class Listener : public std::enable_shared_from_this<Listener> {
public:
    // Accepts on state->acceptor (open and listening) until it closes.
    explicit Listener(std::shared_ptr<ServerState> state) : state_(std::move(state)) {}
    void run() { do_accept(); }

private:
    void do_accept();
    void on_accept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);

    std::shared_ptr<ServerState> state_;
};

}  // namespace specd::net
