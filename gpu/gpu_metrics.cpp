#include "gpu/gpu_metrics.h"

#include <dlfcn.h>

#include <mutex>

namespace specd::gpu {

namespace {

// The few NVML declarations used, from nvml.h (not included: the header is
// not needed to build, and its ABI for these calls is stable since NVML 5).
using nvml_return = int;        // nvmlReturn_t; 0 is NVML_SUCCESS
using nvml_device = void*;      // nvmlDevice_t (an opaque pointer)
struct nvml_utilization_t {     // nvmlUtilization_t
    unsigned int gpu;           // percent of the sample period a kernel ran
    unsigned int memory;        // percent of the period device memory was read or written
};
using init_fn = nvml_return (*)();
using by_bus_fn = nvml_return (*)(const char*, nvml_device*);
using util_fn = nvml_return (*)(nvml_device, nvml_utilization_t*);

struct Nvml {
    bool ok = false;
    by_bus_fn by_bus = nullptr;
    util_fn utilization = nullptr;
};

// Loaded once; the handle is kept for the process (NVML is never shut down:
// its state is the driver's, and unloading while a scrape runs would race).
const Nvml& nvml(const char* library) {
    static Nvml instance;
    static std::once_flag once;
    std::call_once(once, [library] {
        void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) return;
        auto init = reinterpret_cast<init_fn>(dlsym(handle, "nvmlInit_v2"));
        auto by_bus = reinterpret_cast<by_bus_fn>(dlsym(handle, "nvmlDeviceGetHandleByPciBusId_v2"));
        auto util = reinterpret_cast<util_fn>(dlsym(handle, "nvmlDeviceGetUtilizationRates"));
        if (!init || !by_bus || !util || init() != 0) {
            dlclose(handle);
            return;
        }
        instance.by_bus = by_bus;
        instance.utilization = util;
        instance.ok = true;
    });
    return instance;
}

}  // namespace

std::optional<double> nvml_utilization(const std::string& pci_bus_id, const char* library) {
    const Nvml& n = nvml(library);
    if (!n.ok) return std::nullopt;
    nvml_device device = nullptr;
    if (n.by_bus(pci_bus_id.c_str(), &device) != 0) return std::nullopt;
    nvml_utilization_t u{};
    if (n.utilization(device, &u) != 0) return std::nullopt;
    return static_cast<double>(u.gpu) / 100.0;
}

}  // namespace specd::gpu
