#include "gpu/batch_layout.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace specd::gpu {

size_t packed_capacity(const KvCacheShape& shape, const BatchLimits& limits) {
    const size_t stride = static_cast<size_t>((shape.max_seq_len + shape.block_size - 1) / shape.block_size);
    const size_t max_items = static_cast<size_t>(std::min(limits.max_batch_tokens, shape.max_sequences));
    return 3 * static_cast<size_t>(limits.max_batch_tokens) + static_cast<size_t>(limits.max_logit_rows) + max_items * stride;
}

void plan_batch(PagedKvCache& kv, std::span<const BatchItem> items, const BatchLimits& limits, BatchLayout& out) {
    const KvCacheShape& shape = kv.shape();
    const int32_t n_ctx = std::min(shape.max_seq_len, limits.n_ctx_max);
    int32_t m = 0, r = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        const BatchItem& item = items[i];
        if (!kv.is_active(item.seq)) throw Error("forward: unknown KV sequence " + std::to_string(item.seq));
        if (item.tokens.empty()) throw Error("forward: batch item without tokens");
        for (size_t j = 0; j < i; ++j) {
            if (items[j].seq == item.seq) throw Error("forward: sequence " + std::to_string(item.seq) + " twice in one batch");
        }
        const int32_t n = static_cast<int32_t>(item.tokens.size());
        if (static_cast<int64_t>(m) + n > limits.max_batch_tokens) {
            throw Error("forward: batch of more than " + std::to_string(limits.max_batch_tokens) + " tokens");
        }
        const int32_t start = kv.length(item.seq);
        if (start + n > n_ctx) {
            throw Error("forward: sequence would grow to " + std::to_string(start + n) +
                        " positions, beyond the context size " + std::to_string(n_ctx));
        }
        const int32_t n_logit = item.all_logits ? n : 1;
        if (r + n_logit > limits.max_logit_rows) {
            throw Error("forward: more than " + std::to_string(limits.max_logit_rows) + " logit rows requested");
        }
        for (int32_t tok : item.tokens) {
            if (tok < 0 || tok >= limits.n_vocab) {
                throw Error("forward: token id " + std::to_string(tok) + " is outside the vocabulary (0.." +
                            std::to_string(limits.n_vocab - 1) + ")");
            }
        }
        m += n;
        r += n_logit;
    }

    // Reserve every sequence's blocks before any work, so a full pool leaves
    // the cache as it was.
    for (const BatchItem& item : items) {
        const int32_t want = kv.length(item.seq) + static_cast<int32_t>(item.tokens.size());
        if (!kv.reserve(item.seq, want)) {
            for (const BatchItem& undo : items) kv.truncate(undo.seq, kv.length(undo.seq));
            throw KvCacheFull("KV cache full: sequence " + std::to_string(item.seq) + " needs " +
                              std::to_string(kv.blocks_for(want)) + " blocks, " + std::to_string(kv.free_blocks()) +
                              " free");
        }
    }

    out.n_rows = m;
    out.n_out = r;
    out.n_items = static_cast<int32_t>(items.size());
    out.table_stride = kv.blocks_for(shape.max_seq_len);
    out.at.row_token = 0;
    out.at.row_pos = m;
    out.at.row_item = 2 * m;
    out.at.out_row = 3 * m;
    out.at.block_table = 3 * m + r;
    out.packed.assign(static_cast<size_t>(out.at.block_table) + static_cast<size_t>(out.n_items) * out.table_stride, -1);
    out.max_positions = 0;
    int32_t row = 0, logit = 0;
    for (int32_t i = 0; i < out.n_items; ++i) {
        const BatchItem& item = items[static_cast<size_t>(i)];
        const int32_t start = kv.length(item.seq), n = static_cast<int32_t>(item.tokens.size());
        for (int32_t t = 0; t < n; ++t, ++row) {
            out.packed[static_cast<size_t>(out.at.row_token + row)] = item.tokens[static_cast<size_t>(t)];
            out.packed[static_cast<size_t>(out.at.row_pos + row)] = start + t;
            out.packed[static_cast<size_t>(out.at.row_item + row)] = i;
            if (item.all_logits || t == n - 1) out.packed[static_cast<size_t>(out.at.out_row + logit++)] = row;
        }
        out.max_positions = std::max(out.max_positions, start + n);
        const std::span<const int32_t> table = kv.block_table(item.seq);
        std::copy(table.begin(), table.end(), out.packed.begin() + out.at.block_table + static_cast<ptrdiff_t>(i) * out.table_stride);
    }
}

}  // namespace specd::gpu
