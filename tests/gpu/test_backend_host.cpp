// Host-side logic of the CUDA backend that needs no device, so it runs in
// every build: backend choice for --device, CUDA error text, weight
// conversion to 16-bit, RoPE tables, the batch layout (block-table
// packing, validation, all-or-nothing reservation), KV caches without host
// storage, the backend factory on the CPU, the `device` config field and
// the CUDA-graph policy (which steps replay a graph, the graph cache).
#include <cmath>
#include <cstring>
#include <memory>

#include <catch2/catch.hpp>

#include "actors/backend_factory.h"
#include "config/runtime_config.h"
#include "engine/forward.h"
#include "engine/tensor_type.h"
#include "gpu/batch_layout.h"
#include "gpu/cuda_error.h"
#include "gpu/device.h"
#include "gpu/gpu_metrics.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_convert.h"
#include "support/family_models.h"
#include "support/models.h"
#include "support/tiny_model.h"
#ifdef SPECD_HAS_CUDA
#include "gpu/device_model.h"
#endif

using namespace specd;
using namespace specd::gpu;

namespace {

const char* kNoDriver =
    "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver, error 35)";

DeviceProbe no_device() {
    DeviceProbe p;
    p.reason = kNoDriver;
    return p;
}

DeviceProbe one_h200() {
    DeviceProbe p;
    DeviceInfo d;
    d.ordinal = 0;
    d.name = "NVIDIA H200";
    d.compute_major = 9;
    d.compute_minor = 0;
    d.total_bytes = size_t{150} << 30;
    p.devices.push_back(d);
    return p;
}

KvCacheShape small_shape(int32_t n_blocks = 8) {
    KvCacheShape s;
    s.n_layers = 2;
    s.kv_dim = 8;
    s.block_size = 4;
    s.n_blocks = n_blocks;
    s.max_seq_len = 32;
    s.max_sequences = 4;
    return s;
}

const BatchLimits kLimits{100, 64, 16, 8};

}  // namespace

TEST_CASE("backend choice: cpu, auto and cuda with and without a device", "[gpu-host]") {
    SECTION("cpu never probes and never logs") {
        const BackendChoice c = choose_backend(DeviceRequest::Cpu, one_h200());
        CHECK_FALSE(c.use_cuda);
        CHECK(c.log_line.empty());
        CHECK(c.error.empty());
    }
    SECTION("auto without a device runs on the CPU and says why in one line") {
        const BackendChoice c = choose_backend(DeviceRequest::Auto, no_device());
        CHECK_FALSE(c.use_cuda);
        CHECK(c.error.empty());
        CHECK(c.log_line == std::string("specd: no CUDA device (") + kNoDriver + "): running on the CPU");
        CHECK(c.log_line.find('\n') == std::string::npos);
    }
    SECTION("cuda without a device is an error naming the reason") {
        const BackendChoice c = choose_backend(DeviceRequest::Cuda, no_device());
        CHECK_FALSE(c.use_cuda);
        CHECK(c.error == std::string("--device cuda: no CUDA device (") + kNoDriver + ")");
    }
    SECTION("auto and cuda with a device pick device 0") {
        for (DeviceRequest r : {DeviceRequest::Auto, DeviceRequest::Cuda}) {
            const BackendChoice c = choose_backend(r, one_h200());
            CHECK(c.use_cuda);
            CHECK(c.device == 0);
            CHECK(c.error.empty());
            CHECK(c.log_line == "specd: running on CUDA device 0 (NVIDIA H200, sm_90, 150.0 GiB)");
        }
    }
    SECTION("a build without CUDA: auto falls back, cuda refuses") {
        CHECK(choose_backend(DeviceRequest::Auto, one_h200(), false).log_line ==
              "specd: no CUDA device (this build has no CUDA backend): running on the CPU");
        CHECK(choose_backend(DeviceRequest::Cuda, one_h200(), false).error ==
              "--device cuda: no CUDA device (this build has no CUDA backend)");
    }
    SECTION("device words") {
        CHECK(parse_device_request("auto") == DeviceRequest::Auto);
        CHECK(parse_device_request("cpu") == DeviceRequest::Cpu);
        CHECK(parse_device_request("cuda") == DeviceRequest::Cuda);
        CHECK_THROWS_WITH(parse_device_request("gpu"), "device: 'gpu' is not one of auto, cpu, cuda");
    }
}

