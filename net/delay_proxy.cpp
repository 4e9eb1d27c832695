#include "net/delay_proxy.h"

#include <array>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "actors/error_code.h"

namespace specd::net {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

// One relayed connection: client ⇄ upstream, each direction a queue of
// (due time, bytes) written in order once due.
struct Relay : std::enable_shared_from_this<Relay> {
    struct Direction {
        tcp::socket* from;
        tcp::socket* to;
        std::array<char, 64 * 1024> buffer;                        // one read
        std::deque<std::pair<clock_type::time_point, std::vector<char>>> queue;  // chunks waiting for their time
        asio::steady_timer timer;
        bool writing = false;
        explicit Direction(asio::io_context& io) : timer(io) {}
    };

    Relay(asio::io_context& io, tcp::socket client, clock_type::duration delay)
        : client(std::move(client)), upstream(io), delay(delay), up(io), down(io) {
        up.from = &this->client;
        up.to = &upstream;
        down.from = &upstream;
        down.to = &this->client;
    }

    void start(const tcp::endpoint& to) {
        upstream.async_connect(to, [self = shared_from_this()](const boost::system::error_code& ec) {
            if (ec) return self->close();
            boost::system::error_code ignored;
            self->client.set_option(tcp::no_delay(true), ignored);
            self->upstream.set_option(tcp::no_delay(true), ignored);
            self->read(self->up);
            self->read(self->down);
        });
    }

    void read(Direction& d) {
        d.from->async_read_some(asio::buffer(d.buffer), [self = shared_from_this(), &d](const boost::system::error_code& ec, size_t n) {
            if (ec) return self->close();
            d.queue.emplace_back(clock_type::now() + self->delay, std::vector<char>(d.buffer.begin(), d.buffer.begin() + static_cast<std::ptrdiff_t>(n)));
            if (!d.writing) self->write_next(d);
            self->read(d);
        });
    }

    void write_next(Direction& d) {
        if (d.queue.empty()) {
            d.writing = false;
            return;
        }
        d.writing = true;
        d.timer.expires_at(d.queue.front().first);
        d.timer.async_wait([self = shared_from_this(), &d](const boost::system::error_code& ec) {
            if (ec || self->closed) return;
            asio::async_write(*d.to, asio::buffer(d.queue.front().second), [self, &d](const boost::system::error_code& wec, size_t) {
                if (wec) return self->close();
                d.queue.pop_front();
                self->write_next(d);
            });
        });
    }

    void close() {
        if (closed) return;
        closed = true;
        boost::system::error_code ignored;
        client.close(ignored);
        upstream.close(ignored);
        up.timer.cancel();
        down.timer.cancel();
    }

    tcp::socket client;
    tcp::socket upstream;
    clock_type::duration delay;
    Direction up;    // client → upstream
    Direction down;  // upstream → client
    bool closed = false;
};

}  // namespace

struct DelayProxy::Impl {
    DelayProxyOptions options;
    asio::io_context io;
    tcp::acceptor acceptor{io};
    tcp::endpoint upstream;
    std::thread thread;
    std::vector<std::weak_ptr<Relay>> relays;
    bool stopped = false;

    void accept() {
        acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
            if (ec) return;  // closed
            const auto delay = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(options.one_way_ms));
            auto relay = std::make_shared<Relay>(io, std::move(socket), delay);
            relays.push_back(relay);
            relay->start(upstream);
            accept();
        });
    }
};

DelayProxy::DelayProxy(DelayProxyOptions options) : impl_(std::make_unique<Impl>()) { impl_->options = std::move(options); }

DelayProxy::~DelayProxy() { stop(); }

uint16_t DelayProxy::start() {
    Impl& m = *impl_;
    boost::system::error_code ec;
    const auto listen_addr = asio::ip::make_address(m.options.listen_host, ec);
    if (ec) throw Error("delay proxy: bad listen address " + m.options.listen_host);
    const auto to_addr = asio::ip::make_address(m.options.to_host, ec);
    if (ec) throw Error("delay proxy: bad upstream address " + m.options.to_host + " (an IP address)");
    m.upstream = tcp::endpoint(to_addr, m.options.to_port);
    const tcp::endpoint at(listen_addr, m.options.listen_port);
    m.acceptor.open(at.protocol(), ec);
    if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) m.acceptor.bind(at, ec);
    if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw Error("delay proxy: cannot listen on " + m.options.listen_host + ":" + std::to_string(m.options.listen_port) + ": " + ec.message());
    const uint16_t port = m.acceptor.local_endpoint().port();
    m.accept();
    m.thread = std::thread([&m] { m.io.run(); });
    return port;
}

void DelayProxy::stop() {
    Impl& m = *impl_;
    if (m.stopped) return;
    m.stopped = true;
    asio::post(m.io, [&m] {
        boost::system::error_code ignored;
        m.acceptor.close(ignored);
        for (auto& w : m.relays)
            if (auto r = w.lock()) r->close();
    });
    if (m.thread.joinable()) m.thread.join();
}

}  // namespace specd::net
