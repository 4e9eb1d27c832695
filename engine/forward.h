// The batched CPU forward pass of a Llama model over a paged KV cache: one
// call runs T_i new tokens for each of S sequences (prefill chunks, single
// decode steps and k+1-token speculative verifications mix freely) and
// returns the requested logits. All scratch memory is allocated in the
// constructor; forward() allocates nothing, except when it rebuilds a
// draft head (ForwardOptions::draft_head_tokens).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/kernels.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/packed_weights.h"
#include "engine/role_input.h"
#include "engine/thread_pool.h"

namespace specd {

// The CPU backend.
class ForwardPass : public ForwardBackend {
public:
    ForwardPass(const LlamaModel& model, ThreadPool& pool, ForwardOptions options = {});

    // Runs the batch and returns logits (n_rows, n_vocab), rows in item
    // order: every token's row for all_logits items, else the last token's.
    // Each item's sequence grows by its token count. Throws KvCacheFull when
    // the pool lacks blocks (nothing is appended then), specd::Error for a bad
    // batch (token out of range, too many tokens, a sequence twice).
    std::span<const float> forward(PagedKvCache& kv, std::span<const BatchItem> items) override;
    // forward() with each thread taking the argmax of the logit columns it
    // just computed, while they are still in its cache: greedy decoding
    // then skips a single-threaded pass over n_vocab floats per row.
    bool forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) override;
    // A cache with host storage (what this backend reads and writes).
    std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheShape& shape) override;

    const LlamaModel& model() const override { return model_; }
    const ForwardOptions& options() const override { return options_; }
    std::string name() const override { return "cpu"; }
    Isa isa() const { return isa_; }
    ThreadPool& pool() { return pool_; }