#ifdef SPECD_HAS_CUDA
TEST_CASE("device probe never throws and explains an empty result", "[gpu-host]") {
    const DeviceProbe p = probe_devices();
    if (p.usable()) {
        CHECK(p.reason.empty());
        CHECK_FALSE(p.devices.front().name.empty());
    } else {
        // The machines without a GPU this project builds on: no driver, error 35.
        CHECK(p.reason.rfind("cudaGetDeviceCount: ", 0) == 0);
        CHECK(p.reason.find("error ") != std::string::npos);
    }
}
#endif

TEST_CASE("CUDA error messages name the call, the place and CUDA's text", "[gpu-host]") {
    CHECK(format_cuda_error("CUDA", "cudaMalloc(&ptr_, bytes)", "/work/x/gpu/cuda_handles.cpp", 31, 2, "cudaErrorMemoryAllocation",
                            "out of memory") ==
          "CUDA: cudaMalloc(&ptr_, bytes) failed at gpu/cuda_handles.cpp:31: out of memory (cudaErrorMemoryAllocation, error 2)");
    CHECK(format_cuda_error("cuBLAS", "cublasCreate(&handle_)", "cuda_handles.cpp", 7, 1, "", "") ==
          "cuBLAS: cublasCreate(&handle_) failed at cuda_handles.cpp:7: unknown error (error 1)");
    const CudaError e("x", 35);
    CHECK(e.code() == 35);
    CHECK_THROWS_AS(throw CudaError("x", 1), Error);
}

TEST_CASE("weights convert to f16 / bf16 on the host exactly as dequantise-then-round", "[gpu-host]") {
    const int64_t rows = 3, cols = 64;
    std::vector<float> src(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));

    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0}) {
        const size_t row_bytes = tensor_row_bytes(type, cols);
        std::vector<uint8_t> file(row_bytes * rows);
        for (int64_t r = 0; r < rows; ++r) quantize_row(type, &src[static_cast<size_t>(r * cols)], &file[r * row_bytes], cols);
        const WeightMatrix w{type, file.data(), rows, cols};
        for (HalfType ht : {HalfType::F16, HalfType::BF16}) {
            INFO(tensor_type_name(type) << " -> " << half_type_name(ht));
            const std::vector<uint16_t> got = convert_to_half(w, ht);
            REQUIRE(got.size() == static_cast<size_t>(rows * cols));
            std::vector<float> row(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(type, &file[r * row_bytes], row.data(), cols);
                for (int64_t c = 0; c < cols; ++c) {
                    const uint16_t want = ht == HalfType::F16 ? fp32_to_fp16(row[static_cast<size_t>(c)]) : fp32_to_bf16(row[static_cast<size_t>(c)]);
                    REQUIRE(got[static_cast<size_t>(r * cols + c)] == want);
                }
            }
            // A row range lands at the start of dst.
            std::vector<uint16_t> part(static_cast<size_t>(cols));
            convert_rows_to_half(w, 2, 3, ht, part.data());
            CHECK(std::equal(part.begin(), part.end(), got.begin() + 2 * cols));
        }
        CHECK_THROWS_AS(convert_rows_to_half(w, 2, 4, HalfType::F16, nullptr), Error);
    }
    CHECK(half_to_float(float_to_half(1.5f, HalfType::F16), HalfType::F16) == 1.5f);
    CHECK(half_to_float(float_to_half(-3.0f, HalfType::BF16), HalfType::BF16) == -3.0f);
    CHECK(std::string(half_type_name(HalfType::BF16)) == "bf16");
}

TEST_CASE("RoPE tables follow the CPU engine's angles", "[gpu-host]") {
    LlamaHparams hp;
    hp.rope_dim = 8;
    hp.rope_freq_base = 10000.0f;
    std::vector<float> c, s;
    rope_tables(hp, 5, c, s);
    REQUIRE(c.size() == 20);
    REQUIRE(s.size() == 20);
    for (int p = 0; p < 5; ++p) {
        for (int i = 0; i < 4; ++i) {
            const double theta = p * std::pow(10000.0, -2.0 * i / 8);
            CHECK(c[static_cast<size_t>(p * 4 + i)] == static_cast<float>(std::cos(theta)));
            CHECK(s[static_cast<size_t>(p * 4 + i)] == static_cast<float>(std::sin(theta)));
        }
    }
    CHECK(c[0] == 1.0f);
    CHECK(s[0] == 0.0f);
}

