// The device checks of the CUDA backend, as plain functions, so that two
// runners share them: the Catch2 suite (test_backend_device.cpp, [gpu],
// skipped visibly without a device) and gpu_check (gpu_check_main.cpp, no
// Catch2: what tools/gpu-check.sh runs on a bare GPU machine). A check
// throws CheckFailed (or any std::exception) on failure and writes what it
// measured to `log`.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace specd::gpu::checks {

struct Context {
    std::string models_dir;  // where stories15M-*.gguf are
};

class CheckFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Check {
    const char* name;   // short id: "rms_norm", "forward_logits", ...
    const char* what;   // one line for reports
    void (*run)(const Context& context, std::ostream& log);
};

const std::vector<Check>& all();
// Throws std::invalid_argument for an unknown name.
const Check& find(std::string_view name);

std::string default_models_dir();  // $SPECD_MODELS_DIR, else the compiled-in models/

}  // namespace specd::gpu::checks
