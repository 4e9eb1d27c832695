// [gpu] tests of the CUDA backend: each runs one device check of
// gpu_checks.cpp. Without a usable device each prints
// "skipped: no CUDA device (<why>)" and returns; CMake registers these
// tests with that text as SKIP_REGULAR_EXPRESSION, so ctest shows them as
// Skipped rather than passed.
#include <sstream>

#include <catch2/catch.hpp>

#include "gpu/device.h"
#include "gpu_checks.h"

using namespace specd::gpu;

namespace {

void run_device_check(const char* name) {
    static const DeviceProbe probe = probe_devices();
    if (!probe.usable()) {
        WARN("skipped: no CUDA device (" << probe.reason << ")");
        return;
    }
    std::ostringstream log;
    const checks::Context ctx{checks::default_models_dir()};
    try {
        checks::find(name).run(ctx, log);
    } catch (const std::exception& e) {
        INFO(log.str());
        FAIL(e.what());
    }
    INFO(log.str());
    SUCCEED();
}

}  // namespace

TEST_CASE("gpu kernel: embedding gather equals the table rows", "[gpu]") { run_device_check("embed_gather"); }
TEST_CASE("gpu kernel: RMSNorm matches the CPU", "[gpu]") { run_device_check("rms_norm"); }
TEST_CASE("gpu kernel: biases, Q/K norms, RoPE (adjacent, NEOX, partial) and K/V stores into the paged pool match the CPU", "[gpu]") { run_device_check("rope_store_kv"); }
TEST_CASE("gpu kernel: paged attention matches the CPU reference", "[gpu]") { run_device_check("paged_attention"); }
TEST_CASE("gpu kernel: SwiGLU and GeGLU match the CPU", "[gpu]") { run_device_check("swiglu"); }
TEST_CASE("gpu kernel: small-batch GEMV matches f64 sums and gives each row the bits it gets alone", "[gpu]") { run_device_check("gemv"); }
TEST_CASE("gpu kernel: q|k|v product with RoPE and the K/V stores fused equals the two kernels", "[gpu]") { run_device_check("qkv_rope"); }
TEST_CASE("gpu kernel: argmax, softmax and top-k match the CPU", "[gpu]") { run_device_check("sampling"); }
TEST_CASE("gpu forward: logits match the CPU forward pass", "[gpu]") { run_device_check("forward_logits"); }
TEST_CASE("gpu greedy: speculation on the GPU equals plain GPU decoding", "[gpu]") { run_device_check("greedy_speculative"); }
TEST_CASE("gpu verifier: greedy steps bring back only the argmax per row, same outcomes", "[gpu]") { run_device_check("verifier_greedy"); }
TEST_CASE("gpu streams: the verifier's and the draft's work overlap", "[gpu]") { run_device_check("stream_overlap"); }
TEST_CASE("gpu graphs: replayed decode and verification steps give the eager logits", "[gpu]") { run_device_check("cuda_graphs"); }
TEST_CASE("gpu families: Llama 3, Qwen2, Qwen3, Gemma 3 and Phi-3 logits and greedy tokens match the CPU forward", "[gpu][families]") {
    run_device_check("family_forward");
}
