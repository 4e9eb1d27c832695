// Which backend runs the models (RuntimeConfig::device: auto, cpu, cuda)
// and the forward passes for the verifier and the draft actors. With CUDA,
// the weights are uploaded once per device here, and every backend made
// owns its own stream: the verifier's and the draft's work overlap on the
// GPU. No CUDA types in this header (the runtime and its embedders include
// it in builds with or without CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/runtime_config.h"
#include "engine/backend.h"
#include "engine/thread_pool.h"
#include "gpu/device.h"
#include "gpu/gpu_metrics.h"

namespace specd {

class BackendFactory {
public:
    // Chooses the backend: `cpu`; `cuda` (throws specd::Error with one line
    // when no device is usable or this build has no CUDA); `auto` (CUDA
    // device 0 when usable, else the CPU). Logs the choice in one line
    // ("specd: no CUDA device (...): running on the CPU"). With CUDA, uploads
    // the target's and the draft's weights. The pools are the CPU backends'.
    // Either model may be null (a draft node has no target, a plain runtime
    // no draft; its pool is null then too), not both.
    static std::unique_ptr<BackendFactory> create(const RuntimeConfig& config, const LlamaModel* target,
                                                  const LlamaModel* draft, ThreadPool* target_pool, ThreadPool* draft_pool);
    // The two halves of create(), for callers that report the choice
    // themselves (the CLI prints the line on stderr and exits 1 on an
    // error): choose() parses `device` (auto|cpu|cuda; specd::Error for
    // anything else) and probes the devices unless it is cpu; it logs
    // nothing and leaves choice.error for the caller. make() builds the
    // backends of a choice without an error (uploading the weights on a GPU).
    static gpu::BackendChoice choose(const std::string& device);
    static std::unique_ptr<BackendFactory> make(const gpu::BackendChoice& choice, const LlamaModel* target,
                                                const LlamaModel* draft, ThreadPool* target_pool, ThreadPool* draft_pool);
    virtual ~BackendFactory() = default;

    // A new forward pass for the verifier / the draft actor (each call: its
    // own stream on a GPU; the CPU backends share the pools).
    virtual std::unique_ptr<ForwardBackend> make_target(const ForwardOptions& options) = 0;
    virtual std::unique_ptr<ForwardBackend> make_draft(const ForwardOptions& options) = 0;

    // The memory the KV pools are sized from (before KV_CACHE_RATIO): on a
    // GPU the VRAM still free after the weights, on the CPU `host_bytes`.
    virtual int64_t kv_memory_bytes(int64_t host_bytes) const = 0;
    // Bytes of one block of a KV pool of `shape` (keys and values) as this
    // backend stores it (f32 on the CPU, 16-bit on a GPU).
    virtual size_t kv_block_bytes(const KvCacheShape& shape) const = 0;
    // "cpu" or "cuda:0".
    virtual std::string name() const = 0;
    // Memory and utilisation of the GPU(s) in use, for /metrics; empty on
    // the CPU (the default). Never throws.
    virtual std::vector<gpu::GpuDeviceStats> gpu_stats() const { return {}; }
};

}  // namespace specd
