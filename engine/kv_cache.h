// Paged KV cache: a fixed pool of blocks, each holding `block_size`
// consecutive positions of every layer's keys and values, and a block table
// per sequence. Sequences grow block by block, can be truncated to any length
// (speculative rollback) and freed; blocks return to the pool. All memory is
// allocated in the constructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace specd {

struct KvCacheShape {
    int32_t n_layers = 0;
    int32_t kv_dim = 0;          // n_kv_heads * head_dim
    int32_t block_size = 16;     // positions per block
    int32_t n_blocks = 0;        // blocks in the pool
    int32_t max_seq_len = 0;     // longest sequence (the context size)
    int32_t max_sequences = 64;  // sequence slots
};

// Where the keys and values live. Host: this object owns the f32 pools
// (the CPU backend). None: block bookkeeping only; a device backend keeps
// the storage, indexed by the same block ids, and key()/value() must not be
// called.
enum class KvStorage { Host, None };

class PagedKvCache {
public:
    explicit PagedKvCache(const KvCacheShape& shape, KvStorage storage = KvStorage::Host);

    const KvCacheShape& shape() const { return shape_; }
    bool has_storage() const { return storage_ == KvStorage::Host; }
    // Blocks needed to hold n positions.
    int32_t blocks_for(int32_t n_positions) const { return (n_positions + shape_.block_size - 1) / shape_.block_size; }
    // Bytes of the pool for a shape (K and V, f32).
    static size_t pool_bytes(const KvCacheShape& shape);

    // A new empty sequence; throws specd::Error when every slot is taken.
    int32_t create_sequence();
    // Releases the sequence and all its blocks. Unknown ids are an error.
    void free_sequence(int32_t seq);
    bool is_active(int32_t seq) const;

    // Makes room for positions [0, n_positions): allocates missing blocks.
    // Returns false (and changes nothing) if the pool lacks blocks; throws if
    // n_positions exceeds max_seq_len.
    bool reserve(int32_t seq, int32_t n_positions);
    // Positions [0, length) hold valid keys/values.
    int32_t length(int32_t seq) const { return seqs_[static_cast<size_t>(seq)].length; }
    // Marks positions [0, n) as written (n <= reserved capacity).
    void set_length(int32_t seq, int32_t n);
    // Drops positions >= n and returns the blocks no longer needed.
    void truncate(int32_t seq, int32_t n);

    // Key / value vectors (kv_dim floats) of one position; the position must
    // be reserved.
    float* key(int32_t seq, int32_t layer, int32_t pos) { return slot(k_pool_, seq, layer, pos); }
    float* value(int32_t seq, int32_t layer, int32_t pos) { return slot(v_pool_, seq, layer, pos); }
    const float* key(int32_t seq, int32_t layer, int32_t pos) const { return const_cast<PagedKvCache*>(this)->key(seq, layer, pos); }
    const float* value(int32_t seq, int32_t layer, int32_t pos) const { return const_cast<PagedKvCache*>(this)->value(seq, layer, pos); }
    // Block `b` of a sequence for one layer: (block_size, kv_dim) keys/values.
    const float* key_block(int32_t seq, int32_t layer, int32_t b) const { return block(k_pool_, seq, layer, b); }
    const float* value_block(int32_t seq, int32_t layer, int32_t b) const { return block(v_pool_, seq, layer, b); }

    // The pool block ids of a sequence's blocks, in position order (block b
    // holds positions [b*block_size, (b+1)*block_size)); valid until the
    // sequence is reserved, truncated or freed.
    std::span<const int32_t> block_table(int32_t seq) const { return seqs_[static_cast<size_t>(seq)].blocks; }

    int32_t free_blocks() const { return static_cast<int32_t>(free_list_.size()); }
    int32_t used_blocks() const { return shape_.n_blocks - free_blocks(); }
    int32_t active_sequences() const { return active_count_; }

private:
    struct Sequence {
        bool active = false;
        int32_t length = 0;
        std::vector<int32_t> blocks;  // block table: pool index per block, capacity max blocks per sequence
    };
    size_t block_offset(int32_t pool_block, int32_t layer) const {
        return (static_cast<size_t>(pool_block) * shape_.n_layers + layer) * shape_.block_size * shape_.kv_dim;
    }
    float* slot(std::vector<float>& pool, int32_t seq, int32_t layer, int32_t pos) {
        const Sequence& s = seqs_[static_cast<size_t>(seq)];
        const int32_t b = s.blocks[static_cast<size_t>(pos / shape_.block_size)];
        return pool.data() + block_offset(b, layer) + static_cast<size_t>(pos % shape_.block_size) * shape_.kv_dim;
    }
    const float* block(const std::vector<float>& pool, int32_t seq, int32_t layer, int32_t b) const {
        return pool.data() + block_offset(seqs_[static_cast<size_t>(seq)].blocks[static_cast<size_t>(b)], layer);
    }
    Sequence& checked(int32_t seq);

    KvCacheShape shape_;
    KvStorage storage_;
    std::vector<float> k_pool_;  // (n_blocks, n_layers, block_size, kv_dim); empty without host storage
    std::vector<float> v_pool_;  // (n_blocks, n_layers, block_size, kv_dim); empty without host storage
    std::vector<int32_t> free_list_;  // pool indices of free blocks (stack)
    std::vector<Sequence> seqs_;      // (max_sequences)
    std::vector<int32_t> free_slots_; // unused sequence ids (stack)
    int32_t active_count_ = 0;
};

}  // namespace specd
