// Target and draft vocabularies that differ as real pairs do (llama.cpp's
// rule: Qwen2.5-0.5B's 151,936 rows draft for Qwen2.5-32B's 152,064):
// pairs llama.cpp refuses get one line naming the difference; a draft
// vocabulary shorter or longer than the target's keeps greedy output
// token-identical to plain decoding (every draft path: the single-sequence
// proposer and the batched drafter/verifier) and sampled output the
// target's distribution (chi-square); a draft of another architecture with
// the same vocabulary works.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/error.h"
#include "engine/forward.h"
#include "engine/session_core.h"
#include "engine/speculative.h"
#include "support/family_models.h"
#include "support/models.h"
#include "support/sampled_pairs.h"
#include "support/session_driver.h"
#include "support/tiny_model.h"

using namespace specd;

namespace {

// A file removed when the test ends.
struct TempFile {
    std::string path;
    explicit TempFile(std::string p) : path(std::move(p)) {}
    TempFile(const TempFile&) = delete;
    ~TempFile() { std::filesystem::remove(path); }
};

std::unique_ptr<TempFile> family_file(const test::FamilyModelSpec& spec, const gguf::File& vocab, const std::string& tag) {
    return std::make_unique<TempFile>(test::write_family_model(test::temp_path(spec.name + tag + ".gguf"), spec, vocab));
}

// A vocabulary-only GGUF: `base`'s tokenizer.* keys, each passed through
// `edit` first, then `extra` set (added or replaced).
std::unique_ptr<TempFile> edited_vocab(const gguf::File& base, const std::string& tag,
                                       const std::function<void(const std::string&, gguf::Value&)>& edit,
                                       const std::vector<std::pair<std::string, gguf::Value>>& extra = {}) {
    gguf::Writer w;
    w.set("general.alignment", gguf::Value::u32(32));
    for (const auto& [key, value] : base.metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        gguf::Value v = value;
        edit(key, v);
        w.set(key, v);
    }
    for (const auto& [key, value] : extra) w.set(key, value);
    auto f = std::make_unique<TempFile>(test::temp_path("vocab-" + tag + ".gguf"));
    w.write(f->path);
    return f;
}

std::string refusal(const LlamaModel& target, const LlamaModel& draft) {
    try {
        check_vocab_compatible(target, draft);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// The draft-model paths, each greedy, must give `reference` for `prompt`:
// SpeculativeDecoder + DraftModelProposer (k 2 and 5), and SessionCore
// jobs through BatchDrafter + BatchVerifier (k 3, two sessions at once).
void check_greedy_paths(const LlamaModel& target, const LlamaModel& draft, const std::vector<int32_t>& prompt, int32_t max_tokens,
                        const std::string& what) {
    ThreadPool pool(2);
    ForwardPass fwd(target, pool);
    const int32_t n_ctx = 128;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 1));
    GenerationParams gp;
    gp.max_tokens = max_tokens;
    gp.stop_at_eos = false;
    gp.sampling.temperature = 0.0f;
    const GenerationResult reference = PlainDecoder(fwd, kv).generate(prompt, gp);
    const int32_t beyond_draft = static_cast<int32_t>(std::count_if(reference.tokens.begin(), reference.tokens.end(),
                                                                     [&](int32_t t) { return t >= draft.hparams().n_vocab; }));
    INFO(what << ": " << beyond_draft << " of the target's " << reference.tokens.size() << " tokens are ids the draft lacks");
    DraftModelProposer proposer(target, draft, pool, n_ctx);
    int64_t accepted = 0;
    for (int32_t k : {2, 5}) {
        SpeculativeDecoder spec(fwd, kv, &proposer);
        SpeculativeParams sp;
        sp.draft_max = k;
        sp.adaptive = false;
        const SpeculativeResult r = spec.generate(prompt, gp, sp);
        INFO(what << ": proposer, k=" << k << ", acceptance " << r.stats.acceptance_rate());
        REQUIRE(r.tokens == reference.tokens);
        CHECK(kv.used_blocks() == 0);
        accepted += r.stats.n_accepted;
    }
    {
        PagedKvCache bkv(fwd.kv_shape(n_ctx, 2));
        ForwardPass dfwd(draft, pool);
        PagedKvCache dkv(dfwd.kv_shape(n_ctx, 2));
        BatchVerifier verifier(fwd, bkv, {});
        BatchDrafter drafter(&dfwd, &dkv, 1, 4, target.hparams().n_vocab);
        std::vector<test::Driven> sessions;
        for (int i = 0; i < 2; ++i) {
            SpeculativeParams sp;
            sp.draft_max = 3;
            sp.adaptive = false;
            test::Driven d;
            d.core = std::make_unique<SessionCore>(target.tokenizer(), prompt, gp, sp, true, n_ctx);
            d.start_round = i * 2;
            sessions.push_back(std::move(d));
        }
        test::drive(sessions, verifier, &drafter);
        for (auto& s : sessions) {
            INFO(what << ": batched, acceptance " << s.core->stats().acceptance_rate());
            CHECK(s.core->output() == reference.tokens);
            accepted += s.core->stats().n_accepted;
        }
        CHECK(dkv.used_blocks() == 0);
    }
    INFO(what);
    INFO("accepted " << accepted);
    CHECK(accepted > 0);  // the draft is related: drafts are taken, so the paths ran
}

// The tiny 8-token model of tiny_model.h with its vocabulary cut to
// `n_vocab` rows or padded to it ("[PAD<id>]" tokens whose embedding and
// classifier rows are random, `pad_scale` times the others': the draft
// then often prefers them).
std::unique_ptr<TempFile> resized_tiny(const std::string& src, int64_t n_vocab, float pad_scale, const std::string& tag) {
    const gguf::File f = gguf::File::open(src);
    const int64_t old_n = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
    test::FamilyModelSpec resize;
    resize.vocab_trim = std::max<int64_t>(0, old_n - n_vocab);
    resize.vocab_pad = std::max<int64_t>(0, n_vocab - old_n);
    gguf::Writer w;
    for (const auto& [key, value] : f.metadata()) w.set(key, test::resized_vocab_array(key, value, resize));
    std::vector<std::vector<float>> storage;
    std::mt19937 rng(99);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const gguf::TensorInfo& t : f.tensors()) {
        if (t.name != "token_embd.weight" && t.name != "output.weight") {
            w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
            continue;
        }
        REQUIRE(t.type == TensorType::F32);
        const int64_t cols = t.ne[0];
        const float* rows = reinterpret_cast<const float*>(t.data);
        std::vector<float> v(rows, rows + cols * std::min(old_n, n_vocab));
        double sq = 0.0;
        for (float x : v) sq += static_cast<double>(x) * x;
        const float rms = static_cast<float>(std::sqrt(sq / static_cast<double>(v.size())));
        while (static_cast<int64_t>(v.size()) < cols * n_vocab) v.push_back(pad_scale * rms * normal(rng));
        storage.push_back(std::move(v));
        w.add_tensor(t.name, {cols, n_vocab}, TensorType::F32, storage.back().data(), storage.back().size() * sizeof(float));
    }
    auto out = std::make_unique<TempFile>(test::temp_path("tiny-vocab-" + tag + ".gguf"));
    w.write(out->path);
    return out;
}


