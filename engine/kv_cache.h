// Paged KV cache: a fixed pool of blocks, each holding `block_size`
// consecutive positions of every layer's keys and values, and a block table
// per sequence. Sequences grow block by block, can be truncated to any length
// (speculative rollback) and freed; blocks return to the pool. All memory is
// allocated in the constructor.
//
// A block may be held by several sequences and by a prefix cache at once
// (engine/prefix_cache.h): each holder counts one reference, and the block
// returns to the pool when the last one lets go. Shared blocks are full and
// read-only: a sequence adopts them only at its start, and may not be cut
// back to a length inside one (its next write would change the others').
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/tensor_type.h"

namespace specd {

struct KvCacheShape {
    int32_t n_layers = 0;
    int32_t kv_dim = 0;          // n_kv_heads * head_dim
    int32_t block_size = 16;     // positions per block
    int32_t n_blocks = 0;        // blocks in the pool
    int32_t max_seq_len = 0;     // longest sequence (the context size)
    int32_t max_sequences = 64;  // sequence slots
    // Element type of the host pools: F16 (the default, as llama.cpp's, and
    // what the GPU backend stores) halves the memory, so a budget holds twice
    // the positions, and the bytes attention reads: at 16 sequences it
    // decodes 10-25% faster (docs/BENCHMARKS.md). F32 keeps keys and values
    // exactly. Nothing else is accepted.
    TensorType type = TensorType::F16;
};

// Where the keys and values live. Host: this object owns the pools, of
// shape.type elements (the CPU backend). None: block bookkeeping only; a
// device backend keeps the storage, indexed by the same block ids, and
// key()/value() must not be called.
enum class KvStorage { Host, None };

class PagedKvCache {
public:
    explicit PagedKvCache(const KvCacheShape& shape, KvStorage storage = KvStorage::Host);

    const KvCacheShape& shape() const { return shape_; }
    bool has_storage() const { return storage_ == KvStorage::Host; }
    // Blocks needed to hold n positions.
    int32_t blocks_for(int32_t n_positions) const { return (n_positions + shape_.block_size - 1) / shape_.block_size; }
    // Bytes of one block (keys and values of every layer) and of the whole
    // pool for a shape, in shape.type elements.
    static size_t block_bytes(const KvCacheShape& shape);
    static size_t pool_bytes(const KvCacheShape& shape);
    size_t element_bytes() const { return tensor_type_block_bytes(shape_.type); }

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
    // Drops positions >= n and lets go of the blocks no longer needed. A
    // length inside a block other holders share is an error (the next
    // write would change their positions); a block boundary is fine.
    void truncate(int32_t seq, int32_t n);

    // Prefix sharing. adopt_blocks: `blocks` (pool ids of full blocks, in
    // position order) become the first blocks of an empty sequence, which
    // then has blocks.size() * block_size positions; each gains a reference.
    // retain_block / release_block: a holder outside the sequences (the
    // prefix cache) takes or drops a reference; the last release returns
    // the block to the pool. block_refs: the holders of a block (0: free).
    void adopt_blocks(int32_t seq, std::span<const int32_t> blocks);
    void retain_block(int32_t block);
    void release_block(int32_t block);
    int32_t block_refs(int32_t block) const;

    // Key / value vectors (kv_dim elements of shape().type) of one position;
    // the position must be reserved. The forward pass writes them with
    // store_kv_row (kernels.h).
    void* key(int32_t seq, int32_t layer, int32_t pos) { return slot(k_pool_, seq, layer, pos); }
    void* value(int32_t seq, int32_t layer, int32_t pos) { return slot(v_pool_, seq, layer, pos); }
    // The same as f32 (kv_dim floats), and written from f32 (f16 rounds to
    // nearest even): for tests and checks, not the hot path.
    void read_key(int32_t seq, int32_t layer, int32_t pos, float* out) const;
    void read_value(int32_t seq, int32_t layer, int32_t pos, float* out) const;
    void write(int32_t seq, int32_t layer, int32_t pos, const float* key, const float* value);
    // Block `b` of a sequence for one layer: (block_size, kv_dim) keys/values
    // of shape().type.
    const void* key_block(int32_t seq, int32_t layer, int32_t b) const { return block(k_pool_, seq, layer, b); }
    const void* value_block(int32_t seq, int32_t layer, int32_t b) const { return block(v_pool_, seq, layer, b); }

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
    // Byte offset of (pool block, layer) in a pool.
    size_t block_offset(int32_t pool_block, int32_t layer) const {
        return (static_cast<size_t>(pool_block) * shape_.n_layers + layer) * shape_.block_size * shape_.kv_dim * element_bytes();
    }
    unsigned char* slot(std::vector<unsigned char>& pool, int32_t seq, int32_t layer, int32_t pos) {
        const Sequence& s = seqs_[static_cast<size_t>(seq)];
        const int32_t b = s.blocks[static_cast<size_t>(pos / shape_.block_size)];
        return pool.data() + block_offset(b, layer) + static_cast<size_t>(pos % shape_.block_size) * shape_.kv_dim * element_bytes();
    }
    const unsigned char* slot(const std::vector<unsigned char>& pool, int32_t seq, int32_t layer, int32_t pos) const {
        return const_cast<PagedKvCache*>(this)->slot(const_cast<std::vector<unsigned char>&>(pool), seq, layer, pos);
    }
    const unsigned char* block(const std::vector<unsigned char>& pool, int32_t seq, int32_t layer, int32_t b) const {
        return pool.data() + block_offset(seqs_[static_cast<size_t>(seq)].blocks[static_cast<size_t>(b)], layer);
    }
    void read(const std::vector<unsigned char>& pool, int32_t seq, int32_t layer, int32_t pos, float* out) const;
    Sequence& checked(int32_t seq);

    KvCacheShape shape_;
    KvStorage storage_;
    std::vector<unsigned char> k_pool_;  // (n_blocks, n_layers, block_size, kv_dim) of shape.type; empty without host storage
    std::vector<unsigned char> v_pool_;  // (n_blocks, n_layers, block_size, kv_dim) of shape.type; empty without host storage
    std::vector<int32_t> free_list_;  // pool indices of free blocks (stack)
    std::vector<int32_t> refs_;       // (n_blocks) holders of each block: sequences and the prefix cache; 0: free
    int32_t take_free_block();
    void checked_block(int32_t block) const;
    std::vector<Sequence> seqs_;      // (max_sequences)
    std::vector<int32_t> free_slots_; // unused sequence ids (stack)
    int32_t active_count_ = 0;
};

}  // namespace specd
