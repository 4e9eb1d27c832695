// Writing K-quants (engine/quant_k_encode.cpp) and llama.cpp's Q4_K_M /
// Q5_K_M / Q6_K tensor mixes (engine/quant_mix.h): the round-trip error of
// each written type on random rows, the type each stories15M tensor gets
// (its 288-wide rows exercise every fallback), and that specd loads its own
// mixed files and decodes the f32 model's greedy text for a while.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/quant_k.h"
#include "engine/quant_mix.h"
#include "engine/tensor_type.h"
#include "support/models.h"

using namespace specd;

namespace {

// RMS of (dequantize(quantize(x)) - x) over RMS of x, x ~ N(0, 1) with a few outliers.
double round_trip_error(TensorType type) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t n = 256 * 64;
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (float& v : x) v = normal(rng);
    for (size_t i = 0; i < x.size(); i += 997) x[i] *= 6.0f;
    std::vector<uint8_t> q(tensor_row_bytes(type, n));
    quantize_row(type, x.data(), q.data(), n);
    dequantize_row(type, q.data(), y.data(), n);
    double e = 0.0, s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        e += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        s += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(e / s);
}

struct TempFile {
    std::string path;
    explicit TempFile(const std::string& name)
        : path((std::filesystem::temp_directory_path() / ("specd-mix-" + std::to_string(::getpid()) + "-" + name)).string()) {}
    ~TempFile() { std::filesystem::remove(path); }
};

std::vector<int32_t> greedy(const LlamaModel& model, const std::vector<int32_t>& prompt, int n) {
    ThreadPool pool(2);
    ForwardPass fwd(model, pool);
    PagedKvCache kv(fwd.kv_shape(static_cast<int32_t>(prompt.size()) + n + 1, 1));
    const int32_t seq = kv.create_sequence();
    std::vector<int32_t> out, next = prompt;
    for (int i = 0; i < n; ++i) {
        BatchItem item;
        item.seq = seq;
        item.tokens = next;
        auto logits = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
        const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(t);
        next = {t};
    }
    return out;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
}

}  // namespace

TEST_CASE("written K-quants and fallbacks: round trips with the error their bits allow, ordered by bits", "[quant_mix]") {
    std::map<TensorType, double> err;
    for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q4_K,
                         TensorType::Q5_K, TensorType::Q6_K}) {
        err[t] = round_trip_error(t);
        INFO(tensor_type_name(t) << " relative RMS error " << err[t]);
        CHECK(err[t] > 0.0);
    }
    INFO("q4_0 " << err[TensorType::Q4_0] << " q4_K " << err[TensorType::Q4_K] << " q5_0 " << err[TensorType::Q5_0] << " q5_1 "
                 << err[TensorType::Q5_1] << " q5_K " << err[TensorType::Q5_K] << " q6_K " << err[TensorType::Q6_K] << " q8_0 "
                 << err[TensorType::Q8_0]);
    // Each extra bit roughly halves the error; allow slack for the 6-bit scales.
    CHECK(err[TensorType::Q4_K] < 1.25 * err[TensorType::Q4_0]);
    CHECK(err[TensorType::Q5_0] < 0.65 * err[TensorType::Q4_0]);
    CHECK(err[TensorType::Q5_1] < 0.65 * err[TensorType::Q4_0]);
    CHECK(err[TensorType::Q5_K] < 0.65 * err[TensorType::Q4_K]);
    CHECK(err[TensorType::Q6_K] < 0.65 * err[TensorType::Q5_K]);
    CHECK(err[TensorType::Q8_0] < err[TensorType::Q6_K]);
    // All-zero and constant blocks decode exactly.
    for (TensorType t : {TensorType::Q5_0, TensorType::Q5_1, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
        std::vector<float> x(256, 0.0f), y(256, 1.0f);
        std::vector<uint8_t> q(tensor_row_bytes(t, 256));
        quantize_row(t, x.data(), q.data(), 256);
        dequantize_row(t, q.data(), y.data(), 256);
        INFO(tensor_type_name(t));
        CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
    }
}

