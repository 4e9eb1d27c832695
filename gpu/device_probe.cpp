// The CUDA half of gpu/device.h: asking the runtime for its devices.
#include <string>

#include <cuda_runtime.h>

#include "gpu/device.h"
#include "gpu/gpu_metrics.h"

namespace specd::gpu {

namespace {

std::string describe(const char* call, cudaError_t code) {
    return std::string(call) + ": " + cudaGetErrorString(code) + " (" + cudaGetErrorName(code) + ", error " +
           std::to_string(static_cast<int>(code)) + ")";
}

}  // namespace

DeviceProbe probe_devices() {
    DeviceProbe probe;
    // Without a driver the runtime returns an error and leaves the count
    // unwritten (seen with CUDA 13: error 35), hence the initialisation.
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        probe.reason = describe("cudaGetDeviceCount", status);
        (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
        return probe;
    }
    if (count <= 0) {
        probe.reason = "cudaGetDeviceCount: 0 devices";
        return probe;
    }
    for (int d = 0; d < count; ++d) {
        cudaDeviceProp prop{};
        if (const cudaError_t e = cudaGetDeviceProperties(&prop, d); e != cudaSuccess) {
            probe.reason = describe("cudaGetDeviceProperties", e);
            continue;
        }
        DeviceInfo info;
        info.ordinal = d;
        info.name = prop.name;
        info.compute_major = prop.major;
        info.compute_minor = prop.minor;
        info.total_bytes = prop.totalGlobalMem;
        int clock_khz = 0, bus_bits = 0;
        if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, d) == cudaSuccess &&
            cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, d) == cudaSuccess) {
            // Double data rate: two transfers per clock.
            info.memory_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
        }
        int previous = 0;
        if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(d) == cudaSuccess) {
            size_t free_b = 0, total_b = 0;
            if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) info.free_bytes = free_b;
            (void)cudaSetDevice(previous);
        }
        (void)cudaGetLastError();
        probe.devices.push_back(std::move(info));
    }
    if (!probe.devices.empty()) probe.reason.clear();
    return probe;
}

std::vector<GpuDeviceStats> query_gpu_stats(std::span<const int> ordinals) {
    std::vector<GpuDeviceStats> out;
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) {
        (void)cudaGetLastError();
        return out;
    }
    for (const int d : ordinals) {
        // cudaMemGetInfo reports on the current device: switch, then restore
        // the caller's (a scrape runs on a server thread that may share it).
        if (cudaSetDevice(d) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        GpuDeviceStats s;
        s.ordinal = d;
        s.total_bytes = total_b;
        s.free_bytes = free_b;
        s.used_bytes = total_b >= free_b ? total_b - free_b : 0;
        char bus_id[32] = {};  // "0000:3B:00.0" plus NUL; 13 bytes would do
        if (cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof bus_id), d) == cudaSuccess) {
            s.utilization = nvml_utilization(bus_id);
        } else {
            (void)cudaGetLastError();
        }
        out.push_back(s);
    }
    (void)cudaSetDevice(previous);
    (void)cudaGetLastError();
    return out;
}

}  // namespace specd::gpu
