#include "engine/batch_check.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace specd {

BatchSize check_and_reserve_batch(PagedKvCache& kv, std::span<const BatchItem> items, const BatchLimits& limits) {
    const int32_t n_ctx = std::min(kv.shape().max_seq_len, limits.n_ctx_max);
    BatchSize size;
    for (size_t i = 0; i < items.size(); ++i) {
        const BatchItem& item = items[i];
        if (!kv.is_active(item.seq)) throw Error("forward: unknown KV sequence " + std::to_string(item.seq));
        if (item.tokens.empty()) throw Error("forward: batch item without tokens");
        for (size_t j = 0; j < i; ++j) {
            if (items[j].seq == item.seq) throw Error("forward: sequence " + std::to_string(item.seq) + " twice in one batch");
        }
        const int64_t n = static_cast<int64_t>(item.tokens.size());
        if (size.n_rows + n > limits.max_batch_tokens) {
            throw Error("forward: batch of more than " + std::to_string(limits.max_batch_tokens) + " tokens");
        }
        const int64_t start = kv.length(item.seq);
        if (start + n > n_ctx) {
            throw Error("forward: sequence would grow to " + std::to_string(start + n) +
                        " positions, beyond the context size " + std::to_string(n_ctx));
        }
        const int32_t n_logit = item.all_logits ? static_cast<int32_t>(n) : 1;
        if (size.n_out + n_logit > limits.max_logit_rows) {
            throw Error("forward: more than " + std::to_string(limits.max_logit_rows) + " logit rows requested");
        }
        for (int32_t tok : item.tokens) {
            if (tok < 0 || tok >= limits.n_vocab) {
                throw Error("forward: token id " + std::to_string(tok) + " is outside the vocabulary (0.." +
                            std::to_string(limits.n_vocab - 1) + ")");
            }
        }
        size.n_rows += static_cast<int32_t>(n);
        size.n_out += n_logit;
    }
    // Reserve every sequence's blocks before any work, so a full pool leaves
    // the cache as it was (only blocks are attached, lengths do not move).
    for (const BatchItem& item : items) {
        const int32_t want = kv.length(item.seq) + static_cast<int32_t>(item.tokens.size());
        if (!kv.reserve(item.seq, want)) {
            for (const BatchItem& undo : items) kv.truncate(undo.seq, kv.length(undo.seq));
            throw KvCacheFull("KV cache full: sequence " + std::to_string(item.seq) + " needs " +
                              std::to_string(kv.blocks_for(want)) + " blocks, " + std::to_string(kv.free_blocks()) +
                              " free");
        }
    }
    return size;
}

void check_argmax_slots(std::span<const BatchItem> items, size_t slots) {
    size_t rows = 0;
    for (const BatchItem& item : items) rows += item.all_logits ? item.tokens.size() : 1;
    if (slots < rows) {
        throw Error("forward_greedy: " + std::to_string(slots) + " argmax slots for " + std::to_string(rows) + " logit rows");
    }
}

}  // namespace specd
