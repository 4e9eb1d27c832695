#include "engine/prefix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace specd {

uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
    // splitmix64's finaliser over the parent's hash and each token: cheap,
    // and every input bit reaches every output bit.
    auto mix = [](uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
    };
    uint64_t h = mix(parent_hash ^ 0x5bd1e9955bd1e995ull);
    for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
    return h;
}

PrefixCache::PrefixCache(PagedKvCache& kv, BlockHasher hasher) : kv_(kv), hasher_(hasher) {}

PrefixCache::~PrefixCache() { clear(); }

int32_t PrefixCache::find(int32_t parent, uint64_t hash, std::span<const int32_t> tokens) const {
    const auto [first, last] = index_.equal_range(hash);
    for (auto it = first; it != last; ++it) {
        const Node& n = nodes_[static_cast<size_t>(it->second)];
        if (n.parent == parent && std::equal(tokens.begin(), tokens.end(), n.tokens.begin(), n.tokens.end())) return it->second;
    }
    return -1;
}

std::vector<int32_t> PrefixCache::match(std::span<const int32_t> tokens) {
    ++lookups_;
    const size_t bs = static_cast<size_t>(kv_.shape().block_size);
    const size_t usable = tokens.empty() ? 0 : (tokens.size() - 1) / bs;  // never the block of the last token
    std::vector<int32_t> blocks;
    const uint64_t now = ++clock_;
    int32_t parent = -1;
    uint64_t hash = 0;
    for (size_t b = 0; b < usable; ++b) {
        const std::span<const int32_t> part = tokens.subspan(b * bs, bs);
        hash = hasher_(hash, part);
        const int32_t node = find(parent, hash, part);
        if (node < 0) break;
        nodes_[static_cast<size_t>(node)].last_used = now;
        blocks.push_back(nodes_[static_cast<size_t>(node)].block);
        parent = node;
    }
    hit_blocks_ += static_cast<int64_t>(blocks.size());
    return blocks;
}

int32_t PrefixCache::insert(int32_t seq, std::span<const int32_t> tokens) {
    const size_t bs = static_cast<size_t>(kv_.shape().block_size);
    const size_t written = std::min(tokens.size(), static_cast<size_t>(kv_.length(seq)));
    const std::span<const int32_t> table = kv_.block_table(seq);
    const uint64_t now = ++clock_;
    int32_t parent = -1, added = 0;
    uint64_t hash = 0;
    for (size_t b = 0; b < written / bs && b < table.size(); ++b) {
        const std::span<const int32_t> part = tokens.subspan(b * bs, bs);
        hash = hasher_(hash, part);
        int32_t node = find(parent, hash, part);
        if (node < 0) {
            if (free_nodes_.empty()) {
                node = static_cast<int32_t>(nodes_.size());
                nodes_.emplace_back();
            } else {
                node = free_nodes_.back();
                free_nodes_.pop_back();
            }
            Node& n = nodes_[static_cast<size_t>(node)];
            n.live = true;
            n.parent = parent;
            n.children = 0;
            n.block = table[b];
            n.hash = hash;
            n.tokens.assign(part.begin(), part.end());
            kv_.retain_block(n.block);
            index_.emplace(hash, node);
            if (parent >= 0) ++nodes_[static_cast<size_t>(parent)].children;
            ++added;
        }
        nodes_[static_cast<size_t>(node)].last_used = now;
        parent = node;
    }
    return added;
}

void PrefixCache::drop(int32_t node) {
    Node& n = nodes_[static_cast<size_t>(node)];
    const auto [first, last] = index_.equal_range(n.hash);
    for (auto it = first; it != last; ++it) {
        if (it->second == node) {
            index_.erase(it);
            break;
        }
    }
    if (n.parent >= 0) --nodes_[static_cast<size_t>(n.parent)].children;
    kv_.release_block(n.block);
    n.live = false;
    n.tokens.clear();
    free_nodes_.push_back(node);
}

int32_t PrefixCache::evictable_blocks() const {
    // A node can go once no sequence holds its block or a block below it:
    // mark every ancestor of a held node as pinned, count the rest.
    std::vector<char> pinned(nodes_.size(), 0);
    for (size_t i = 0; i < nodes_.size(); ++i) {
        if (!nodes_[i].live || kv_.block_refs(nodes_[i].block) == 1) continue;
        for (int32_t n = static_cast<int32_t>(i); n >= 0 && !pinned[static_cast<size_t>(n)]; n = nodes_[static_cast<size_t>(n)].parent)
            pinned[static_cast<size_t>(n)] = 1;
    }
    int32_t count = 0;
    for (size_t i = 0; i < nodes_.size(); ++i) count += nodes_[i].live && !pinned[i];
    return count;
}

int32_t PrefixCache::evict(int32_t n_blocks) {
    // Leaves only the cache holds, oldest first (a min-heap on last use);
    // dropping one may make its parent such a leaf, which joins the heap.
    using Entry = std::pair<uint64_t, int32_t>;  // (last_used, node)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
    auto evictable_leaf = [&](int32_t i) {
        const Node& n = nodes_[static_cast<size_t>(i)];
        return n.live && n.children == 0 && kv_.block_refs(n.block) == 1;
    };
    for (size_t i = 0; i < nodes_.size(); ++i) {
        if (evictable_leaf(static_cast<int32_t>(i))) leaves.emplace(nodes_[i].last_used, static_cast<int32_t>(i));
    }
    int32_t evicted = 0;
    while (evicted < n_blocks && !leaves.empty()) {
        const int32_t node = leaves.top().second;
        leaves.pop();
        const int32_t parent = nodes_[static_cast<size_t>(node)].parent;
        drop(node);
        ++evicted;
        ++evicted_blocks_;
        if (parent >= 0 && evictable_leaf(parent)) leaves.emplace(nodes_[static_cast<size_t>(parent)].last_used, parent);
    }
    return evicted;
}

void PrefixCache::clear() {
    for (size_t i = nodes_.size(); i-- > 0;) {
        if (nodes_[i].live) kv_.release_block(nodes_[i].block);
    }
    nodes_.clear();
    free_nodes_.clear();
    index_.clear();
}

bool reserve_evicting(PagedKvCache& kv, PrefixCache* cache, int32_t seq, int32_t n_positions) {
    if (kv.reserve(seq, n_positions)) return true;
    if (!cache) return false;
    const int32_t missing = kv.blocks_for(n_positions) - static_cast<int32_t>(kv.block_table(seq).size()) - kv.free_blocks();
    return cache->evict(missing) > 0 && kv.reserve(seq, n_positions);
}

}  // namespace specd