TEST_CASE("RoPE tables of sliding-window layers use their own base, unscaled", "[gpu-host]") {
    LlamaHparams hp;
    hp.rope_dim = 8;
    hp.rope_freq_base = 1000000.0f;
    hp.rope_freq_scale = 0.125f;
    hp.rope_freq_base_swa = 10000.0f;
    hp.rope_attn_factor = 1.5f;
    std::vector<float> c, s, cw, sw;
    rope_tables(hp, 5, c, s);
    rope_tables(hp, 5, cw, sw, true);
    for (int p = 0; p < 5; ++p) {
        for (int i = 0; i < 4; ++i) {
            const double theta = p * std::pow(1000000.0, -2.0 * i / 8) * 0.125, theta_swa = p * std::pow(10000.0, -2.0 * i / 8);
            CHECK(c[static_cast<size_t>(p * 4 + i)] == static_cast<float>(std::cos(theta) * 1.5f));
            CHECK(sw[static_cast<size_t>(p * 4 + i)] == static_cast<float>(std::sin(theta_swa) * 1.5f));
            // The CPU forward's table expression, windowed.
            CHECK(cw[static_cast<size_t>(p * 4 + i)] == static_cast<float>(std::cos(p * hp.rope_frequency(i, true)) * hp.rope_attn_factor));
        }
    }
}

#ifdef SPECD_HAS_CUDA
TEST_CASE("the CUDA backend runs every family's graph: nothing of any preset is refused at upload", "[gpu-host]") {
    for (const std::string& family : test::family_preset_names()) {
        const std::string path = test::write_family_model(test::temp_path("cuda-" + family + ".gguf"), test::family_preset(family),
                                                          test::stories_vocab());
        auto model = LlamaModel::load(path);
        std::filesystem::remove(path);
        INFO(family << ": beyond Llama 2: " << model->graph_beyond_llama2());
        CHECK(model->graph_beyond_llama2().empty() == (family == "llama3"));  // the presets do use the features
        CHECK(cuda_unsupported_features(*model).empty());
    }
    CHECK(cuda_unsupported_features(*test::load("stories15M-q8_0.gguf")).empty());
}
#endif

TEST_CASE("batch layout packs rows, logit rows and block tables", "[gpu-host]") {
    PagedKvCache kv(small_shape(), KvStorage::None);
    const int32_t a = kv.create_sequence(), b = kv.create_sequence();
    // Interleaved growth: a's blocks are not contiguous in the pool.
    REQUIRE(kv.reserve(a, 4));
    REQUIRE(kv.reserve(b, 4));
    kv.set_length(a, 3);
    kv.set_length(b, 2);
    const std::vector<int32_t> ta = {10, 11, 12}, tb = {20};
    const std::vector<BatchItem> items = {{a, ta, true}, {b, tb, false}};
    BatchLayout l;
    plan_batch(kv, items, kLimits, l);

    CHECK(l.n_rows == 4);
    CHECK(l.n_out == 4);  // 3 rows for the verification, 1 for the decode
    CHECK(l.n_items == 2);
    CHECK(l.table_stride == 8);  // 32 positions / 4 per block
    CHECK(l.max_positions == 6);  // a: 3 + 3
    CHECK(std::vector<int32_t>(l.row_token().begin(), l.row_token().end()) == std::vector<int32_t>{10, 11, 12, 20});
    CHECK(std::vector<int32_t>(l.row_pos().begin(), l.row_pos().end()) == std::vector<int32_t>{3, 4, 5, 2});
    CHECK(std::vector<int32_t>(l.row_item().begin(), l.row_item().end()) == std::vector<int32_t>{0, 0, 0, 1});
    CHECK(std::vector<int32_t>(l.out_row().begin(), l.out_row().end()) == std::vector<int32_t>{0, 1, 2, 3});
    // a now has 2 blocks (6 positions), b 1; both tables match the host cache, -1 beyond.
    const auto table_a = l.block_table(0), table_b = l.block_table(1);
    REQUIRE(kv.block_table(a).size() == 2);
    CHECK(table_a[0] == kv.block_table(a)[0]);
    CHECK(table_a[1] == kv.block_table(a)[1]);
    CHECK(table_a[1] != table_a[0] + 1);  // b's block sits between a's
    CHECK(table_b[0] == kv.block_table(b)[0]);
    for (int32_t i = 2; i < 8; ++i) CHECK(table_a[static_cast<size_t>(i)] == -1);
    for (int32_t i = 1; i < 8; ++i) CHECK(table_b[static_cast<size_t>(i)] == -1);
    CHECK(l.packed.size() <= packed_capacity(kv.shape(), kLimits));
    // Lengths move only when the caller says the device ran the batch.
    CHECK(kv.length(a) == 3);
    CHECK(kv.length(b) == 2);
}

