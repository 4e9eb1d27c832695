#include "gpu/gpu_metrics.h"

#include <dlfcn.h>

#include <cstdio>
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

std::string number(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.15g", v);  // bytes to 1e15 exactly; ratios without binary noise
    return buf;
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

void render_gpu_metrics(std::string& out, std::span<const GpuDeviceStats> stats) {
    if (stats.empty()) return;
    auto family = [&](const char* name, const char* help, auto value, bool (*has)(const GpuDeviceStats&)) {
        bool any = false;
        for (const GpuDeviceStats& s : stats) any = any || has(s);
        if (!any) return;
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
        for (const GpuDeviceStats& s : stats) {
            if (!has(s)) continue;
            out += std::string(name) + "{device=\"" + std::to_string(s.ordinal) + "\"} " + number(value(s)) + "\n";
        }
    };
    auto always = [](const GpuDeviceStats&) { return true; };
    family("specd_gpu_memory_used_bytes", "GPU memory in use on the device (all processes).",
           [](const GpuDeviceStats& s) { return static_cast<double>(s.used_bytes); }, always);
    family("specd_gpu_memory_free_bytes", "GPU memory free on the device.",
           [](const GpuDeviceStats& s) { return static_cast<double>(s.free_bytes); }, always);
    family("specd_gpu_memory_total_bytes", "GPU memory on the device.",
           [](const GpuDeviceStats& s) { return static_cast<double>(s.total_bytes); }, always);
    family("specd_gpu_utilization_ratio", "Share of the last NVML sample period in which a kernel ran on the device (0..1).",
           [](const GpuDeviceStats& s) { return s.utilization.value_or(0.0); },
           [](const GpuDeviceStats& s) { return s.utilization.has_value(); });
}

}  // namespace specd::gpu
