#include "actors/backend_factory.h"

#include "config/log.h"
#include "engine/forward.h"
#include "gpu/device.h"
#ifdef SPECD_HAS_CUDA
#include <cuda_runtime.h>

#include "gpu/cuda_forward.h"
#include "gpu/device_model.h"
#endif

namespace specd {

namespace {

class CpuBackends : public BackendFactory {
public:
    CpuBackends(const LlamaModel* target, const LlamaModel* draft, ThreadPool* target_pool, ThreadPool* draft_pool)
        : target_(target), draft_(draft), target_pool_(target_pool), draft_pool_(draft_pool) {}

    std::unique_ptr<ForwardBackend> make_target(const ForwardOptions& options) override {
        if (!target_ || !target_pool_) throw Error("backend: no target model");
        return std::make_unique<ForwardPass>(*target_, *target_pool_, options);
    }
    std::unique_ptr<ForwardBackend> make_draft(const ForwardOptions& options) override {
        if (!draft_ || !draft_pool_) throw Error("backend: no draft model");
        return std::make_unique<ForwardPass>(*draft_, *draft_pool_, options);
    }
    int64_t kv_memory_bytes(int64_t host_bytes) const override { return host_bytes; }
    size_t kv_block_bytes(const KvCacheShape& shape) const override {
        return PagedKvCache::block_bytes(shape);
    }
    std::string name() const override { return "cpu"; }

private:
    const LlamaModel* target_;
    const LlamaModel* draft_;
    ThreadPool* target_pool_;
    ThreadPool* draft_pool_;
};

#ifdef SPECD_HAS_CUDA
class CudaBackends : public BackendFactory {
public:
    CudaBackends(int device, const LlamaModel* target, const LlamaModel* draft)
        : device_(device), target_(target), draft_(draft) {
        // Weights once per device; every backend made below shares them.
        if (target) target_weights_ = gpu::DeviceModel::upload(*target, device);
        if (draft) draft_weights_ = gpu::DeviceModel::upload(*draft, device);
    }
    std::unique_ptr<ForwardBackend> make_target(const ForwardOptions& options) override {
        if (!target_weights_) throw Error("backend: no target model");
        return std::make_unique<gpu::CudaForward>(target_weights_, target_, options);
    }
    std::unique_ptr<ForwardBackend> make_draft(const ForwardOptions& options) override {
        if (!draft_weights_) throw Error("backend: no draft model");
        return std::make_unique<gpu::CudaForward>(draft_weights_, draft_, options);
    }
    int64_t kv_memory_bytes(int64_t) const override {
        gpu::DeviceGuard guard(device_);
        size_t free_bytes = 0, total_bytes = 0;
        SPECD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        return static_cast<int64_t>(free_bytes);
    }
    size_t kv_block_bytes(const KvCacheShape& shape) const override {
        return 2 * static_cast<size_t>(shape.n_layers) * shape.block_size * shape.kv_dim * sizeof(uint16_t);
    }
    std::string name() const override { return "cuda:" + std::to_string(device_); }
    std::vector<gpu::GpuDeviceStats> gpu_stats() const override {
        const int ordinals[1] = {device_};
        return gpu::query_gpu_stats(ordinals);
    }

private:
    int device_;
    const LlamaModel* target_;
    const LlamaModel* draft_;
    std::shared_ptr<const gpu::DeviceModel> target_weights_, draft_weights_;
};
#endif

}  // namespace

gpu::BackendChoice BackendFactory::choose(const std::string& device) {
    const gpu::DeviceRequest request = gpu::parse_device_request(device);
#ifdef SPECD_HAS_CUDA
    const gpu::DeviceProbe probe = request == gpu::DeviceRequest::Cpu ? gpu::DeviceProbe{} : gpu::probe_devices();
    return gpu::choose_backend(request, probe, true);
#else
    return gpu::choose_backend(request, gpu::DeviceProbe{}, false);
#endif
}

std::unique_ptr<BackendFactory> BackendFactory::make(const gpu::BackendChoice& choice, const LlamaModel* target,
                                                     const LlamaModel* draft, ThreadPool* target_pool, ThreadPool* draft_pool) {
    if (!choice.error.empty()) throw Error(choice.error);
    if (!target && !draft) throw Error("backend: no model to run");
#ifdef SPECD_HAS_CUDA
    if (choice.use_cuda) return std::make_unique<CudaBackends>(choice.device, target, draft);
#endif
    return std::make_unique<CpuBackends>(target, draft, target_pool, draft_pool);
}

std::unique_ptr<BackendFactory> BackendFactory::create(const RuntimeConfig& config, const LlamaModel* target,
                                                       const LlamaModel* draft, ThreadPool* target_pool, ThreadPool* draft_pool) {
    const gpu::BackendChoice choice = choose(config.device);
    if (!choice.error.empty()) throw Error(choice.error);
    if (!choice.log_line.empty()) log::info(choice.log_line);
    return make(choice, target, draft, target_pool, draft_pool);
}

}  // namespace specd
