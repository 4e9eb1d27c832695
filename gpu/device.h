// CUDA device discovery that never throws (no driver, no device, a driver
// older than the toolkit all become a reason string), and the choice
// between the CPU and a GPU for --device auto|cpu|cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace specd::gpu {

struct DeviceInfo {
    int ordinal = 0;
    std::string name;            // "NVIDIA H200"
    int compute_major = 0;       // 9 for sm_90
    int compute_minor = 0;
    size_t total_bytes = 0;      // global memory
    size_t free_bytes = 0;       // free when probed
    double memory_bandwidth_gbs = 0.0;  // peak, from the memory clock and bus width (0 when the runtime doesn't say)
};

struct DeviceProbe {
    std::vector<DeviceInfo> devices;  // usable devices (empty: see `reason`)
    std::string reason;               // why there is none, e.g. "cudaGetDeviceCount: CUDA driver version is insufficient
                                      //   for CUDA runtime version (cudaErrorInsufficientDriver, error 35)"
    bool usable() const { return !devices.empty(); }
};

// Asks the CUDA runtime for its devices. Never throws. Defined in
// device_probe.cpp, which only builds with CUDA (library specd_gpu); the
// rest of this header is plain C++ (specd_gpu_host).
DeviceProbe probe_devices();

enum class DeviceRequest { Auto, Cpu, Cuda };

// "auto" / "cpu" / "cuda" (RuntimeConfig::device, already validated);
// throws specd::Error for anything else.
DeviceRequest parse_device_request(const std::string& word);

struct BackendChoice {
    bool use_cuda = false;
    int device = 0;             // the CUDA ordinal when use_cuda
    std::string log_line;       // what to log once (empty: nothing to say)
    std::string error;          // non-empty: refuse to start with this message
};

// Pure decision from a probe (testable without a device):
//   cpu  → the CPU, no line;
//   auto → GPU 0 when usable ("specd: running on CUDA device 0 (NVIDIA H200, sm_90, 139.8 GiB)"),
//          else the CPU with one line
//          "specd: no CUDA device (<reason>): running on the CPU";
//   cuda → GPU 0, or an error "--device cuda: no CUDA device (<reason>)".
// `cuda_built` false (a build without CUDA): auto → CPU saying so, cuda → error.
BackendChoice choose_backend(DeviceRequest request, const DeviceProbe& probe, bool cuda_built = true);

}  // namespace specd::gpu