// Ids of the stories15M vocabulary (a Llama 2 prompt), and two beyond a
// draft cut by 128 (the draft is fed its substitute there).
const std::vector<int32_t> kPrompt = {1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 31990, 7826, 4257, 31900, 365, 2354};

}  // namespace

// ------------------------------------------------------------ refusals ---

TEST_CASE("draft vocabulary: llama.cpp's rule, and a refused pair gets one line naming the difference", "[draft-vocab][errors]") {
    const test::FamilyModelSpec base = test::family_preset("llama3");
    auto target_file = family_file(base, test::stories_vocab(), "-target");
    auto target = LlamaModel::load(target_file->path);
    auto refused = [&](const test::FamilyModelSpec& spec, const gguf::File& vocab, const std::string& tag) {
        auto file = family_file(spec, vocab, tag);
        auto draft = LlamaModel::load(file->path);
        return refusal(*target, *draft);
    };
    auto check_line = [](const std::string& e, const std::string& want) {
        INFO(e);
        CHECK(e.find(want) != std::string::npos);
        CHECK(e.find('\n') == std::string::npos);
        CHECK(e.find("cannot draft for") != std::string::npos);
    };

    test::FamilyModelSpec spec = base;
    spec.vocab_trim = 128;  // the most llama.cpp allows
    CHECK(refused(spec, test::stories_vocab(), "-trim128") == "");
    spec.vocab_trim = 0;
    spec.vocab_pad = 128;
    CHECK(refused(spec, test::stories_vocab(), "-pad128") == "");
    spec.vocab_pad = 129;
    check_line(refused(spec, test::stories_vocab(), "-pad129"), "vocabulary sizes differ by 129 (draft 32129, target 32000; at most 128 allowed)");
    spec.vocab_pad = 0;
    spec.vocab_trim = 200;
    check_line(refused(spec, test::stories_vocab(), "-trim200"), "vocabulary sizes differ by 200 (draft 31800, target 32000; at most 128 allowed)");
    spec.vocab_trim = 0;

    {
        // One token text changed at id 1000: the first differing id, both texts.
        auto vf = edited_vocab(test::stories_vocab(), "text1000", [](const std::string& key, gguf::Value& v) {
            if (key == "tokenizer.ggml.tokens") v.array[1000] = gguf::Value::str("\xe2\x96\x81" "changed\nline");
        });
        const gguf::File vocab = gguf::File::open(vf->path);
        const std::string want = "token 1000 is '\xe2\x96\x81" "changed\\nline' in the draft but '" + test::stories_vocab().get_string_array("tokenizer.ggml.tokens")[1000] + "' in the target";
        check_line(refused(spec, vocab, "-text1000"), want);
    }
    {
        // Ids below 5 (llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID) are not compared.
        auto vf = edited_vocab(test::stories_vocab(), "text0", [](const std::string& key, gguf::Value& v) {
            if (key == "tokenizer.ggml.tokens") v.array[0] = gguf::Value::str("<other>");
        });
        const gguf::File vocab = gguf::File::open(vf->path);
        CHECK(refused(spec, vocab, "-text0") == "");
    }
    auto no_edit = [](const std::string&, gguf::Value&) {};
    {
        auto vf = edited_vocab(test::stories_vocab(), "nobos", no_edit, {{"tokenizer.ggml.add_bos_token", gguf::Value::boolean(false)}});
        const gguf::File vocab = gguf::File::open(vf->path);
        check_line(refused(spec, vocab, "-nobos"), "BOS differs (draft add_bos false, id 1; target add_bos true, id 1)");
    }
    {
        // A BOS id that differs while both add it.
        auto vf = edited_vocab(test::stories_vocab(), "bos5", no_edit, {{"tokenizer.ggml.bos_token_id", gguf::Value::u32(5)}});
        const gguf::File vocab = gguf::File::open(vf->path);
        check_line(refused(spec, vocab, "-bos5"), "BOS differs (draft add_bos true, id 5; target add_bos true, id 1)");
    }
    {
        // An EOS id that differs counts only when EOS is added (llama.cpp).
        auto vf = edited_vocab(test::stories_vocab(), "eos5", no_edit, {{"tokenizer.ggml.eos_token_id", gguf::Value::u32(5)}});
        const gguf::File vocab = gguf::File::open(vf->path);
        CHECK(refused(spec, vocab, "-eos5") == "");
        auto vf2 = edited_vocab(test::stories_vocab(), "addeos", no_edit, {{"tokenizer.ggml.add_eos_token", gguf::Value::boolean(true)}});
        const gguf::File vocab2 = gguf::File::open(vf2->path);
        check_line(refused(spec, vocab2, "-addeos"), "EOS differs (draft add_eos true, id 2; target add_eos false, id 2)");
    }
    {
        const std::string qwen = test::llama_cpp_vocab_path("qwen2");
        if (!std::filesystem::exists(qwen)) {
            WARN("skipped: llama.cpp vocabulary files not fetched (" << qwen << "; run tools/fetch-llama-cpp-vocab.sh)");
        } else {
            // Type first (the sizes differ too).
            const gguf::File vocab = gguf::File::open(qwen);
            check_line(refused(spec, vocab, "-bpe"), "vocabulary types differ (draft BPE, target SPM)");
        }
    }
    // The proposer refuses before any work, with the same line.
    spec.vocab_trim = 200;
    auto file = family_file(spec, test::stories_vocab(), "-trim200b");
    auto draft = LlamaModel::load(file->path);
    ThreadPool pool(1);
    CHECK_THROWS_WITH(DraftModelProposer(*target, *draft, pool, 64), Catch::Contains("vocabulary sizes differ by 200"));
}