private:
    // Runs the batch; returns the number of logit rows.
    int32_t run(PagedKvCache& kv, std::span<const BatchItem> items);
    void run_layers(int ith, int nth, PagedKvCache& kv);
    int64_t share_chunk(int64_t n) const;
    void attention(int ith, int nth, PagedKvCache& kv, int32_t layer);
    void add_normed_rows(const std::vector<float>& norm, Range rows);
    // options_.draft_head_tokens: counts the batch's tokens and rebuilds the
    // draft head when the count passes next_head_rebuild_.
    void observe_tokens();
    void rebuild_draft_head();
    bool draft_head_active() const { return !head_ids_.empty(); }
    // matmul of w's rows [b, e) against x, from w's packed copy when there
    // is one (packed_) and the range is whole tiles.
    void matmul_weight(const WeightMatrix& w, const PreparedInput& x, float* y, int64_t ldy, int64_t b, int64_t e) const;

    const LlamaModel& model_;
    ThreadPool& pool_;
    RangeShare share_;  // the matmul phases' output rows
    ForwardOptions options_;
    Isa isa_;
    const PackedWeights* packed_ = nullptr;  // the model's packed copies for isa_ (SPECD_REPACK), else null
    int64_t packed_rows_ = 0;                // their tile rows (kernels.h packed_tile_rows)
    int32_t n_ctx_max_;  // longest context the RoPE table covers (model's context_length)

    // Per call.
    int32_t n_rows_ = 0;    // tokens in this batch (M)
    int32_t n_out_ = 0;     // logit rows (R)
    std::vector<int32_t> row_token_;  // (M) token id
    std::vector<int32_t> row_seq_;    // (M) KV sequence
    std::vector<int32_t> row_pos_;    // (M) absolute position
    std::vector<int32_t> out_row_;    // (R) row index m of each logit row

    // Scratch, M = max_batch_tokens, R = max_logit_rows.
    std::vector<float> x_;       // (M, dim) residual stream
    std::vector<float> xb_;      // (M, dim) normed input; (M, q_dim) attention output
    std::vector<float> qkv_;     // (M, q_dim + 2*kv_dim) q | k | v
    std::vector<float> proj_;    // (M, dim) output of wo / w_down before the residual add
    std::vector<float> ffn_;     // (M, 2*ffn_dim) gate | up, then silu(gate)*up in the gate half
    std::vector<float> xout_;    // (R, dim) normed rows that need logits
    std::vector<float> logits_;  // (R, n_vocab)
    // The best logit and its id among one thread's vocabulary columns.
    struct ArgmaxPart {
        float logit;
        int32_t id;  // -1: no ordered logit (all NaN or -inf, or no columns)
    };
    bool want_argmax_ = false;            // this call also fills argmax_parts_
    std::vector<ArgmaxPart> argmax_parts_;  // (threads, R)
    std::vector<float> scores_;  // (threads, kAttentionGroupRows, n_ctx) attention scores per thread
    // Attention groups: consecutive rows of one item (one sequence, consecutive
    // positions), at most kAttentionGroupRows each, so that a group reads
    // each key and value block once for all its rows.
    struct AttentionGroup {
        int32_t first_row;
        int32_t n_rows;
    };
    std::vector<AttentionGroup> attention_groups_;  // (<= M)
    std::vector<float> rope_cos_;  // (n_ctx, rope_dim/2)
    std::vector<float> rope_sin_;  // (n_ctx, rope_dim/2)
    std::vector<float> rope_cos_swa_;  // (n_ctx, rope_dim/2) windowed layers' (hparams sliding_window), else empty
    std::vector<float> rope_sin_swa_;  // (n_ctx, rope_dim/2)
    RoleInput in_attn_, in_wo_, in_ffn_, in_down_, in_cls_;  // activations per matmul role

    // The draft head (options_.draft_head_tokens > 0), H = its row count.
    std::vector<uint32_t> token_fed_count_;   // (n_vocab) times each id was fed
    std::vector<unsigned char> in_head_;      // (n_vocab) 1 = a row of the head
    int64_t tokens_fed_ = 0;
    int64_t fed_since_rebuild_ = 0;
    int64_t missed_since_rebuild_ = 0;        // tokens fed since the last rebuild that the head lacks
    std::vector<int32_t> head_ids_;           // (H) ids of the head's rows, ascending; empty = full head
    std::vector<unsigned char> head_rows_;    // (H, classifier row bytes) those rows of the classifier
    bool head_rows_packed_ = false;           // head_rows_ holds them in the packed layout
    std::vector<float> head_logits_;          // (R, H) the head's logits before the scatter into logits_
};

// The draft head (ForwardOptions::draft_head_tokens) is first built after
// kDraftHeadWarmupTokens tokens have been fed. It is rebuilt when tokens it
// lacks are fed: at once when kDraftHeadMissBurst of them came since the
// last rebuild (a prompt with new words), else after kDraftHeadRebuildEvery
// tokens (a rebuild ranks the whole vocabulary once).
constexpr int64_t kDraftHeadWarmupTokens = 1024;
constexpr int64_t kDraftHeadMissBurst = 16;
constexpr int64_t kDraftHeadRebuildEvery = 256;

// Most rows of one attention group (ForwardPass::attention_groups_).
constexpr int32_t kAttentionGroupRows = 8;

// Splits of an output dimension across threads are aligned to this many rows
// so each thread's kernel sees whole register tiles.
constexpr int64_t kMatmulRowAlign = 16;

// Matmul phases of batches up to kShareMaxRows rows are shared between the
// threads kShareChunkRows output rows at a time (ForwardPass::share_chunk).
// From 16 rows q8_0 goes to AMX, which packs the activations once per call.
// Measured on the 1.1B q8_0 target, 2 threads, one row: 18.5-19.2 t/s with
// static halves, 19.2-19.7 shared; 32, 64 and 128 rows per chunk alike.
constexpr int kShareMaxRows = 15;
constexpr int64_t kShareChunkRows = 64;

}  // namespace specd
