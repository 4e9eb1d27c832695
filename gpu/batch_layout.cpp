#include "gpu/batch_layout.h"

#include <algorithm>

namespace specd::gpu {

size_t packed_capacity(const KvCacheShape& shape, const BatchLimits& limits) {
    const size_t stride = static_cast<size_t>((shape.max_seq_len + shape.block_size - 1) / shape.block_size);
    const size_t max_items = static_cast<size_t>(std::min(limits.max_batch_tokens, shape.max_sequences));
    return 3 * static_cast<size_t>(limits.max_batch_tokens) + static_cast<size_t>(limits.max_logit_rows) + max_items * stride;
}

void plan_batch(PagedKvCache& kv, std::span<const BatchItem> items, const BatchLimits& limits, BatchLayout& out) {
    const KvCacheShape& shape = kv.shape();
    const BatchSize size = check_and_reserve_batch(kv, items, limits);
    const int32_t m = size.n_rows, r = size.n_out;

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
