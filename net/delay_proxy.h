// A TCP relay that holds every chunk for a fixed time in each direction: an
// emulated network round trip on loopback, for measuring and testing the
// multi-node runtime where `tc netem` is not available (it needs the kernel's
// sch_netem). Each direction is delayed by one_way_ms, so a request/reply
// through the relay takes 2 x one_way_ms longer; bytes keep their order and
// are never merged across the delay.
//
//   net::DelayProxy proxy({.to_host = "127.0.0.1", .to_port = node_port, .one_way_ms = 0.5});
//   uint16_t port = proxy.start();   // connect here instead of node_port
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace specd::net {

struct DelayProxyOptions {
    std::string listen_host = "127.0.0.1";  // where the relay listens
    uint16_t listen_port = 0;               // 0: any free port (start() returns it)
    std::string to_host = "127.0.0.1";      // the upstream (a node)
    uint16_t to_port = 0;
    double one_way_ms = 0.0;                // added to each direction; 0: a plain relay
};

class DelayProxy {
public:
    explicit DelayProxy(DelayProxyOptions options);
    ~DelayProxy();
    DelayProxy(const DelayProxy&) = delete;
    DelayProxy& operator=(const DelayProxy&) = delete;
    // Binds and starts its network thread; the bound port. specd::Error when it can't bind.
    uint16_t start();
    // Closes the listener and every relayed connection; idempotent.
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace specd::net
