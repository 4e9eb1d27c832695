#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/error.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/prefix_cache.h"
#include "engine/session_core.h"
#include "support/models.h"
#include "support/session_driver.h"

using namespace specd;
using namespace specd::test;

namespace {

KvCacheShape small_shape() {
    KvCacheShape s;
    s.n_layers = 1;
    s.kv_dim = 4;
    s.block_size = 4;
    s.n_blocks = 12;
    s.max_seq_len = 32;
    s.max_sequences = 4;
    return s;
}

// A sequence holding `tokens` (positions reserved and marked written; the
// bookkeeping tests need no keys and values).
int32_t filled(PagedKvCache& kv, const std::vector<int32_t>& tokens) {
    const int32_t seq = kv.create_sequence();
    REQUIRE(kv.reserve(seq, static_cast<int32_t>(tokens.size())));
    kv.set_length(seq, static_cast<int32_t>(tokens.size()));
    return seq;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
    return t;
}

uint64_t colliding_hash(uint64_t, std::span<const int32_t>) { return 42; }

}  // namespace

TEST_CASE("prefix cache: a request starting with a cached prompt adopts its full blocks, never the last token's", "[prefix]") {
    PagedKvCache kv(small_shape());
    PrefixCache cache(kv);
    const std::vector<int32_t> prompt = iota_tokens(10, 100);  // blocks [0,4) [4,8), 2 positions in a third
    const int32_t a = filled(kv, prompt);
    CHECK(cache.insert(a, prompt) == 2);
    CHECK(cache.cached_blocks() == 2);

    std::vector<int32_t> longer = prompt;
    longer.push_back(7);
    const std::vector<int32_t> got = cache.match(longer);
    REQUIRE(got.size() == 2);
    CHECK(got[0] == kv.block_table(a)[0]);
    CHECK(got[1] == kv.block_table(a)[1]);
    // Exactly 8 tokens cached and asked for: the block holding the last one is
    // left out, so the caller still computes its logits.
    CHECK(cache.match(iota_tokens(8, 100)).size() == 1);
    // A different first block: nothing.
    std::vector<int32_t> other = longer;
    other[1] = 5;
    CHECK(cache.match(other).empty());
    // Same first block, different second: the first only.
    other = longer;
    other[6] = 5;
    CHECK(cache.match(other).size() == 1);

    const int32_t b = kv.create_sequence();
    kv.adopt_blocks(b, got);
    CHECK(kv.length(b) == 8);
    CHECK(kv.block_refs(got[0]) == 3);  // a, b and the cache
    kv.free_sequence(a);
    kv.free_sequence(b);
    CHECK(kv.block_refs(got[0]) == 1);  // the cache alone keeps it
    CHECK(kv.used_blocks() == 2);
    cache.clear();
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("prefix cache: forced hash collisions never serve another text's blocks", "[prefix]") {
    PagedKvCache kv(small_shape());
    PrefixCache cache(kv, colliding_hash);  // every block hashes alike
    const std::vector<int32_t> x = iota_tokens(9, 1), y = iota_tokens(9, 500);
    const int32_t a = filled(kv, x), b = filled(kv, y);
    CHECK(cache.insert(a, x) == 2);
    CHECK(cache.insert(b, y) == 2);
    const std::vector<int32_t> got_x = cache.match(x), got_y = cache.match(y);
    REQUIRE(got_x.size() == 2);
    REQUIRE(got_y.size() == 2);
    CHECK(got_x[0] == kv.block_table(a)[0]);
    CHECK(got_y[0] == kv.block_table(b)[0]);
    CHECK(got_y[1] == kv.block_table(b)[1]);
    // x's second block under y's first (same tokens, other parent): no match past y's first block.
    std::vector<int32_t> mixed(y.begin(), y.begin() + 4);
    mixed.insert(mixed.end(), x.begin() + 4, x.end());
    CHECK(cache.match(mixed).size() == 1);
    CHECK(cache.match(iota_tokens(9, 900)).empty());
    kv.free_sequence(a);
    kv.free_sequence(b);
}

TEST_CASE("prefix cache: eviction frees least recently used leaves and never a block a sequence holds", "[prefix]") {
    PagedKvCache kv(small_shape());
    PrefixCache cache(kv);
    const std::vector<int32_t> old_text = iota_tokens(8, 1), new_text = iota_tokens(8, 100), held_text = iota_tokens(8, 200);
    for (const auto* text : {&old_text, &new_text}) {
        const int32_t s = filled(kv, *text);
        cache.insert(s, *text);
        kv.free_sequence(s);
    }
    const int32_t held = filled(kv, held_text);
    cache.insert(held, held_text);
    CHECK(cache.cached_blocks() == 6);
    CHECK(cache.evictable_blocks() == 4);
    cache.match(iota_tokens(9, 1));  // old_text is now the most recently used

    CHECK(cache.evict(2) == 2);  // new_text's two blocks: leaf first, then its parent
    CHECK(cache.match(iota_tokens(9, 100)).empty());
    CHECK(cache.match(iota_tokens(9, 1)).size() == 2);
    CHECK(cache.evict(10) == 2);  // old_text; held_text stays
    CHECK(cache.cached_blocks() == 2);
    CHECK(cache.match(iota_tokens(9, 200)).size() == 2);
    kv.free_sequence(held);
    CHECK(cache.evict(10) == 2);
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("prefix cache: a shared block is read-only: cutting a sequence inside one is refused, at its edge allowed", "[prefix][kv]") {
    PagedKvCache kv(small_shape());
    PrefixCache cache(kv);
    const std::vector<int32_t> text = iota_tokens(9, 1);
    const int32_t a = filled(kv, text);
    cache.insert(a, text);
    const int32_t b = kv.create_sequence();
    kv.adopt_blocks(b, cache.match(text));
    REQUIRE(kv.reserve(b, 12));
    kv.set_length(b, 12);
    kv.truncate(b, 9);  // inside b's own third block: fine
    CHECK(kv.length(b) == 9);
    CHECK_THROWS_AS(kv.truncate(b, 6), Error);  // inside the shared second block
    CHECK(kv.length(b) == 9);
    kv.truncate(b, 4);  // a block edge: lets go of the shared block
    CHECK(kv.length(b) == 4);
    CHECK_THROWS_AS(kv.adopt_blocks(b, kv.block_table(a)), Error);  // b is not empty
    kv.free_sequence(a);
    kv.free_sequence(b);
    cache.clear();
    CHECK(kv.used_blocks() == 0);
}

TEST_CASE("prefix cache: a prompt continued on adopted blocks gives the logits of computing it whole", "[prefix][forward]") {
    auto model = load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*model, pool);
    KvCacheShape shape = fwd.kv_shape(128, 3);
    shape.type = TensorType::F32;
    PagedKvCache kv(shape);
    PrefixCache cache(kv);
    const Tokenizer& tok = model->tokenizer();
    const std::vector<int32_t> first = tok.encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true);
    std::vector<int32_t> second = first;
    for (int32_t t : tok.encode(" One day, she saw a big red ball in the park.", false)) second.push_back(t);
    const size_t V = static_cast<size_t>(fwd.n_vocab());

    // Turn one: the first prompt computed and cached.
    const int32_t a = kv.create_sequence();
    BatchItem turn1{a, first, false};
    fwd.forward(kv, std::span<const BatchItem>(&turn1, 1));
    cache.insert(a, first);
    kv.free_sequence(a);

    // Turn two, from the cache: adopt, then compute only the new tokens.
    const std::vector<int32_t> blocks = cache.match(second);
    REQUIRE(!blocks.empty());
    const int32_t cached = kv.create_sequence();
    kv.adopt_blocks(cached, blocks);
    const size_t reused = static_cast<size_t>(kv.length(cached));
    CHECK(reused == first.size() / static_cast<size_t>(shape.block_size) * static_cast<size_t>(shape.block_size));
    BatchItem rest{cached, std::span<const int32_t>(second).subspan(reused), false};
    const auto from_cache = fwd.forward(kv, std::span<const BatchItem>(&rest, 1));
    const std::vector<float> cached_logits(from_cache.begin(), from_cache.end());

    // The same prompt computed whole.
    const int32_t whole = kv.create_sequence();
    BatchItem all{whole, second, false};
    const auto from_scratch = fwd.forward(kv, std::span<const BatchItem>(&all, 1));
    REQUIRE(from_scratch.size() == V);
    float diff = 0.0f;
    for (size_t v = 0; v < V; ++v) diff = std::max(diff, std::fabs(from_scratch[v] - cached_logits[v]));
    INFO("max |logit difference| " << diff);
    CHECK(diff < 1e-4f);
    CHECK(std::max_element(cached_logits.begin(), cached_logits.end()) - cached_logits.begin() ==
          std::max_element(from_scratch.begin(), from_scratch.end()) - from_scratch.begin());
    kv.free_sequence(cached);
    kv.free_sequence(whole);
    cache.clear();
    CHECK(kv.used_blocks() == 0);
}

