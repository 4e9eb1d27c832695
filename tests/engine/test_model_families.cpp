// The model families of model_family.h (Llama 3-style llama, Qwen2, Qwen3,
// Gemma 3, Phi-3)
// on small random-weight models written in llama.cpp's layout with
// stories15M's vocabulary: they load with the right shapes, the fast CPU
// forward matches the scalar reference (f32, f16 and q8_0 weights), greedy
// speculative decoding across two sizes of one family equals plain decoding,
// and bad files fail with one line naming the problem. Their logits against
// llama.cpp's are checked by tests/engine/llama_cpp/families.test.mjs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/forward.h"
#include "engine/model_convert.h"
#include "engine/reference_forward.h"
#include "engine/speculative.h"
#include "support/family_models.h"
#include "support/models.h"
#include "support/tiny_model.h"

using namespace specd;

namespace {

// A family model file removed when the test ends.
struct TempModel {
    std::string path;
    explicit TempModel(const test::FamilyModelSpec& spec, const std::string& tag = "")
        : path(test::write_family_model(test::temp_path(spec.name + tag + ".gguf"), spec, test::stories_vocab())) {}
    TempModel(const TempModel&) = delete;
    ~TempModel() { std::filesystem::remove(path); }
};

const std::vector<int32_t> kPrompt = {1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354,
                                      3897, 1171, 29889, 450, 6575, 1033, 1919, 322};

KvCacheShape f32_cache(KvCacheShape shape) {
    shape.type = TensorType::F32;
    return shape;
}

// max |fast - reference| over every logit of every prompt position, and
// the largest |reference logit| (the scale the difference is judged by).
struct Agreement {
    float max_diff = 0.0f;
    float max_logit = 0.0f;
    int argmax_mismatches = 0;
};

Agreement fast_vs_reference(const LlamaModel& model) {
    ThreadPool pool(2);
    ForwardPass fwd(model, pool);
    PagedKvCache kv(f32_cache(fwd.kv_shape(64, 1)));
    const int32_t seq = kv.create_sequence();
    BatchItem item{seq, kPrompt, true};
    const auto fast = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
    ReferenceForward ref(model, 64);
    const size_t V = static_cast<size_t>(model.hparams().n_vocab);
    REQUIRE(fast.size() == kPrompt.size() * V);
    Agreement a;
    for (size_t t = 0; t < kPrompt.size(); ++t) {
        const std::vector<float>& r = ref.step(kPrompt[t]);
        const float* f = &fast[t * V];
        for (size_t v = 0; v < V; ++v) {
            a.max_diff = std::max(a.max_diff, std::fabs(f[v] - r[v]));
            a.max_logit = std::max(a.max_logit, std::fabs(r[v]));
        }
        a.argmax_mismatches += std::max_element(f, f + V) - f != std::max_element(r.begin(), r.end()) - r.begin();
    }
    return a;
}

std::string load_error(const std::string& path) {
    try {
        LlamaModel::load(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("model families: each preset loads with its family's shapes and traits", "[families]") {
    {
        TempModel file(test::family_preset("llama3"));
        auto m = LlamaModel::load(file.path);
        const LlamaHparams& hp = m->hparams();
        CHECK(m->family().arch == "llama");
        CHECK(m->family().rope_pairing == RopePairing::Adjacent);
        CHECK(hp.n_vocab == 32000);
        CHECK(hp.n_kv_heads == 2);
        CHECK(hp.head_dim == 16);
        CHECK(hp.rope_freq_base == 500000.0f);
        REQUIRE(hp.rope_freq_factors.size() == 8);
        CHECK(hp.rope_freq_factors.front() == 1.0f);
        CHECK(hp.rope_freq_factors.back() == 8.0f);
        // The factor divides the pair's frequency.
        CHECK(hp.rope_frequency(7) == Approx(std::pow(500000.0, -14.0 / 16.0) / 8.0).epsilon(1e-12));
        CHECK(m->classifier_tied());
    }
    {
        TempModel file(test::family_preset("qwen2"));
        auto m = LlamaModel::load(file.path);
        CHECK(m->family().rope_pairing == RopePairing::Neox);
        CHECK(m->layers()[0].bq.size() == 64);
        CHECK(m->layers()[0].bk.size() == 32);
        CHECK(m->layers()[0].bv.size() == 32);
        CHECK(m->layers()[0].q_norm.empty());
        CHECK(m->classifier_tied());
    }
    {
        TempModel file(test::family_preset("qwen3"));
        auto m = LlamaModel::load(file.path);
        const LlamaHparams& hp = m->hparams();
        CHECK(hp.head_dim == 32);  // attention.key_length, not dim / heads = 16
        CHECK(hp.q_dim() == 128);
        CHECK(hp.kv_dim() == 64);
        CHECK(m->layers()[0].q_norm.size() == 32);
        CHECK(m->layers()[0].k_norm.size() == 32);
        CHECK(m->layers()[0].wo.cols == 128);
        CHECK_FALSE(m->classifier_tied());
    }
    {
        TempModel file(test::family_preset("gemma3"));
        auto m = LlamaModel::load(file.path);
        const LlamaHparams& hp = m->hparams();
        CHECK(m->family().ffn_activation == FfnActivation::GeluTanh);
        CHECK(hp.sliding_window == 4);
        // sliding_window_pattern 3: the last of every 3 layers attends fully.
        CHECK(m->layers()[0].windowed);
        CHECK(m->layers()[1].windowed);
        CHECK_FALSE(m->layers()[2].windowed);
        CHECK(hp.embedding_scale == 8.0f);
        CHECK(hp.final_logit_softcap == 30.0f);
        CHECK(hp.rope_freq_scale == 0.125f);
        // Windowed layers turn at base_swa without the linear scaling.
        CHECK(hp.rope_frequency(1, true) == Approx(std::pow(10000.0, -2.0 / 32.0)).epsilon(1e-12));
        CHECK(hp.rope_frequency(1, false) == Approx(std::pow(1000000.0, -2.0 / 32.0) / 8.0).epsilon(1e-12));
        CHECK(m->layers()[0].post_attn_norm.size() == 64);
        CHECK(m->layers()[2].post_ffn_norm.size() == 64);
        CHECK(m->classifier_tied());
    }
    {
        TempModel file(test::family_preset("phi3"));
        auto m = LlamaModel::load(file.path);
        const LlamaHparams& hp = m->hparams();
        CHECK(hp.head_dim == 16);
        CHECK(hp.rope_dim == 12);  // partial rotary
        CHECK(hp.n_ctx_train == 256);  // capped to original_context_length: the short factors' range
        REQUIRE(hp.rope_freq_factors.size() == 6);
        CHECK(hp.rope_freq_factors[1] == Approx(1.3f));  // rope_factors_short
        CHECK(hp.rope_attn_factor == Approx(1.19f));
        // Views into the fused tensors: q, k, v rows of attn_qkv; gate then up rows of ffn_up.
        const LlamaLayer& L = m->layers()[0];
        CHECK(L.wq.rows == 64);
        CHECK(L.wk.rows == 32);
        CHECK(static_cast<const char*>(L.wk.data) == static_cast<const char*>(L.wq.data) + 64 * L.wq.row_bytes());
        CHECK(static_cast<const char*>(L.wv.data) == static_cast<const char*>(L.wk.data) + 32 * L.wk.row_bytes());
        CHECK(L.w_gate.rows == 128);
        CHECK(static_cast<const char*>(L.w_up.data) == static_cast<const char*>(L.w_gate.data) + 128 * L.w_gate.row_bytes());
    }
}

TEST_CASE("model families: what each family does beyond Llama 2's graph is listed (the CUDA backend refuses those)",
          "[families]") {
    const std::pair<const char*, const char*> expected[] = {
        {"llama3", ""},  // rope_freqs, base and tying are within Llama 2's graph
        {"qwen2", "NEOX RoPE, Q/K/V biases"},
        {"qwen3", "NEOX RoPE, Q/K norms, a head size other than dim/heads"},
        {"gemma3", "NEOX RoPE, Q/K norms, a head size other than dim/heads, GeGLU, post-norms, sliding-window layers, "
                   "a scaled embedding, logit soft-capping"},
        {"phi3", "NEOX RoPE, partial rotary"},
    };
    for (const auto& [family, features] : expected) {
        TempModel file(test::family_preset(family));
        INFO(family);
        CHECK(LlamaModel::load(file.path)->graph_beyond_llama2() == features);
    }
    CHECK(test::load("stories15M-q8_0.gguf")->graph_beyond_llama2().empty());
}

TEST_CASE("model families: a windowed layer reads no key or value before its window", "[families][forward][window]") {
    // Prefill 40 positions, then poison (NaN) every cached key and value of
    // the windowed layers before the next step's window (whole blocks and
    // part of the window's first block): the next step's logits stay
    // exactly those of a clean cache.
    TempModel file(test::family_preset("gemma3"));
    auto model = LlamaModel::load(file.path);
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    PagedKvCache kv(f32_cache(fwd.kv_shape(128, 2)));
    const int32_t clean = kv.create_sequence(), poisoned = kv.create_sequence();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(kPrompt[static_cast<size_t>(i) % kPrompt.size()]);
    BatchItem prefill[2] = {{clean, prompt, false}, {poisoned, prompt, false}};
    fwd.forward(kv, prefill);
    const int32_t bs = kv.shape().block_size, next_pos = 40, window = model->hparams().sliding_window;
    const int32_t first_kept = next_pos + 1 - window;  // the window's first position
    REQUIRE(first_kept >= bs + 1);                      // a whole block before it, and part of one
    const int32_t kvd = model->hparams().kv_dim();
    for (int32_t l = 0; l < model->hparams().n_layers; ++l) {
        if (!model->layers()[static_cast<size_t>(l)].windowed) continue;
        for (int32_t p = 0; p < first_kept; ++p) {
            auto* k = static_cast<float*>(kv.key(poisoned, l, p));
            auto* v = static_cast<float*>(kv.value(poisoned, l, p));
            std::fill(k, k + kvd, NAN);
            std::fill(v, v + kvd, NAN);
        }
    }
    const int32_t next = 2354;
    BatchItem a{clean, std::span<const int32_t>(&next, 1), false};
    const auto clean_logits = fwd.forward(kv, std::span<const BatchItem>(&a, 1));
    const std::vector<float> expected(clean_logits.begin(), clean_logits.end());
    BatchItem b{poisoned, std::span<const int32_t>(&next, 1), false};
    const auto got = fwd.forward(kv, std::span<const BatchItem>(&b, 1));
    REQUIRE(got.size() == expected.size());
    CHECK(std::equal(got.begin(), got.end(), expected.begin()));
    // And the window is what the reference computes.
    ReferenceForward ref(*model, 64);
    for (int32_t t : prompt) ref.step(t);
    const std::vector<float>& r = ref.step(next);
    float diff = 0.0f;
    for (size_t v = 0; v < r.size(); ++v) diff = std::max(diff, std::fabs(r[v] - expected[v]));
    CHECK(diff < 1e-3f);
}

TEST_CASE("model families: the fast forward equals the scalar reference for every family and weight type",
          "[families][forward]") {
    for (const std::string& family : test::family_preset_names()) {
        for (TensorType type : {TensorType::F32, TensorType::F16}) {
            test::FamilyModelSpec spec = test::family_preset(family);
            spec.matrix_type = type;
            TempModel file(spec, tensor_type_name(type));
            auto model = LlamaModel::load(file.path);
            const Agreement a = fast_vs_reference(*model);
            INFO(family << " " << tensor_type_name(type) << ": max |fast - reference| " << a.max_diff << " of logits up to "
                        << a.max_logit);
            CHECK(a.max_logit > 8.0f);  // peaked: the comparison is not between near-zero numbers
            CHECK(a.max_diff < 2e-4f * a.max_logit);
            CHECK(a.argmax_mismatches == 0);
        }
    }
}

TEST_CASE("model families: q8_0 files written by specd's quantizer keep biases and norms exact and match the reference",
          "[families][forward]") {
    for (const std::string& family : {std::string("qwen2"), std::string("qwen3")}) {
        TempModel f32(test::family_preset(family));
        const std::string q8 = test::temp_path(family + "-q8_0.gguf");
        quantize_model(f32.path, q8, TensorType::Q8_0);
        auto model = LlamaModel::load(q8);
        auto original = LlamaModel::load(f32.path);
        CHECK(model->layers()[0].wq.type == TensorType::Q8_0);
        CHECK(model->layers()[0].bq == original->layers()[0].bq);
        CHECK(model->layers()[0].q_norm == original->layers()[0].q_norm);
        // The fast path quantizes activations to q8 for q8_0 weights; the
        // reference does not, so the bound is looser than for f32.
        const Agreement a = fast_vs_reference(*model);
        INFO(family << " q8_0: max |fast - reference| " << a.max_diff << " of logits up to " << a.max_logit);
        CHECK(a.max_diff < 0.03f * a.max_logit);
        std::filesystem::remove(q8);
    }
}

TEST_CASE("model families: NEOX pairing and Gemma's window each change the logits (neither is silently ignored)",
          "[families][forward]") {
    // Same weights read as llama (adjacent pairs) and as qwen2 (NEOX): the
    // logits differ, so the pairing is applied. (Biases and norms are
    // tensors: the llama.cpp comparison holds their use.)
    test::FamilyModelSpec qwen = test::family_preset("qwen2");
    qwen.qkv_bias = false;
    test::FamilyModelSpec as_llama = qwen;
    as_llama.arch = "llama";
    TempModel a(qwen), b(as_llama, "-as-llama");
    auto neox = LlamaModel::load(a.path), adjacent = LlamaModel::load(b.path);
    ReferenceForward ra(*neox, 8), rb(*adjacent, 8);
    float diff = 0.0f;
    for (int32_t t : {1, 9038, 2501}) {
        const std::vector<float> x = ra.step(t);
        const std::vector<float>& y = rb.step(t);
        for (size_t v = 0; v < x.size(); ++v) diff = std::max(diff, std::fabs(x[v] - y[v]));
    }
    CHECK(diff > 0.1f);

    // Gemma with and without its window over a 14-token prompt.
    test::FamilyModelSpec gemma = test::family_preset("gemma3");
    test::FamilyModelSpec unwindowed = gemma;
    unwindowed.sliding_window = 0;
    unwindowed.swa_pattern = 0;
    TempModel c(gemma), d(unwindowed, "-unwindowed");
    auto windowed_model = LlamaModel::load(c.path), full_model = LlamaModel::load(d.path);
    ReferenceForward rc(*windowed_model, 16), rd(*full_model, 16);
    float window_diff = 0.0f;
    for (size_t t = 0; t < 14; ++t) {
        const std::vector<float> x = rc.step(kPrompt[t]);
        const std::vector<float>& y = rd.step(kPrompt[t]);
        for (size_t v = 0; v < x.size(); ++v) window_diff = std::max(window_diff, std::fabs(x[v] - y[v]));
    }
    CHECK(window_diff > 0.1f);
}

TEST_CASE("model families: greedy speculative decoding with a smaller draft of the same family equals plain decoding",
          "[families][spec]") {
    for (const std::string& family : test::family_preset_names()) {
        test::FamilyModelSpec target_spec = test::family_preset(family);
        target_spec.layers = 3;
        test::FamilyModelSpec draft_spec = target_spec;
        draft_spec.layers = 1;  // the target's first layer: a related, smaller model
        draft_spec.name += "-draft";
        TempModel target_file(target_spec), draft_file(draft_spec);
        auto target = LlamaModel::load(target_file.path);
        auto draft = LlamaModel::load(draft_file.path);
        ThreadPool pool(2);
        ForwardPass fwd(*target, pool);
        const int32_t n_ctx = target->hparams().n_ctx_train;
        PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
        DraftModelProposer proposer(*target, *draft, pool, n_ctx);
        GenerationParams gp;
        gp.max_tokens = 48;
        gp.stop_at_eos = false;
        gp.sampling.temperature = 0.0f;
        for (size_t start : {size_t{0}, size_t{5}}) {
            const std::vector<int32_t> ids(kPrompt.begin() + static_cast<std::ptrdiff_t>(start), kPrompt.begin() + static_cast<std::ptrdiff_t>(start) + 8);
            const GenerationResult reference = PlainDecoder(fwd, kv).generate(ids, gp);
            for (int32_t k : {2, 5}) {
                SpeculativeDecoder spec(fwd, kv, &proposer);
                SpeculativeParams sp;
                sp.draft_max = k;
                sp.adaptive = false;
                const SpeculativeResult r = spec.generate(ids, gp, sp);
                INFO(family << " k=" << k << " prompt from " << start << ": acceptance " << r.stats.acceptance_rate());
                REQUIRE(r.tokens == reference.tokens);
                CHECK(r.stats.n_accepted > 0);  // the draft is related: some drafts are taken
                CHECK(kv.used_blocks() == 0);
            }
        }
    }
}

TEST_CASE("model families: an unsupported architecture, a missing or mis-shaped tensor each fail with one line naming it",
          "[families][errors]") {
    {
        test::FamilyModelSpec spec = test::family_preset("qwen2");
        spec.arch = "gpt2";
        TempModel file(spec);
        const std::string e = load_error(file.path);
        INFO(e);
        CHECK(e.find("unsupported architecture 'gpt2'") != std::string::npos);
        CHECK(e.find("llama, qwen2, qwen3, gemma3, phi3") != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
    }
    {
        // qwen3 without its Q/K norms.
        test::FamilyModelSpec spec = test::family_preset("qwen3");
        spec.qk_norm = false;
        TempModel file(spec);
        const std::string e = load_error(file.path);
        INFO(e);
        CHECK(e.find("missing tensor 'blk.0.attn_q_norm.weight'") != std::string::npos);
    }
    {
        // qwen3 whose key_length is dropped: q is 128 wide but dim / heads says 64.
        test::FamilyModelSpec spec = test::family_preset("qwen3");
        TempModel file(spec);
        gguf::File f = gguf::File::open(file.path);
        gguf::Writer w;
        for (const auto& [key, value] : f.metadata()) {
            if (key != "qwen3.attention.key_length" && key != "qwen3.attention.value_length" && key != "qwen3.rope.dimension_count") {
                w.set(key, value);
            }
        }
        for (const gguf::TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
        const std::string path = test::temp_path("qwen3-no-key-length.gguf");
        w.write(path);
        const std::string e = load_error(path);
        std::filesystem::remove(path);
        INFO(e);
        CHECK(e.find("tensor 'blk.0.attn_q.weight' has shape [64, 128], the metadata implies [64, 64]") != std::string::npos);
    }
    {
        // YaRN scaling (llama.cpp runs it; specd does not yet): refused by name.
        TempModel file(test::family_preset("qwen2"));
        gguf::File f = gguf::File::open(file.path);
        gguf::Writer w;
        for (const auto& [key, value] : f.metadata()) w.set(key, value);
        w.set("qwen2.rope.scaling.type", gguf::Value::str("yarn"));
        w.set("qwen2.rope.scaling.factor", gguf::Value::f32(4.0f));
        for (const gguf::TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
        const std::string path = test::temp_path("qwen2-yarn.gguf");
        w.write(path);
        const std::string e = load_error(path);
        std::filesystem::remove(path);
        INFO(e);
        CHECK(e.find("qwen2.rope.scaling.type 'yarn' is not supported (none, linear)") != std::string::npos);
    }
    {
        // A bias of the wrong length.
        test::FamilyModelSpec spec = test::family_preset("qwen2");
        TempModel file(spec);
        gguf::File f = gguf::File::open(file.path);
        gguf::Writer w;
        for (const auto& [key, value] : f.metadata()) w.set(key, value);
        for (const gguf::TensorInfo& t : f.tensors()) {
            std::vector<int64_t> ne = t.ne;
            size_t bytes = t.n_bytes;
            if (t.name == "blk.1.attn_k.bias") {
                ne = {16};
                bytes = 16 * sizeof(float);
            }
            w.add_tensor(t.name, ne, t.type, t.data, bytes);
        }
        const std::string path = test::temp_path("qwen2-bad-bias.gguf");
        w.write(path);
        const std::string e = load_error(path);
        std::filesystem::remove(path);
        INFO(e);
        CHECK(e.find("tensor 'blk.1.attn_k.bias' has shape [16], the metadata implies [32]") != std::string::npos);
    }
}

TEST_CASE("model families: a verification batch's logits have the same bits as one token at a time, for every weight type",
          "[families][forward][invariance]") {
    // What makes greedy speculation exactly plain decoding: row i of a
    // verification step (its k+1 rows, batched with another sequence's rows)
    // computes the very logits a single-token step at that position does.
    // 256-wide rows so the K-quants are used (not their 32-wide fallbacks);
    // the default f16 KV cache; 8 + 9 = 17 rows reach the many-row paths.
    for (const std::string& family : {std::string("llama3"), std::string("qwen2"), std::string("gemma3")}) {
        test::FamilyModelSpec spec = test::family_preset(family);
        spec.dim = 256;
        spec.ffn = 512;
        spec.head_dim = 0;
        spec.rope_dim = 0;
        TempModel f32(spec, "-inv");
        for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K,
                                TensorType::Q5_K, TensorType::Q6_K}) {
            INFO(family << " " << tensor_type_name(type));
            const std::string path = test::temp_path(family + "-inv-" + tensor_type_name(type) + ".gguf");
            if (type != TensorType::F32) quantize_model(f32.path, path, type);
            auto model = LlamaModel::load(type == TensorType::F32 ? f32.path : path);
            ThreadPool pool(2);
            ForwardPass fwd(*model, pool);
            PagedKvCache kv(fwd.kv_shape(64, 3));
            const size_t V = static_cast<size_t>(fwd.n_vocab());
            const std::span<const int32_t> prompt(kPrompt.data(), 8), next(kPrompt.data() + 8, 8), other(kPrompt.data() + 3, 9);
            const int32_t stepped = kv.create_sequence(), batched = kv.create_sequence(), neighbour = kv.create_sequence();
            for (int32_t seq : {stepped, batched}) {
                BatchItem prefill{seq, prompt, false};
                fwd.forward(kv, std::span<const BatchItem>(&prefill, 1));
            }
            std::vector<float> one_at_a_time;  // (8, V)
            for (size_t t = 0; t < next.size(); ++t) {
                BatchItem step{stepped, next.subspan(t, 1), false};
                auto logits = fwd.forward(kv, std::span<const BatchItem>(&step, 1));
                one_at_a_time.insert(one_at_a_time.end(), logits.begin(), logits.end());
            }
            BatchItem verify[2] = {{batched, next, true}, {neighbour, other, true}};
            auto together = fwd.forward(kv, verify);
            REQUIRE(together.size() == 17 * V);
            for (size_t t = 0; t < next.size(); ++t) {
                INFO("row " << t);
                REQUIRE(std::memcmp(&together[t * V], &one_at_a_time[t * V], V * sizeof(float)) == 0);
            }
            model.reset();
            std::filesystem::remove(path);
        }
    }
}
