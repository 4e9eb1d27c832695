// The checks every forward backend applies to a batch before any work, and
// the KV block reservation that follows them, in one place: the CPU pass and
// the CUDA backend's host half must refuse exactly the same batches with
// exactly the same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/backend.h"
#include "engine/kv_cache.h"

namespace specd {

// What one forward() call of a backend accepts.
struct BatchLimits {
    int32_t n_vocab = 0;
    int32_t n_ctx_max = 0;         // longest context the backend supports (its RoPE table)
    int32_t max_batch_tokens = 0;  // M: most tokens in one call
    int32_t max_logit_rows = 0;    // R: most logit rows one call returns
};

struct BatchSize {
    int32_t n_rows = 0;  // tokens in the batch (M)
    int32_t n_out = 0;   // logit rows (R)
};

// Validates `items` (known sequences, each once, with tokens, every token in
// the vocabulary, the context and the limits respected), then reserves every
// sequence's blocks for its new tokens. Throws specd::Error for a bad batch
// (nothing reserved) and KvCacheFull when the pool lacks blocks (the cache
// left as it was). Lengths are not moved: the caller sets them once the batch ran.
BatchSize check_and_reserve_batch(PagedKvCache& kv, std::span<const BatchItem> items, const BatchLimits& limits);

// forward_greedy's precondition, checked before any work: `slots` argmax
// entries hold every logit row `items` yield (forward()'s rule: every
// token's row for all_logits items, else the last). Throws specd::Error.
void check_argmax_slots(std::span<const BatchItem> items, size_t slots);

}  // namespace specd
