// Prefix cache: the KV blocks of earlier prompts and outputs, kept after
// their sequences end, so that a request starting with the same tokens
// adopts them instead of computing them again (what vLLM's automatic prefix
// caching, SGLang's radix cache and llama-server's cache_prompt do).
//
// Only full blocks are cached, as a tree: a node is one block's tokens, its
// parent the block before it, so a path from the root is a prefix. Nodes are
// found by a hash of (parent's hash, the block's tokens), and a hash match is
// confirmed by comparing the parent and every token: a collision can cost a
// lookup, never serve another text's keys and values.
//
// The cache holds one reference to each block it records
// (PagedKvCache::retain_block); sequences that adopt a cached prefix hold
// their own. Under pressure evict() lets go of the least recently used
// leaves that no sequence holds, so their blocks return to the pool.
//
// One PrefixCache per PagedKvCache (the target's and the draft's each have
// one). Not thread-safe: the owner of the KV cache calls it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"

namespace specd {

// The hash of one block given its parent's (0 for the first block).
using BlockHasher = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens);

class PrefixCache {
public:
    // `kv` must outlive the cache. `hasher`: default_block_hash unless a
    // test forces collisions.
    explicit PrefixCache(PagedKvCache& kv, BlockHasher hasher = default_block_hash);
    ~PrefixCache();
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    // The pool blocks of the longest cached prefix of `tokens`, in order,
    // for PagedKvCache::adopt_blocks. It never covers the last token: the
    // caller still runs that one to get the logits that follow the prompt
    // (so at most (tokens.size() - 1) / block_size blocks). Marks the path
    // as just used.
    std::vector<int32_t> match(std::span<const int32_t> tokens);

    // Records the full blocks of sequence `seq` whose positions hold
    // `tokens` (tokens[i] at position i; only the first length(seq) count).
    // Blocks already cached under the same prefix are kept as they are.
    // Returns the number of blocks newly recorded.
    int32_t insert(int32_t seq, std::span<const int32_t> tokens);

    // Lets go of up to `n_blocks` cached blocks that no sequence holds,
    // least recently used leaves first. Returns how many went back to the pool.
    int32_t evict(int32_t n_blocks);
    // Lets go of every cached block (sequences keep theirs).
    void clear();

    int32_t cached_blocks() const { return static_cast<int32_t>(nodes_.size() - free_nodes_.size()); }
    // Cached blocks that evict() could return to the pool now.
    int32_t evictable_blocks() const;
    // Blocks match() has found since construction, and the lookups.
    int64_t hit_blocks() const { return hit_blocks_; }
    int64_t lookups() const { return lookups_; }
    // Blocks evict() has given back since construction.
    int64_t evicted_blocks() const { return evicted_blocks_; }

private:
    struct Node {
        bool live = false;
        int32_t parent = -1;          // node index; -1: the first block of a prefix
        int32_t children = 0;         // live nodes whose parent this is
        int32_t block = -1;           // pool block id
        uint64_t hash = 0;
        uint64_t last_used = 0;
        std::vector<int32_t> tokens;  // (block_size) the block's tokens
    };
    // The live node under `parent` holding exactly `tokens`, or -1.
    int32_t find(int32_t parent, uint64_t hash, std::span<const int32_t> tokens) const;
    void drop(int32_t node);

    PagedKvCache& kv_;
    BlockHasher hasher_;
    std::vector<Node> nodes_;                          // (nodes ever made) dead ones listed in free_nodes_
    std::vector<int32_t> free_nodes_;
    std::unordered_multimap<uint64_t, int32_t> index_; // block hash -> node
    uint64_t clock_ = 0;
    int64_t hit_blocks_ = 0, lookups_ = 0, evicted_blocks_ = 0;
};

// PagedKvCache::reserve, after letting `cache` (null: none) give back the
// least recently used blocks it alone holds when the pool is short.
bool reserve_evicting(PagedKvCache& kv, PrefixCache* cache, int32_t seq, int32_t n_positions);

}  // namespace specd