// ------------------------------------------------------- greedy: exact ---

TEST_CASE("draft vocabulary shorter (by 1 and 128) or longer (by 64) than the target's: greedy output equals plain decoding",
          "[draft-vocab][greedy]") {
    test::FamilyModelSpec target_spec = test::family_preset("llama3");
    target_spec.layers = 3;
    auto target_file = family_file(target_spec, test::stories_vocab(), "-target");
    auto target = LlamaModel::load(target_file->path);
    for (const auto& [trim, pad] : {std::pair<int64_t, int64_t>{128, 0}, {1, 0}, {0, 64}}) {
        test::FamilyModelSpec draft_spec = target_spec;
        draft_spec.layers = 1;  // the target's first layer: a related, smaller model
        draft_spec.vocab_trim = trim;
        draft_spec.vocab_pad = pad;
        draft_spec.pad_row_scale = 3.0f;  // the padded draft prefers its extra ids: the mask is needed
        auto draft_file = family_file(draft_spec, test::stories_vocab(), "-draft");
        auto draft = LlamaModel::load(draft_file->path);
        REQUIRE(draft->hparams().n_vocab == 32000 - trim + pad);
        if (pad > 0) {
            // The test has power: unmasked, this draft proposes ids the target lacks.
            ThreadPool pool(1);
            ForwardPass dfwd(*draft, pool);
            PagedKvCache dkv(dfwd.kv_shape(128, 1));
            GenerationParams gp;
            gp.max_tokens = 40;
            gp.stop_at_eos = false;
            gp.sampling.temperature = 0.0f;
            const GenerationResult own = PlainDecoder(dfwd, dkv).generate(std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + 8), gp);
            CHECK(std::any_of(own.tokens.begin(), own.tokens.end(), [](int32_t t) { return t >= 32000; }));
        }
        check_greedy_paths(*target, *draft, kPrompt, 40, "draft vocab " + std::to_string(draft->hparams().n_vocab));
    }
}

