// specd inflate (engine/model_inflate.h): stories15M widened to a larger
// shape plus an extra layer must compute its logits (to float rounding) and
// so its greedy text, in f32 and after q8_0 quantisation; bad shapes get a
// one-line error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/error.h"
#include "engine/forward.h"
#include "engine/model_convert.h"
#include "engine/model_inflate.h"
#include "support/models.h"

using namespace specd;

namespace {

// A fresh file name under the temp directory, removed at scope exit.
struct TempFile {
    std::string path;
    explicit TempFile(const std::string& name)
        : path((std::filesystem::temp_directory_path() / ("specd-inflate-" + std::to_string(::getpid()) + "-" + name)).string()) {}
    ~TempFile() { std::filesystem::remove(path); }
};

struct Run {
    std::vector<int32_t> tokens;        // greedy continuation
    std::vector<std::vector<float>> logits;  // (steps, n_vocab) the logits each token was chosen from
};

// Greedy decoding of n tokens after `prompt`, f32 KV cache.
Run greedy(const LlamaModel& model, const std::vector<int32_t>& prompt, int n) {
    ThreadPool pool(2);
    ForwardPass fwd(model, pool);
    KvCacheShape shape = fwd.kv_shape(static_cast<int32_t>(prompt.size()) + n + 1, 1);
    shape.type = TensorType::F32;
    PagedKvCache kv(shape);
    const int32_t seq = kv.create_sequence();
    Run run;
    std::vector<int32_t> next = prompt;
    for (int i = 0; i < n; ++i) {
        BatchItem item;
        item.seq = seq;
        item.tokens = next;
        auto logits = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
        run.logits.emplace_back(logits.begin(), logits.end());
        const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        run.tokens.push_back(t);
        next = {t};
    }
    return run;
}

const std::vector<int32_t> kPrompt = {1, 9038, 2501, 263, 931};  // "<s> Once upon a time"

}  // namespace

TEST_CASE("inflate: stories15M widened to dim 384, ffn 1024 and one more layer computes its logits and greedy text",
          "[inflate]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    const TempFile wide("f32.gguf");
    InflateOptions o;
    o.dim = 384;
    o.ffn = 1024;
    o.extra_layers = 1;
    size_t calls = 0, last_tensor = 0, n_tensors = 0;
    const InflateStats stats = inflate_model(test::model_path("stories15M-f32.gguf"), wide.path, o, [&](const InflateProgress& p) {
        ++calls;
        CHECK(p.tensor == last_tensor + 1);
        CHECK(p.bytes_done <= p.bytes_total);
        last_tensor = p.tensor;
        n_tensors = p.n_tensors;
    });
    CHECK(calls == stats.n_tensors);
    CHECK(n_tensors == stats.n_tensors);
    CHECK(stats.params_out > stats.params_in);

    const auto small = test::load("stories15M-f32.gguf");
    const auto big = LlamaModel::load(wide.path);
    CHECK(big->hparams().dim == 384);
    CHECK(big->hparams().ffn_dim == 1024);
    CHECK(big->hparams().n_layers == small->hparams().n_layers + 1);
    CHECK(big->hparams().n_heads == 8);
    CHECK(big->hparams().head_dim == small->hparams().head_dim);

    const int n = 40;
    const Run a = greedy(*small, kPrompt, n), b = greedy(*big, kPrompt, n);
    CHECK(a.tokens == b.tokens);
    float worst = 0.0f, scale = 0.0f;
    for (int i = 0; i < n; ++i) {
        for (size_t v = 0; v < a.logits[i].size(); ++v) {
            worst = std::max(worst, std::fabs(a.logits[i][v] - b.logits[i][v]));
            scale = std::max(scale, std::fabs(a.logits[i][v]));
        }
    }
    INFO("largest logit difference " << worst << " (largest logit " << scale << ")");
    CHECK(worst < 1e-3f * scale);

    SECTION("quantised to q8_0, it decodes the q8_0 original's text") {
        REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
        const TempFile wide_q8("q8_0.gguf");
        quantize_model(wide.path, wide_q8.path, TensorType::Q8_0);
        const auto small_q8 = test::load("stories15M-q8_0.gguf");
        const auto big_q8 = LlamaModel::load(wide_q8.path);
        CHECK(greedy(*small_q8, kPrompt, n).tokens == greedy(*big_q8, kPrompt, n).tokens);
    }
}

TEST_CASE("inflate: shapes it cannot build are refused in one line", "[inflate]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    const TempFile out("bad.gguf");
    auto attempt = [&](int64_t dim, int64_t ffn, int32_t extra) {
        InflateOptions o;
        o.dim = dim;
        o.ffn = ffn;
        o.extra_layers = extra;
        inflate_model(test::model_path("stories15M-f32.gguf"), out.path, o);
    };
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(attempt(256, 1024, 0), Contains("--dim 256 is smaller than the model's 288"));
    CHECK_THROWS_WITH(attempt(400, 1024, 0), Contains("not a multiple of the head size 48"));
    CHECK_THROWS_WITH(attempt(384, 512, 0), Contains("--ffn 512 is smaller than the model's 768"));
    CHECK_THROWS_WITH(attempt(384, 1024, -1), Contains("--extra-layers"));
    CHECK_FALSE(std::filesystem::exists(out.path));
}
