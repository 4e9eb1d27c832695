// specd::Error — the one exception type the engine throws for bad input.
// Its message is a single line naming the problem (file, key, value, what was
// expected); the CLI prints it as "specd: <message>" and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace specd {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A prompt the context can't hold: bad input that a server reports apart
// from the rest (error code "context_exceeded"), told by its type, not its text.
class ContextError : public Error {
public:
    using Error::Error;
};

}  // namespace specd
