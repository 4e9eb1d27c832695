// Why a request failed, as the session protocol (engine/session_protocol.h)
// and the session actor report it (error_event::code carries the name
// across processes and to the network layer).
#pragma once

// specd::Error, the one exception type every layer throws for bad input
// (a one-line message; Runtime::create and set_speculation throw it), with
// the error codes a front end maps to its protocol's: net/ throws it for
// its own bad input too (listen address, metric names).
#include "engine/error.h"

namespace specd {

enum class ErrorCode {
    invalid_request,   // the request itself is bad (prompt, parameters)
    context_exceeded,  // the prompt does not fit the context
    unknown_model,     // it names a model this server does not have
    overloaded,        // no KV blocks for it (refused, or the pool ran out mid-request)
    unavailable,       // multi-node: no target node reachable, or the one it ran on was lost
    timeout,           // its deadline passed
    draining,          // the server is shutting down
    internal,          // a compute actor failed
};

// The name error_event::code carries: the enumerator's own.
constexpr const char* error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::invalid_request: return "invalid_request";
        case ErrorCode::context_exceeded: return "context_exceeded";
        case ErrorCode::unknown_model: return "unknown_model";
        case ErrorCode::overloaded: return "overloaded";
        case ErrorCode::unavailable: return "unavailable";
        case ErrorCode::timeout: return "timeout";
        case ErrorCode::draining: return "draining";
        case ErrorCode::internal: return "internal";
    }
    return "internal";
}

}  // namespace specd
