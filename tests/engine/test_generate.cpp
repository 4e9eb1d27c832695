// End-to-end generation with the real stories15M model.
#include <catch2/catch.hpp>

#include <cctype>
#include <memory>
#include <set>
#include <sstream>

#include "engine/generate.h"
#include "engine/forward.h"
#include "support/models.h"

using namespace specd;

namespace {

struct Run {
    std::string text;
    GenerationResult result;
};

Run greedy(const std::string& file, const std::string& prompt, int32_t n) {
    INFO("model " << test::model_path(file) << " (run tools/fetch-model.sh)");
    REQUIRE(test::model_exists(file));
    auto model = LlamaModel::load(test::model_path(file));
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(model->hparams().n_ctx_train, 1));
    PlainDecoder dec(fwd, kv);
    GenerationParams p;
    p.max_tokens = n;
    p.sampling.temperature = 0.0f;
    const auto ids = model->tokenizer().encode(prompt, true);
    Run r;
    r.result = dec.generate(ids, p);
    r.text = prompt + model->tokenizer().decode(r.result.tokens, DecodeAt::Continuation);
    CHECK(kv.used_blocks() == 0);  // the decoder frees its sequence
    return r;
}

// A crude fluency measure: the share of words made of letters only (with
// trailing punctuation) among the generated words, and distinct words.
double word_share(const std::string& text, size_t* distinct) {
    std::istringstream in(text);
    std::string w;
    size_t words = 0, good = 0;
    std::set<std::string> seen;
    while (in >> w) {
        ++words;
        while (!w.empty() && std::ispunct(static_cast<unsigned char>(w.back()))) w.pop_back();
        bool letters = !w.empty();
        for (char c : w) letters = letters && (std::isalpha(static_cast<unsigned char>(c)) || c == '\'');
        good += letters;
        seen.insert(w);
    }
    *distinct = seen.size();
    return words ? static_cast<double>(good) / static_cast<double>(words) : 0.0;
}

}  // namespace

TEST_CASE("generate: stories15M f32 greedy continues 'Once upon a time' as llama2.c does", "[generate]") {
    const Run r = greedy("stories15M-f32.gguf", "Once upon a time", 40);
    CHECK_THAT(r.text, Catch::StartsWith("Once upon a time, there was a little girl named Lily. She loved to play "
                                         "outside in the sunshine."));
    CHECK(r.result.tokens.size() == 40);
    CHECK(r.result.stop == StopReason::Length);
}

TEST_CASE("generate: q8_0 and q4_0 copies produce fluent text", "[generate]") {
    for (const char* file : {"stories15M-q8_0.gguf", "stories15M-q4_0.gguf"}) {
        const Run r = greedy(file, "Once upon a time", 120);
        size_t distinct = 0;
        const double share = word_share(r.text, &distinct);
        INFO(file << ": " << r.text);
        CHECK_THAT(r.text, Catch::StartsWith("Once upon a time, there was a"));
        CHECK(share > 0.95);
        CHECK(distinct > 30);
    }
}

TEST_CASE("generate: a prompt longer than the context is refused with both sizes named", "[generate]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    auto model = LlamaModel::load(test::model_path("stories15M-f32.gguf"));
    ThreadPool pool(1);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(32, 1));
    PlainDecoder dec(fwd, kv);
    std::vector<int32_t> prompt(40, 100);
    CHECK_THROWS_WITH(dec.generate(prompt, {}), Catch::Contains("40 tokens") && Catch::Contains("context of 32"));
    CHECK_THROWS_WITH(dec.generate(std::vector<int32_t>{}, {}), Catch::Contains("empty"));
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("generate: generation stops at a full context and says so", "[generate]") {
    REQUIRE(test::model_exists("stories15M-f32.gguf"));
    auto model = LlamaModel::load(test::model_path("stories15M-f32.gguf"));
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(24, 1));
    PlainDecoder dec(fwd, kv);
    GenerationParams p;
    p.max_tokens = 100;
    p.sampling.temperature = 0.0f;
    p.stop_at_eos = false;
    const auto ids = model->tokenizer().encode("Once upon a time", true);
    const GenerationResult r = dec.generate(ids, p);
    CHECK(r.stop == StopReason::ContextFull);
    CHECK(r.n_prompt + static_cast<int32_t>(r.tokens.size()) == 25);
}

TEST_CASE("generate: seeded sampling is reproducible and differs across seeds", "[generate]") {
    REQUIRE(test::model_exists("stories15M-q8_0.gguf"));
    auto model = LlamaModel::load(test::model_path("stories15M-q8_0.gguf"));
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(fwd.kv_shape(128, 1));
    PlainDecoder dec(fwd, kv);
    const auto ids = model->tokenizer().encode("Once upon a time", true);
    GenerationParams p;
    p.max_tokens = 48;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 42;
    const auto a = dec.generate(ids, p), b = dec.generate(ids, p);
    p.sampling.seed = 43;
    const auto c = dec.generate(ids, p);
    CHECK(a.tokens == b.tokens);
    CHECK(a.tokens != c.tokens);
}