TEST_CASE("graph keys: small steps get one, by shape and position bucket, and long ones none", "[gpu-host]") {
    BatchLayout l;
    l.n_rows = 9;
    l.n_out = 9;
    l.n_items = 1;
    l.max_positions = 130;
    GraphPolicy policy;
    policy.position_step = 64;
    policy.max_rows = 16;
    const auto key = graph_key(l, 256, policy, 1 << 20);
    REQUIRE(key);
    CHECK(*key == GraphKey{9, 9, 1, 192});  // 130 rounded up to the bucket
    // Every position of the bucket shares the key; the next bucket does not.
    l.max_positions = 129;
    CHECK(*graph_key(l, 256, policy, 1 << 20) == *key);
    l.max_positions = 193;
    CHECK(graph_key(l, 256, policy, 1 << 20)->positions == 256);
    // The bucket never passes the cache's longest sequence, never falls below the batch's need.
    l.max_positions = 250;
    CHECK(graph_key(l, 250, policy, 1 << 20)->positions == 250);
    CHECK(graph_key(l, 200, policy, 1 << 20)->positions == 250);
    // A shape change is a new key.
    l.max_positions = 130;
    l.n_out = 1;
    CHECK(!(*graph_key(l, 256, policy, 1 << 20) == *key));
    // A bucket past the backend's shared-memory bound gets no graph; at the bound it does.
    CHECK(!graph_key(l, 256, policy, 191));
    CHECK(graph_key(l, 256, policy, 192));
    // Prefill-sized batches and empty ones run without a graph.
    l.n_rows = 17;
    CHECK(!graph_key(l, 256, policy, 1 << 20));
    l.n_rows = 0;
    CHECK(!graph_key(l, 256, policy, 1 << 20));
}

TEST_CASE("graph cache: warm up, then capture, then replay, and least recently used goes first", "[gpu-host]") {
    using Cache = GraphCache<std::unique_ptr<int>>;
    Cache cache(2);
    const GraphKey a{1, 1, 1, 256}, b{2, 2, 2, 256}, c{9, 9, 1, 256};
    CHECK(cache.plan(a) == Cache::Action::Warmup);
    CHECK(cache.find(a) == nullptr);
    CHECK(cache.plan(a) == Cache::Action::Capture);
    CHECK_FALSE(cache.insert(a, std::make_unique<int>(1)));
    CHECK(cache.plan(a) == Cache::Action::Replay);
    REQUIRE(cache.find(a) != nullptr);
    CHECK(**cache.find(a) == 1);

    CHECK(cache.plan(b) == Cache::Action::Warmup);
    CHECK(cache.plan(b) == Cache::Action::Capture);
    CHECK_FALSE(cache.insert(b, std::make_unique<int>(2)));
    CHECK(cache.plan(a) == Cache::Action::Replay);  // a is now more recent than b
    CHECK(cache.plan(c) == Cache::Action::Warmup);
    CHECK(cache.plan(c) == Cache::Action::Capture);
    CHECK(cache.insert(c, std::make_unique<int>(3)));  // full: b goes
    CHECK(cache.size() == 2);
    CHECK(cache.find(b) == nullptr);
    CHECK(cache.find(a) != nullptr);
    CHECK(cache.find(c) != nullptr);
    // b must be seen twice again before it is captured anew.
    CHECK(cache.plan(b) == Cache::Action::Warmup);

    cache.clear();
    CHECK(cache.size() == 0);
    CHECK(cache.plan(a) == Cache::Action::Warmup);
}