namespace {

// One batched run of `prompts` (each a session of the runtime's path), all
// starting together; returns each one's SessionCore.
std::vector<std::unique_ptr<SessionCore>> run_batched(const Tokenizer& tok, const std::vector<std::vector<int32_t>>& prompts,
                                                      int32_t max_tokens, BatchVerifier& verifier, BatchDrafter* drafter,
                                                      int32_t n_ctx, bool cache_prompt = true) {
    std::vector<Driven> sessions;
    for (size_t i = 0; i < prompts.size(); ++i) {
        GenerationParams gp;
        gp.max_tokens = max_tokens;
        gp.sampling.temperature = 0.0f;
        gp.cache_prompt = cache_prompt;
        SpeculativeParams sp;
        sp.draft_max = 4 + static_cast<int32_t>(i % 3);
        sp.adaptive = false;
        Driven d;
        d.core = std::make_unique<SessionCore>(tok, prompts[i], gp, sp, drafter != nullptr, n_ctx);
        d.start_round = static_cast<int>(i);  // a later session may meet blocks an earlier one's prefill recorded
        sessions.push_back(std::move(d));
    }
    drive(sessions, verifier, drafter);
    std::vector<std::unique_ptr<SessionCore>> out;
    for (Driven& d : sessions) out.push_back(std::move(d.core));
    return out;
}

}  // namespace