TEST_CASE("a real BPE vocabulary (Qwen2): a 151,936-row draft for a 152,064-row target (Qwen2.5-0.5B for 32B) equals plain decoding",
          "[draft-vocab][greedy][bpe]") {
    const std::string path = test::llama_cpp_vocab_path("qwen2");
    if (!std::filesystem::exists(path)) {
        WARN("skipped: llama.cpp vocabulary files not fetched (" << path << "; run tools/fetch-llama-cpp-vocab.sh)");
        return;
    }
    const gguf::File vocab = gguf::File::open(path);
    const int64_t n = static_cast<int64_t>(vocab.get_string_array("tokenizer.ggml.tokens").size());
    REQUIRE(n == 151936);  // Qwen2.5-0.5B's rows; the 32B pads to 152,064
    test::FamilyModelSpec target_spec = test::family_preset("qwen2");
    target_spec.layers = 3;
    target_spec.vocab_pad = 128;
    // Padding rows a little stronger than the rest (at 1.75 and above the
    // target falls into them for good and nothing is accepted).
    target_spec.pad_row_scale = 1.3f;
    test::FamilyModelSpec draft_spec = target_spec;
    draft_spec.layers = 1;
    draft_spec.vocab_pad = 0;
    auto target_file = family_file(target_spec, vocab, "-target");
    auto draft_file = family_file(draft_spec, vocab, "-draft");
    auto target = LlamaModel::load(target_file->path);
    auto draft = LlamaModel::load(draft_file->path);
    REQUIRE(target->hparams().n_vocab == 152064);
    REQUIRE(draft->hparams().n_vocab == 151936);
    CHECK(refusal(*target, *draft) == "");
    std::vector<int32_t> prompt = target->tokenizer().encode("Once upon a time, there was a little robot who liked to count", true);
    prompt.push_back(152000);  // a padding id only the target has: the draft is fed its substitute
    check_greedy_paths(*target, *draft, prompt, 32, "qwen2 vocab");
}

TEST_CASE("a draft of another architecture with the same vocabulary works (llama drafting for qwen2 and qwen3)",
          "[draft-vocab][greedy]") {
    for (const std::string family : {"qwen2", "qwen3"}) {
        test::FamilyModelSpec target_spec = test::family_preset(family);
        target_spec.layers = 3;
        // The same weights read as a plain llama (no biases, norms or NEOX),
        // one layer, and a vocabulary shorter by 32.
        test::FamilyModelSpec draft_spec = target_spec;
        draft_spec.arch = "llama";
        draft_spec.name += "-as-llama";
        draft_spec.layers = 1;
        draft_spec.qkv_bias = false;
        draft_spec.qk_norm = false;
        draft_spec.vocab_trim = 32;
        auto target_file = family_file(target_spec, test::stories_vocab(), "-target");
        auto draft_file = family_file(draft_spec, test::stories_vocab(), "-draft");
        auto target = LlamaModel::load(target_file->path);
        auto draft = LlamaModel::load(draft_file->path);
        CHECK(refusal(*target, *draft) == "");
        check_greedy_paths(*target, *draft, kPrompt, 32, family + " target, llama draft");
    }
}

