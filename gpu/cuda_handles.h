// RAII owners of CUDA resources (device memory, pinned host memory, streams,
// events, cuBLAS handles) and the checked-call macros: every CUDA runtime and
// cuBLAS call goes through SPECD_CUDA_CHECK / SPECD_CUBLAS_CHECK, which turn
// a failure into gpu::CudaError (a specd::Error) with CUDA's own message.
// Destructors never throw: they release and ignore errors (a failed free
// during unwinding must not terminate the process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpu/cuda_error.h"

namespace specd::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

#define SPECD_CUDA_CHECK(call)                                                                          \
    do {                                                                                                \
        const cudaError_t specd_cuda_status_ = (call);                                                  \
        if (specd_cuda_status_ != cudaSuccess) ::specd::gpu::throw_cuda_error(specd_cuda_status_, #call, __FILE__, __LINE__); \
    } while (0)

#define SPECD_CUBLAS_CHECK(call)                                                                        \
    do {                                                                                                \
        const cublasStatus_t specd_cublas_status_ = (call);                                             \
        if (specd_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                              \
            ::specd::gpu::throw_cublas_error(specd_cublas_status_, #call, __FILE__, __LINE__);          \
    } while (0)

// Checks the launch of the kernel just issued (bad configuration, no device).
#define SPECD_CUDA_CHECK_LAUNCH() SPECD_CUDA_CHECK(cudaGetLastError())

// Makes `device` current for the calling thread for the object's lifetime.
class DeviceGuard {
public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = 0;
};

// Device memory of `bytes` bytes on the current device (uninitialised).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            ptr_ = std::exchange(other.ptr_, nullptr);
            bytes_ = std::exchange(other.bytes_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    template <class T = void>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }
    bool empty() const { return ptr_ == nullptr; }

    // Synchronous copies (tests, load time); the hot path uses async copies.
    void upload(const void* host, size_t bytes, size_t offset = 0);
    void download(void* host, size_t bytes, size_t offset = 0) const;

private:
    void release() noexcept;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// Page-locked host memory, so async copies really overlap with compute.
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t bytes);
    ~PinnedBuffer() { release(); }
    PinnedBuffer(PinnedBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
        if (this != &other) {
            release();
            ptr_ = std::exchange(other.ptr_, nullptr);
            bytes_ = std::exchange(other.bytes_, 0);
        }
        return *this;
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    template <class T = void>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

private:
    void release() noexcept;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A non-blocking stream (does not synchronise with the legacy default
// stream, so two of them really run side by side).
class Stream {
public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }
    void synchronize() const;

private:
    cudaStream_t stream_ = nullptr;
};

// An event; with timing (the default) it can be used for elapsed times,
// without it is cheaper for pure ordering between streams.
class Event {
public:
    explicit Event(bool timing = true);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const { return event_; }
    void record(const Stream& stream);
    void synchronize() const;
    // Milliseconds from `earlier` to this event (both recorded and complete).
    float ms_since(const Event& earlier) const;

private:
    cudaEvent_t event_ = nullptr;
};

// An instantiated CUDA graph (cudaGraphExec_t), made from a captured graph
// that the caller still owns and destroys. Movable, for GraphCache.
class GraphExec {
public:
    GraphExec() = default;
    explicit GraphExec(cudaGraph_t graph);
    ~GraphExec();
    GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
    GraphExec& operator=(GraphExec&& other) noexcept;
    GraphExec(const GraphExec&) = delete;
    GraphExec& operator=(const GraphExec&) = delete;
    void launch(const Stream& stream) const;

private:
    cudaGraphExec_t exec_ = nullptr;
};

// A cuBLAS handle bound to one stream, with a workspace of its own
// (`workspace_bytes`, 32 MiB by default: NVIDIA's advice for Hopper) so that
// GEMMs captured into CUDA graphs never make cuBLAS allocate.
class CublasHandle {
public:
    static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;
    explicit CublasHandle(const Stream& stream, size_t workspace_bytes = kDefaultWorkspaceBytes);
    ~CublasHandle();
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    cublasHandle_t get() const { return handle_; }

private:
    cublasHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;  // (workspace_bytes) bytes, cuBLAS's scratch
};

}  // namespace specd::gpu