TEST_CASE("prefix cache in the batched runtime: each turn of a five-turn chat prefills only what follows the cached blocks and "
          "its greedy output equals plain decoding (target and draft caches, real and colliding hashes, cache_prompt false)",
          "[prefix][batch][greedy]") {
    auto target = load("stories15M-f32.gguf");
    auto draft = load("stories15M-q8_0.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool), dfwd(*draft, pool);
    const int32_t n_ctx = 512;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 4)), dkv(dfwd.kv_shape(n_ctx, 4));
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    const Tokenizer& tok = target->tokenizer();
    const int32_t bs = kv.shape().block_size;
    const std::vector<std::string> user_turns = {"Once upon a time, there was a little girl named Lily.", " She went to the park.",
                                                 " Then it started to rain.", " Her mom called her home.", " The next day"};

    for (int variant = 0; variant < 3; ++variant) {  // 0: real hashes, 1: every block hashing alike, 2: cache_prompt false
        INFO("variant " << variant);
        {
            BatchVerifier verifier(fwd, kv);
            BatchDrafter drafter(&dfwd, &dkv);
            verifier.enable_prefix_cache(variant == 1 ? colliding_hash : default_block_hash);
            drafter.enable_prefix_cache(variant == 1 ? colliding_hash : default_block_hash);
            // Two conversations side by side, each turn = the last prompt + its reply + new text.
            std::vector<std::vector<int32_t>> prompts(2);
            std::vector<size_t> previous(2, 0);  // the last turn's prompt + reply length
            for (size_t turn = 0; turn < user_turns.size(); ++turn) {
                for (size_t c = 0; c < 2; ++c) {
                    const auto more = tok.encode((c == 1 ? std::string(" A dog barked.") : std::string()) + user_turns[turn], turn == 0);
                    if (turn == 0) prompts[c].clear();
                    prompts[c].insert(prompts[c].end(), more.begin(), more.end());
                }
                const auto cores = run_batched(tok, prompts, 20, verifier, &drafter, n_ctx, variant != 2);
                for (size_t c = 0; c < 2; ++c) {
                    INFO("turn " << turn + 1 << " conversation " << c);
                    GenerationParams gp;
                    gp.max_tokens = 20;
                    gp.sampling.temperature = 0.0f;
                    const GenerationResult ref = plain.generate(prompts[c], gp);
                    CHECK(cores[c]->output() == ref.tokens);
                    const int32_t cached = cores[c]->n_cached_prompt();
                    CHECK(cached % bs == 0);
                    CHECK(cached < static_cast<int32_t>(prompts[c].size()));
                    if (variant == 2 || turn == 0) {
                        CHECK(cached == 0);
                    } else {
                        // Every full block of the last prompt and reply, less the
                        // reply's last token (sampled, never fed).
                        CHECK(cached >= static_cast<int32_t>((previous[c] - 1) / static_cast<size_t>(bs)) * bs);
                    }
                    std::vector<int32_t> reply = cores[c]->output();
                    if (!reply.empty() && reply.back() == tok.eos_id()) reply.pop_back();
                    prompts[c].insert(prompts[c].end(), reply.begin(), reply.end());
                    previous[c] = prompts[c].size();
                }
            }
            REQUIRE(verifier.prefix_cache() != nullptr);
            if (variant != 2) {
                CHECK(verifier.prefix_cache()->hit_blocks() > 0);
                CHECK(drafter.prefix_cache()->hit_blocks() > 0);
            }
            // Every sequence closed: only the caches hold blocks.
            CHECK(kv.active_sequences() == 0);
            CHECK(kv.used_blocks() == verifier.prefix_cache()->cached_blocks());
            CHECK(dkv.used_blocks() == drafter.prefix_cache()->cached_blocks());
        }
        CHECK(kv.used_blocks() == 0);  // the caches let go with their verifier and drafter
        CHECK(dkv.used_blocks() == 0);
    }
}

