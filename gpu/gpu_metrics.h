// GPU figures for /metrics, as values (net/metrics_page renders them):
// memory used/free/total per CUDA device (from cudaMemGetInfo) and
// utilisation from NVML. NVML is loaded at run time with
// dlopen("libnvidia-ml.so.1") and never linked: the driver ships it, so a
// binary built here must not depend on it; without it (no driver, a
// container without the library) utilisation is simply absent. No CUDA
// types here: actors/runtime.h includes this header in every build.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace specd::gpu {

struct GpuDeviceStats {
    int ordinal = 0;                    // CUDA ordinal (the metric's device label)
    uint64_t total_bytes = 0;           // global memory
    uint64_t free_bytes = 0;            // free now (cudaMemGetInfo)
    uint64_t used_bytes = 0;            // total - free: every process's use, not only specd's
    std::optional<double> utilization;  // 0..1 share of the last sample period a kernel ran (NVML); absent without NVML
};

// The NVML shared object the driver installs.
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// GPU utilisation (0..1) of the device whose PCI bus id is `pci_bus_id`
// ("0000:3B:00.0", as cudaDeviceGetPCIBusId writes it: NVML's indices need
// not match CUDA's ordinals, the bus id is what both agree on). Loads
// `library` once per process (the first call's name is kept) and calls
// nvmlInit once; nullopt when the library, a symbol, nvmlInit or the query
// fails. Never throws. Plain C++ (dlfcn), in specd_gpu_host.
std::optional<double> nvml_utilization(const std::string& pci_bus_id, const char* library = kNvmlLibrary);

// Memory and utilisation of CUDA devices `ordinals`. Defined in
// device_probe.cpp (library specd_gpu, only with CUDA). A device whose
// cudaMemGetInfo fails is left out. Never throws.
std::vector<GpuDeviceStats> query_gpu_stats(std::span<const int> ordinals);

}  // namespace specd::gpu
