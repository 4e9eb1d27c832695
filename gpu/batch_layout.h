// The host half of one GPU forward call: validates a batch with the CPU
// ForwardPass's own check (engine/batch_check.h), reserves the sequences' KV blocks (host bookkeeping)
// and packs what the kernels need into one int32 array, uploaded with a
// single copy. Plain C++: tested without a device.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/batch_check.h"
#include "engine/kv_cache.h"

namespace specd::gpu {

// Offsets (in int32 elements) of the parts of BatchLayout::packed.
struct PackedOffsets {
    int32_t row_token = 0;    // (n_rows) token id of each row
    int32_t row_pos = 0;      // (n_rows) absolute position of each row
    int32_t row_item = 0;     // (n_rows) batch item of each row (its block table)
    int32_t out_row = 0;      // (n_out) row index of each logit row
    int32_t block_table = 0;  // (n_items, table_stride) pool block ids of each item's blocks, -1 past its end
};

struct BatchLayout {
    int32_t n_rows = 0;        // tokens in the batch (M)
    int32_t n_out = 0;         // logit rows (R)
    int32_t n_items = 0;
    int32_t table_stride = 0;  // block-table entries per item: blocks of the longest sequence the cache allows
    int32_t max_positions = 0; // most positions any row attends to (its pos + 1)
    PackedOffsets at;
    std::vector<int32_t> packed;  // the parts above, back to back

    std::span<const int32_t> row_token() const { return part(at.row_token, n_rows); }
    std::span<const int32_t> row_pos() const { return part(at.row_pos, n_rows); }
    std::span<const int32_t> row_item() const { return part(at.row_item, n_rows); }
    std::span<const int32_t> out_row() const { return part(at.out_row, n_out); }
    std::span<const int32_t> block_table(int32_t item) const {
        return part(at.block_table + item * table_stride, table_stride);
    }

private:
    std::span<const int32_t> part(int32_t offset, int32_t n) const {
        return {packed.data() + offset, static_cast<size_t>(n)};
    }
};

// Most int32s a layout can need for a cache shape and limits (the size of
// the device buffer it is copied into).
size_t packed_capacity(const KvCacheShape& shape, const BatchLimits& limits);

// check_and_reserve_batch (engine/batch_check.h), then fills `out` (whose vector keeps its capacity).
// Throws KvCacheFull when the pool lacks blocks (then nothing was reserved)
// and specd::Error for a bad batch. Lengths are not moved: the caller calls
// kv.set_length after the device ran the batch.
void plan_batch(PagedKvCache& kv, std::span<const BatchItem> items, const BatchLimits& limits, BatchLayout& out);

}  // namespace specd::gpu
