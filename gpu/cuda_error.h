// CUDA and cuBLAS failures as specd::Error. Plain C++ (no CUDA header), so
// the message format is testable without a device.
#pragma once

#include <string>
#include <string_view>

#include "engine/error.h"

namespace specd::gpu {

// A failed CUDA runtime or cuBLAS call.
class CudaError : public Error {
public:
    CudaError(const std::string& message, int code) : Error(message), code_(code) {}
    int code() const { return code_; }

private:
    int code_;
};

// "CUDA: cudaMalloc(&p, n) failed at gpu/x.cpp:12: out of memory (cudaErrorMemoryAllocation, error 2)"
// `library` is "CUDA" or "cuBLAS"; `name` the enum name, `text` the
// library's description of the code (either may be empty).
std::string format_cuda_error(std::string_view library, std::string_view call, std::string_view file, int line, int code,
                              std::string_view name, std::string_view text);

}  // namespace specd::gpu
