// gpu_check: runs the CUDA backend's device checks (gpu_checks.h) without
// Catch2, for tools/gpu-check.sh on a bare GPU machine.
//   gpu_check [--models DIR] [NAME...]     (no names: all checks)
//   gpu_check --quantize-q8_0 IN.gguf OUT.gguf   (makes the draft model where only the f32 file was carried)
// Prints one line per check (PASS/FAIL and what it measured). Exit status:
// 0 all passed, 1 a check failed, 77 no usable CUDA device (skipped).
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model_convert.h"
#include "gpu/device.h"
#include "gpu_checks.h"

using namespace specd::gpu;

int main(int argc, char** argv) {
    if (argc == 4 && std::strcmp(argv[1], "--quantize-q8_0") == 0) {
        try {
            const specd::QuantizeStats st = specd::quantize_model(argv[2], argv[3], specd::TensorType::Q8_0);
            std::cout << "gpu_check: wrote " << argv[3] << " (" << st.n_converted << " tensors as q8_0)\n";
            return 0;
        } catch (const std::exception& e) {
            std::cout << "gpu_check: " << e.what() << "\n";
            return 1;
        }
    }
    checks::Context ctx{checks::default_models_dir()};
    std::vector<std::string> names;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--models") == 0 && i + 1 < argc) {
            ctx.models_dir = argv[++i];
        } else {
            names.emplace_back(argv[i]);
        }
    }
    const DeviceProbe probe = probe_devices();
    if (!probe.usable()) {
        std::cout << "gpu_check: skipped: no CUDA device (" << probe.reason << ")\n";
        return 77;
    }
    for (const DeviceInfo& d : probe.devices) {
        std::cout << "device " << d.ordinal << ": " << d.name << ", sm_" << d.compute_major << d.compute_minor << ", "
                  << d.total_bytes / (1 << 20) << " MiB\n";
    }
    if (names.empty()) {
        for (const checks::Check& c : checks::all()) names.emplace_back(c.name);
    }
    int failed = 0;
    for (const std::string& name : names) {
        std::ostringstream log;
        try {
            const checks::Check& c = checks::find(name);
            c.run(ctx, log);
            std::cout << "PASS " << name << ": " << c.what << "\n" << log.str();
        } catch (const std::exception& e) {
            ++failed;
            std::cout << "FAIL " << name << ": " << e.what() << "\n" << log.str();
        }
        std::cout.flush();
    }
    std::cout << (failed ? "gpu_check: " + std::to_string(failed) + " of " + std::to_string(names.size()) + " checks failed\n"
                         : "gpu_check: all " + std::to_string(names.size()) + " checks passed\n");
    return failed ? 1 : 0;
}
