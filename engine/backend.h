// The engine's forward backend interface: whatever runs the Llama forward
// pass (the CPU ForwardPass, the CUDA backend in gpu/) over a paged KV cache.
// The block bookkeeping (PagedKvCache's block tables, truncate, free) always
// lives on the host; a backend decides where the keys and values are stored:
// the CPU backend in the cache's host pool, a GPU backend in its own device
// pool indexed by the same block ids (make_kv_cache() then returns a cache
// without host storage). BatchVerifier, BatchDrafter, PlainDecoder and
// SpeculativeDecoder only see this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/error.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace specd {

// The KV pool has no block left for a sequence's new tokens.
class KvCacheFull : public Error {
public:
    using Error::Error;
};

struct BatchItem {
    int32_t seq = -1;                   // KV cache sequence; tokens are appended at its current length
    std::span<const int32_t> tokens;    // new tokens (at least one)
    bool all_logits = false;            // logits for every token (verification) or only the last (prefill/decode)
};

struct ForwardOptions {
    int32_t max_batch_tokens = 512;  // most tokens in one forward() call (sum over items)
    int32_t max_logit_rows = 256;    // most logit rows one call may return
    // For a draft model only (CPU backend; others ignore it): 0 = the full
    // output head. N > 0 = after kDraftHeadWarmupTokens tokens have been fed,
    // logits are computed only for the N token ids fed
    // most often so far (ties: lower id first), and are -inf for every other
    // id. The head is the largest matrix of a small model (stories15M: 61%
    // of a token's multiply-adds), so a draft token gets ~2x cheaper; the
    // drafts can then never propose a rare token, which the verifier
    // rejects as any wrong draft (Zhao et al. 2025, FR-Spec). Never set it
    // on a target: its output would no longer be the model's.
    int32_t draft_head_tokens = 0;
};

class ForwardBackend {
public:
    virtual ~ForwardBackend() = default;

    // Runs the batch and returns logits (n_rows, n_vocab) in host memory,
    // rows in item order: every token's row for all_logits items, else the
    // last token's. Each item's sequence grows by its token count. Throws
    // KvCacheFull when the pool lacks blocks (nothing is appended then),
    // specd::Error for a bad batch (token out of range, too many tokens, a
    // sequence twice) or a failure of the device. The span stays valid until
    // the next call.
    virtual std::span<const float> forward(PagedKvCache& kv, std::span<const BatchItem> items) = 0;

    // Optional capability for greedy decoding: runs the batch exactly like
    // forward() but returns only each logit row's argmax (the highest logit,
    // the lowest id on ties; rows in forward()'s order) in
    // `argmax_out[0..n_rows)`, so a device backend copies n_rows ints to the
    // host instead of n_rows * n_vocab floats. `argmax_out` must hold at
    // least the batch's row count (specd::Error otherwise, nothing run).
    // Returns false, running nothing, when the backend does not offer it
    // (the default); the caller then uses forward(). The CPU backend offers
    // it too: each thread takes the argmax of the columns it computed.
    // Same exceptions as forward().
    virtual bool forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) {
        (void)kv;
        (void)items;
        (void)argmax_out;
        return false;
    }

    // A KV cache of `shape` that this backend can run on (the CPU backend:
    // host storage; a GPU backend: block tables only, storage in VRAM).
    virtual std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheShape& shape) = 0;

    virtual const LlamaModel& model() const = 0;
    virtual const ForwardOptions& options() const = 0;
    // "cpu" or "cuda:<ordinal>"; for logs.
    virtual std::string name() const = 0;

    int32_t n_vocab() const { return model().hparams().n_vocab; }
    // A KV cache shape for this model with `n_sequences` slots of `n_ctx`
    // positions each (the pool holds exactly that many blocks).
    KvCacheShape kv_shape(int32_t n_ctx, int32_t n_sequences, int32_t block_size = 16) const {
        return kv_shape_for(model(), n_ctx, n_sequences, block_size);
    }
    static KvCacheShape kv_shape_for(const LlamaModel& model, int32_t n_ctx, int32_t n_sequences, int32_t block_size = 16) {
        KvCacheShape s;
        s.n_layers = model.hparams().n_layers;
        s.kv_dim = model.hparams().kv_dim();
        s.block_size = block_size;
        s.max_seq_len = n_ctx;
        s.max_sequences = n_sequences;
        s.n_blocks = n_sequences * ((n_ctx + block_size - 1) / block_size);
        return s;
    }
};

}  // namespace specd