TEST_CASE("graph cache: first sightings are remembered in bounded number", "[gpu-host]") {
    using Cache = GraphCache<std::unique_ptr<int>>;
    Cache cache(2);  // remembers 4 * 2 sightings
    for (int32_t rows = 1; rows <= 9; ++rows) CHECK(cache.plan(GraphKey{rows, 1, 1, 64}) == Cache::Action::Warmup);
    // The oldest sighting was forgotten, the newest is still there.
    CHECK(cache.plan(GraphKey{1, 1, 1, 64}) == Cache::Action::Warmup);
    CHECK(cache.plan(GraphKey{9, 1, 1, 64}) == Cache::Action::Capture);
}

TEST_CASE("batch layout refuses bad batches like the CPU forward pass", "[gpu-host]") {
    PagedKvCache kv(small_shape(), KvStorage::None);
    const int32_t a = kv.create_sequence(), b = kv.create_sequence();
    BatchLayout l;
    const std::vector<int32_t> one = {1}, bad = {100}, many(17, 1), nine(9, 1), long_seq(33, 1);
    auto plan = [&](std::vector<BatchItem> items) { plan_batch(kv, items, kLimits, l); };
    CHECK_THROWS_WITH(plan({{7, one, false}}), "forward: unknown KV sequence 7");
    CHECK_THROWS_WITH(plan({{a, {}, false}}), "forward: batch item without tokens");
    CHECK_THROWS_WITH(plan({{a, one, false}, {a, one, false}}), "forward: sequence 0 twice in one batch");
    CHECK_THROWS_WITH(plan({{a, bad, false}}), "forward: token id 100 is outside the vocabulary (0..99)");
    CHECK_THROWS_WITH(plan({{a, many, false}}), "forward: batch of more than 16 tokens");
    CHECK_THROWS_WITH(plan({{a, nine, true}}), "forward: more than 8 logit rows requested");
    BatchLimits small_ctx = kLimits;
    small_ctx.n_ctx_max = 8;
    CHECK_THROWS_WITH(plan_batch(kv, std::vector<BatchItem>{{a, nine, false}}, small_ctx, l),
                      "forward: sequence would grow to 9 positions, beyond the context size 8");
    CHECK(kv.free_blocks() == 8);  // nothing was reserved by a refused batch
    (void)b;
}

TEST_CASE("batch layout: a full pool reserves nothing and throws KvCacheFull", "[gpu-host]") {
    PagedKvCache kv(small_shape(3), KvStorage::None);
    const int32_t a = kv.create_sequence(), b = kv.create_sequence();
    const std::vector<int32_t> four(4, 1), eight(8, 1);
    BatchLayout l;
    // a fits (1 block), b needs 2 more than the 2 left after a: the whole batch is refused.
    const std::vector<BatchItem> items = {{a, four, false}, {b, std::vector<int32_t>(12, 1), false}};
    std::vector<int32_t> twelve(12, 1);
    const std::vector<BatchItem> items2 = {{a, four, false}, {b, twelve, false}};
    CHECK_THROWS_AS(plan_batch(kv, items2, kLimits, l), KvCacheFull);
    CHECK(kv.free_blocks() == 3);
    CHECK(kv.block_table(a).empty());
    CHECK(kv.block_table(b).empty());
    const std::vector<BatchItem> fits = {{a, four, false}, {b, eight, false}};
    plan_batch(kv, fits, kLimits, l);
    CHECK(kv.free_blocks() == 0);
    (void)items;
}

TEST_CASE("a KV cache without host storage keeps the bookkeeping only", "[gpu-host]") {
    PagedKvCache kv(small_shape(), KvStorage::None);
    CHECK_FALSE(kv.has_storage());
    CHECK(PagedKvCache(small_shape()).has_storage());
    const int32_t s = kv.create_sequence();
    REQUIRE(kv.reserve(s, 9));
    CHECK(kv.block_table(s).size() == 3);
    kv.set_length(s, 9);
    kv.truncate(s, 4);
    CHECK(kv.block_table(s).size() == 1);
    CHECK(kv.free_blocks() == 7);
}

