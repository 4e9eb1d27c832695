#include "gpu/device.h"

#include <cstdio>

#include "engine/error.h"

namespace specd::gpu {

namespace {

std::string gib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

}  // namespace

DeviceRequest parse_device_request(const std::string& word) {
    if (word == "auto") return DeviceRequest::Auto;
    if (word == "cpu") return DeviceRequest::Cpu;
    if (word == "cuda") return DeviceRequest::Cuda;
    throw Error("device: '" + word + "' is not one of auto, cpu, cuda");
}

BackendChoice choose_backend(DeviceRequest request, const DeviceProbe& probe, bool cuda_built) {
    BackendChoice choice;
    if (request == DeviceRequest::Cpu) return choice;
    const std::string why = !cuda_built ? std::string("this build has no CUDA backend") : probe.reason;
    if (!cuda_built || !probe.usable()) {
        if (request == DeviceRequest::Cuda) {
            choice.error = "--device cuda: no CUDA device (" + why + ")";
        } else {
            choice.log_line = "specd: no CUDA device (" + why + "): running on the CPU";
        }
        return choice;
    }
    const DeviceInfo& d = probe.devices.front();
    choice.use_cuda = true;
    choice.device = d.ordinal;
    choice.log_line = "specd: running on CUDA device " + std::to_string(d.ordinal) + " (" + d.name + ", sm_" +
                      std::to_string(d.compute_major) + std::to_string(d.compute_minor) + ", " + gib(d.total_bytes) + ")";
    return choice;
}

}  // namespace specd::gpu
