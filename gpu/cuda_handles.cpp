#include "gpu/cuda_handles.h"

#include <string>

namespace specd::gpu {

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
    throw CudaError(format_cuda_error("CUDA", call, file, line, static_cast<int>(code), cudaGetErrorName(code),
                                      cudaGetErrorString(code)),
                    static_cast<int>(code));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
    const char* text = cublasGetStatusString(status);
    throw CudaError(format_cuda_error("cuBLAS", call, file, line, static_cast<int>(status), cublasGetStatusName(status),
                                      text ? text : ""),
                    static_cast<int>(status));
}

DeviceGuard::DeviceGuard(int device) {
    SPECD_CUDA_CHECK(cudaGetDevice(&previous_));
    SPECD_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { (void)cudaSetDevice(previous_); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    // cudaMalloc(0) returns a null pointer; a zero-byte buffer stays empty.
    if (bytes > 0) SPECD_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

void DeviceBuffer::release() noexcept {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
    if (offset + bytes > bytes_) {
        throw Error("DeviceBuffer: upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                    " overruns a buffer of " + std::to_string(bytes_));
    }
    if (bytes > 0) SPECD_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
    if (offset + bytes > bytes_) {
        throw Error("DeviceBuffer: download of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                    " overruns a buffer of " + std::to_string(bytes_));
    }
    if (bytes > 0) SPECD_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) SPECD_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
}

void PinnedBuffer::release() noexcept {
    if (ptr_) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

Stream::Stream() { SPECD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { SPECD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(bool timing) {
    SPECD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
    if (event_) (void)cudaEventDestroy(event_);
}
void Event::record(const Stream& stream) { SPECD_CUDA_CHECK(cudaEventRecord(event_, stream.get())); }
void Event::synchronize() const { SPECD_CUDA_CHECK(cudaEventSynchronize(event_)); }
float Event::ms_since(const Event& earlier) const {
    float ms = 0.0f;
    SPECD_CUDA_CHECK(cudaEventElapsedTime(&ms, earlier.event_, event_));
    return ms;
}

GraphExec::GraphExec(cudaGraph_t graph) { SPECD_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0)); }
GraphExec::~GraphExec() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
}
GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
    if (this != &other) {
        if (exec_) (void)cudaGraphExecDestroy(exec_);
        exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
}
void GraphExec::launch(const Stream& stream) const {
    if (!exec_) throw Error("cuda: launch of an empty graph");
    SPECD_CUDA_CHECK(cudaGraphLaunch(exec_, stream.get()));
}

CublasHandle::CublasHandle(const Stream& stream, size_t workspace_bytes) {
    SPECD_CUBLAS_CHECK(cublasCreate(&handle_));
    try {
        SPECD_CUBLAS_CHECK(cublasSetStream(handle_, stream.get()));
        if (workspace_bytes > 0) {
            workspace_ = DeviceBuffer(workspace_bytes);
            SPECD_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.as(), workspace_bytes));
        }
    } catch (...) {
        (void)cublasDestroy(handle_);
        throw;
    }
}
CublasHandle::~CublasHandle() {
    if (handle_) (void)cublasDestroy(handle_);
}

}  // namespace specd::gpu