// ---------------------------------------------------- sampled: chi-square ---

TEST_CASE("sampled speculation with a draft vocabulary shorter or longer than the target's follows the target distribution",
          "[draft-vocab][stats]") {
    TempFile target_src(test::write_tiny_model(test::temp_path("dv-target.gguf"), 11));
    TempFile draft_src(test::write_tiny_model(test::temp_path("dv-draft.gguf"), 12));
    auto target = LlamaModel::load(target_src.path);
    ThreadPool pool(1);
    ForwardPass fwd(*target, pool);
    PagedKvCache kv(fwd.kv_shape(32, 2));
    const std::vector<int32_t> prompt = {1, 3, 5};
    SamplingParams sampling;  // plain softmax: no filter, no penalty
    sampling.temperature = 1.0f;
    sampling.top_k = 0;
    sampling.top_p = 1.0f;
    sampling.min_p = 0.0f;
    sampling.seed = 7;

    // Exact joint distribution of the first two generated tokens under
    // plain sampling, by enumeration.
    const std::map<int64_t, double> expected = test::two_token_distribution(fwd, kv, prompt, sampling);
    // Tokens 6 and 7 carry real mass: the 6-token draft can never propose them.
    double mass_67 = 0.0;
    for (const auto& [key, p] : expected) {
        if (key % 8 >= 6) mass_67 += p;
    }
    CHECK(mass_67 > 0.1);

    // A draft whose vocabulary is cut to 6 of the target's 8 ids (within
    // llama.cpp's rule: text from id 5 on agrees up to the shorter end), and
    // one padded to 10 whose extra ids it prefers (the mask is needed).
    for (const int64_t draft_vocab : {int64_t{6}, int64_t{10}}) {
        auto draft_file = resized_tiny(draft_src.path, draft_vocab, 3.0f, std::to_string(draft_vocab));
        auto draft = LlamaModel::load(draft_file->path);
        REQUIRE(draft->hparams().n_vocab == draft_vocab);
        REQUIRE(refusal(*target, *draft) == "");
        const int64_t n = 12000;
        // (1) SpeculativeDecoder + DraftModelProposer.
        {
            DraftModelProposer proposer(*target, *draft, pool, 32);
            SpeculativeDecoder spec(fwd, kv, &proposer);
            const test::SampledPairs got = test::sample_pairs(spec, fwd.n_vocab(), prompt, sampling, n, 1000);
            test::check_follows(got, expected, "draft vocab " + std::to_string(draft_vocab) + ", proposer");
        }
        // (2) The runtime's path: SessionCore jobs through BatchDrafter and
        // BatchVerifier (draft probabilities travel in the verify job).
        {
            ForwardPass dfwd(*draft, pool);
            PagedKvCache dkv(dfwd.kv_shape(32, 1));
            PagedKvCache bkv(fwd.kv_shape(32, 1));
            BatchVerifier verifier(fwd, bkv, {});
            BatchDrafter drafter(&dfwd, &dkv, 1, 4, target->hparams().n_vocab);
            test::SampledPairs got;
            got.n = n / 2;
            for (int64_t i = 0; i < got.n; ++i) {
                const GenerationParams gp = test::pair_generation(sampling, 90000 + static_cast<uint64_t>(i));
                std::vector<test::Driven> sessions(1);
                sessions[0].core = std::make_unique<SessionCore>(target->tokenizer(), prompt, gp, test::fixed_draft(3), true, 32);
                test::drive(sessions, verifier, &drafter);
                const std::vector<int32_t>& out = sessions[0].core->output();
                REQUIRE(out.size() == 4);
                ++got.observed[out[0] * 8 + out[1]];
                got.drafted += sessions[0].core->stats().n_drafted;
            }
            test::check_follows(got, expected, "draft vocab " + std::to_string(draft_vocab) + ", batched");
        }
    }
}