TEST_CASE("prefix cache in the batched runtime: under KV pressure it evicts least recently used blocks and outputs stay exact",
          "[prefix][batch][greedy]") {
    auto target = load("stories15M-f32.gguf");
    ThreadPool pool(2);
    ForwardPass fwd(*target, pool);
    const int32_t n_ctx = 128;
    PagedKvCache kv(fwd.kv_shape(n_ctx, 2));  // 16 blocks: two sequences' worth, far less than the runs below leave behind
    PagedKvCache single_kv(fwd.kv_shape(n_ctx, 1));
    PlainDecoder plain(fwd, single_kv);
    const Tokenizer& tok = target->tokenizer();
    BatchVerifier verifier(fwd, kv);
    verifier.enable_prefix_cache();
    const std::vector<std::string> texts = {"The cat sat on the mat and looked at the bird in the tree.",
                                            "Tom had a red ball. He threw it high into the blue sky.",
                                            "One day, a little girl named Sue found a shiny rock near the river.",
                                            "Max the dog liked to run in the big green field with his friends."};
    for (int round = 0; round < 6; ++round) {
        // Two at a time, each a new text or one seen rounds ago.
        std::vector<std::vector<int32_t>> prompts;
        for (int j = 0; j < 2; ++j) prompts.push_back(tok.encode(texts[static_cast<size_t>((round + j * 3) % 4)], true));
        const auto cores = run_batched(tok, prompts, 40, verifier, nullptr, n_ctx);
        for (size_t c = 0; c < prompts.size(); ++c) {
            GenerationParams gp;
            gp.max_tokens = 40;
            gp.sampling.temperature = 0.0f;
            CHECK(cores[c]->output() == plain.generate(prompts[c], gp).tokens);
        }
        CHECK(kv.used_blocks() == verifier.prefix_cache()->cached_blocks());
        CHECK(kv.used_blocks() <= kv.shape().n_blocks);
    }
    CHECK(verifier.prefix_cache()->evicted_blocks() > 0);
    CHECK(verifier.prefix_cache()->hit_blocks() > 0);
}