TEST_CASE("the CPU forward pass refuses a cache without host storage", "[gpu-host]") {
    auto model = test::load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(64, 1), KvStorage::None);
    const int32_t s = kv.create_sequence();
    const std::vector<int32_t> tokens = {1};
    const BatchItem item{s, tokens, false};
    CHECK_THROWS_WITH(fwd.forward(kv, std::span(&item, 1)), "forward: the CPU backend needs a KV cache with host storage");
    CHECK(fwd.make_kv_cache(fwd.kv_shape(64, 1))->has_storage());
    CHECK(fwd.name() == "cpu");
}

TEST_CASE("backend factory: --device cpu gives CPU forward passes, cuda without a device refuses", "[gpu-host]") {
    auto target = test::load("stories15M-q8_0.gguf");
    ThreadPool pool(1);
    RuntimeConfig config;
    config.device = "cpu";
    auto factory = BackendFactory::create(config, target.get(), nullptr, &pool, nullptr);
    CHECK(factory->name() == "cpu");
    auto fwd = factory->make_target(ForwardOptions{});
    CHECK(fwd->name() == "cpu");
    KvCacheShape shape = ForwardBackend::kv_shape_for(*target, 256, 4);
    CHECK(shape.type == TensorType::F16);  // the default
    CHECK(factory->kv_block_bytes(shape) == 2u * 6u * 16u * 288u * 2u);
    shape.type = TensorType::F32;  // twice the bytes
    CHECK(factory->kv_block_bytes(shape) == 2u * 6u * 16u * 288u * sizeof(float));
    CHECK(factory->kv_memory_bytes(12345) == 12345);
    CHECK_THROWS_AS(factory->make_draft(ForwardOptions{}), Error);
    // The draft is made on the same backend when there is one.
    auto with_draft = BackendFactory::create(config, target.get(), target.get(), &pool, &pool);
    CHECK(with_draft->make_draft(ForwardOptions{})->name() == "cpu");
    // Nothing GPU for /metrics on the CPU.
    CHECK(factory->gpu_stats().empty());

#ifdef SPECD_HAS_CUDA
    const bool device_here = probe_devices().usable();
#else
    const bool device_here = false;
#endif
    if (!device_here) {
        config.device = "auto";
        CHECK(BackendFactory::create(config, target.get(), nullptr, &pool, nullptr)->name() == "cpu");
        config.device = "cuda";
        CHECK_THROWS_WITH(BackendFactory::create(config, target.get(), nullptr, &pool, nullptr),
                          Catch::Matchers::StartsWith("--device cuda: no CUDA device ("));
    }
}

TEST_CASE("the device field: key, environment, flag and allowed words", "[gpu-host]") {
    const ConfigField* f = find_config_field("device");
    REQUIRE(f != nullptr);
    CHECK(std::string(f->env) == "SPECD_DEVICE");
    CHECK(std::string(f->flag) == "--device");
    CHECK(f->choices.size() == 3);
    CHECK(RuntimeConfig{}.device == "auto");
    ConfigLoader loader;
    loader.set("device", "cuda", "flag --device");
    CHECK(loader.config().device == "cuda");
    CHECK_THROWS_AS(loader.set("device", "gpu", "flag --device"), Error);
    loader.load_environment([](const char* name) -> std::optional<std::string> {
        if (std::strcmp(name, "SPECD_DEVICE") == 0) return std::string("cpu");
        return std::nullopt;
    });
    CHECK(loader.config().device == "cpu");
}

TEST_CASE("gpu metrics: NVML missing means no utilisation, not an error", "[gpu-host]") {
    // The first call decides the library for the process (catch_discover_tests
    // runs each test case in its own process).
    CHECK_FALSE(nvml_utilization("00000000:3B:00.0", "libspecd-no-such-nvml.so.1").has_value());
    CHECK_FALSE(nvml_utilization("00000000:3B:00.0").has_value());
}