TEST_CASE("quant mixes: llama.cpp's type per stories15M tensor, fallbacks for its 288-wide rows", "[quant_mix]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    const gguf::File f = gguf::File::open(test::model_path("stories15M-f32.gguf"));
    const std::vector<TensorType> q4 = quant_mix_types(f, QuantMix::Q4_K_M), q5 = quant_mix_types(f, QuantMix::Q5_K_M),
                                  q6 = quant_mix_types(f, QuantMix::Q6_K);
    REQUIRE(q4.size() == f.tensors().size());
    int checked = 0;
    for (size_t i = 0; i < f.tensors().size(); ++i) {
        const std::string& name = f.tensors()[i].name;
        INFO(name << ": " << tensor_type_name(q4[i]) << " / " << tensor_type_name(q5[i]) << " / " << tensor_type_name(q6[i]));
        // 6 layers: use_more_bits is true for layers 2 and 5.
        const bool more = name.rfind("blk.2.", 0) == 0 || name.rfind("blk.5.", 0) == 0;
        if (f.tensors()[i].ne.size() == 1) {
            CHECK((q4[i] == TensorType::F32 && q5[i] == TensorType::F32 && q6[i] == TensorType::F32));
        } else if (name == "output.weight" || (name == "token_embd.weight" && f.find_tensor("output.weight") == nullptr)) {
            // The output matrix (stories15M ties it to token_embd): Q6_K, but 288 % 256 != 0: q8_0
            CHECK((q4[i] == TensorType::Q8_0 && q5[i] == TensorType::Q8_0 && q6[i] == TensorType::Q8_0));
        } else if (name.find("ffn_down") != std::string::npos) {  // 768 = 3 x 256: real K-quants
            CHECK(q4[i] == (more ? TensorType::Q6_K : TensorType::Q4_K));
            CHECK(q5[i] == (more ? TensorType::Q6_K : TensorType::Q5_K));
            CHECK(q6[i] == TensorType::Q6_K);
        } else if (name.find("attn_v") != std::string::npos) {  // Q6_K -> q8_0 where more bits, else the fallbacks
            CHECK(q4[i] == (more ? TensorType::Q8_0 : TensorType::Q5_0));
            CHECK(q5[i] == (more ? TensorType::Q8_0 : TensorType::Q5_1));
            CHECK(q6[i] == TensorType::Q8_0);
        } else {  // 288-wide rows: Q4_K -> q5_0, Q5_K -> q5_1, Q6_K -> q8_0
            CHECK((q4[i] == TensorType::Q5_0 && q5[i] == TensorType::Q5_1 && q6[i] == TensorType::Q8_0));
        }
        ++checked;
    }
    CHECK(checked == static_cast<int>(f.tensors().size()));
    CHECK(quant_mix_from_name("q4_k_m") == QuantMix::Q4_K_M);
    CHECK(quant_mix_from_name("Q6_K") == QuantMix::Q6_K);
    CHECK_FALSE(quant_mix_from_name("Q4_K_S").has_value());
}

TEST_CASE("quant mixes: specd loads its own Q4_K_M / Q5_K_M / Q6_K files and decodes the f32 model's greedy text",
          "[quant_mix]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    const std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931};  // "<s> Once upon a time"
    const int n = 32;
    const auto f32 = test::load("stories15M-f32.gguf");
    const std::vector<int32_t> want = greedy(*f32, prompt, n);
    for (QuantMix mix : {QuantMix::Q4_K_M, QuantMix::Q5_K_M, QuantMix::Q6_K}) {
        const TempFile out(std::string(quant_mix_name(mix)) + ".gguf");
        size_t calls = 0;
        const QuantizeStats stats = quantize_model_mix(test::model_path("stories15M-f32.gguf"), out.path, mix,
                                                       [&](const QuantizeProgress& p) { calls = p.tensor; });
        CHECK(calls == stats.n_tensors);
        const gguf::File file = gguf::File::open(out.path);
        CHECK(file.get_u32("general.file_type") == quant_mix_file_type(mix));
        const auto model = LlamaModel::load(out.path);
        const size_t agree = common_prefix(want, greedy(*model, prompt, n));
        INFO(quant_mix_name(mix) << ": " << agree << " of " << n << " greedy tokens agree with f32");
        CHECK(agree >= (mix == QuantMix::Q4_K_M ? 12u : 16u));
    }
}
