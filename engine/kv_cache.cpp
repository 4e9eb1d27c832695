#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/kernels.h"

namespace specd {

size_t PagedKvCache::block_bytes(const KvCacheShape& s) {
    return 2 * static_cast<size_t>(s.n_layers) * s.block_size * s.kv_dim * tensor_type_block_bytes(s.type);
}

size_t PagedKvCache::pool_bytes(const KvCacheShape& s) { return static_cast<size_t>(s.n_blocks) * block_bytes(s); }

PagedKvCache::PagedKvCache(const KvCacheShape& shape, KvStorage storage) : shape_(shape), storage_(storage) {
    if (shape.n_layers <= 0 || shape.kv_dim <= 0 || shape.block_size <= 0 || shape.n_blocks <= 0 ||
        shape.max_seq_len <= 0 || shape.max_sequences <= 0) {
        throw Error("KV cache: every dimension must be positive (layers " + std::to_string(shape.n_layers) +
                    ", kv_dim " + std::to_string(shape.kv_dim) + ", block_size " + std::to_string(shape.block_size) +
                    ", blocks " + std::to_string(shape.n_blocks) + ")");
    }
    if (shape.type != TensorType::F32 && shape.type != TensorType::F16) {
        throw Error(std::string("KV cache: keys and values are stored as f32 or f16, not ") + tensor_type_name(shape.type));
    }
    if (storage == KvStorage::Host) {
        k_pool_.assign(pool_bytes(shape) / 2, 0);
        v_pool_.assign(pool_bytes(shape) / 2, 0);
    }
    refs_.assign(static_cast<size_t>(shape.n_blocks), 0);
    free_list_.reserve(static_cast<size_t>(shape.n_blocks));
    for (int32_t b = shape.n_blocks - 1; b >= 0; --b) free_list_.push_back(b);
    seqs_.resize(static_cast<size_t>(shape.max_sequences));
    for (Sequence& s : seqs_) s.blocks.reserve(static_cast<size_t>(blocks_for(shape.max_seq_len)));
    for (int32_t i = shape.max_sequences - 1; i >= 0; --i) free_slots_.push_back(i);
}

PagedKvCache::Sequence& PagedKvCache::checked(int32_t seq) {
    if (seq < 0 || seq >= shape_.max_sequences || !seqs_[static_cast<size_t>(seq)].active) {
        throw Error("KV cache: unknown sequence " + std::to_string(seq));
    }
    return seqs_[static_cast<size_t>(seq)];
}

bool PagedKvCache::is_active(int32_t seq) const {
    return seq >= 0 && seq < shape_.max_sequences && seqs_[static_cast<size_t>(seq)].active;
}

int32_t PagedKvCache::create_sequence() {
    if (free_slots_.empty()) {
        throw Error("KV cache: all " + std::to_string(shape_.max_sequences) + " sequence slots are in use");
    }
    const int32_t id = free_slots_.back();
    free_slots_.pop_back();
    Sequence& s = seqs_[static_cast<size_t>(id)];
    s.active = true;
    s.length = 0;
    s.blocks.clear();
    ++active_count_;
    return id;
}

void PagedKvCache::free_sequence(int32_t seq) {
    Sequence& s = checked(seq);
    for (int32_t b : s.blocks) release_block(b);
    s.blocks.clear();
    s.length = 0;
    s.active = false;
    free_slots_.push_back(seq);
    --active_count_;
}

bool PagedKvCache::reserve(int32_t seq, int32_t n_positions) {
    Sequence& s = checked(seq);
    if (n_positions > shape_.max_seq_len) {
        throw Error("KV cache: " + std::to_string(n_positions) + " positions exceed the context size " +
                    std::to_string(shape_.max_seq_len));
    }
    const int32_t need = blocks_for(n_positions) - static_cast<int32_t>(s.blocks.size());
    if (need <= 0) return true;
    if (need > free_blocks()) return false;
    for (int32_t i = 0; i < need; ++i) s.blocks.push_back(take_free_block());
    return true;
}

int32_t PagedKvCache::take_free_block() {
    const int32_t b = free_list_.back();
    free_list_.pop_back();
    refs_[static_cast<size_t>(b)] = 1;
    return b;
}

void PagedKvCache::checked_block(int32_t block) const {
    if (block < 0 || block >= shape_.n_blocks || refs_[static_cast<size_t>(block)] == 0) {
        throw Error("KV cache: block " + std::to_string(block) + " is not in use");
    }
}

void PagedKvCache::adopt_blocks(int32_t seq, std::span<const int32_t> blocks) {
    Sequence& s = checked(seq);
    if (!s.blocks.empty() || s.length != 0) {
        throw Error("KV cache: sequence " + std::to_string(seq) + " must be empty to adopt shared blocks");
    }
    if (static_cast<int64_t>(blocks.size()) * shape_.block_size > shape_.max_seq_len) {
        throw Error("KV cache: " + std::to_string(blocks.size()) + " shared blocks exceed the context size " +
                    std::to_string(shape_.max_seq_len));
    }
    for (int32_t b : blocks) checked_block(b);
    for (int32_t b : blocks) {
        ++refs_[static_cast<size_t>(b)];
        s.blocks.push_back(b);
    }
    s.length = static_cast<int32_t>(blocks.size()) * shape_.block_size;
}

void PagedKvCache::retain_block(int32_t block) {
    checked_block(block);
    ++refs_[static_cast<size_t>(block)];
}

void PagedKvCache::release_block(int32_t block) {
    checked_block(block);
    if (--refs_[static_cast<size_t>(block)] == 0) free_list_.push_back(block);
}

int32_t PagedKvCache::block_refs(int32_t block) const {
    if (block < 0 || block >= shape_.n_blocks) throw Error("KV cache: no block " + std::to_string(block));
    return refs_[static_cast<size_t>(block)];
}

void PagedKvCache::set_length(int32_t seq, int32_t n) {
    Sequence& s = checked(seq);
    if (n < 0 || n > static_cast<int32_t>(s.blocks.size()) * shape_.block_size) {
        throw Error("KV cache: length " + std::to_string(n) + " is beyond the reserved blocks of sequence " +
                    std::to_string(seq));
    }
    s.length = n;
}

void PagedKvCache::truncate(int32_t seq, int32_t n) {
    Sequence& s = checked(seq);
    if (n < 0) n = 0;
    const int32_t length = std::min(n, s.length);
    const size_t keep = static_cast<size_t>(blocks_for(length));
    if (length % shape_.block_size != 0 && refs_[static_cast<size_t>(s.blocks[keep - 1])] > 1) {
        throw Error("KV cache: sequence " + std::to_string(seq) + " cannot be cut to " + std::to_string(length) +
                    " positions: the block holding it is shared (read-only)");
    }
    s.length = length;
    while (s.blocks.size() > keep) {
        release_block(s.blocks.back());
        s.blocks.pop_back();
    }
}

void PagedKvCache::read(const std::vector<unsigned char>& pool, int32_t seq, int32_t layer, int32_t pos, float* out) const {
    const unsigned char* p = slot(pool, seq, layer, pos);
    if (shape_.type == TensorType::F32) {
        std::memcpy(out, p, static_cast<size_t>(shape_.kv_dim) * sizeof(float));
        return;
    }
    for (int32_t i = 0; i < shape_.kv_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
    }
}

void PagedKvCache::read_key(int32_t seq, int32_t layer, int32_t pos, float* out) const { read(k_pool_, seq, layer, pos, out); }
void PagedKvCache::read_value(int32_t seq, int32_t layer, int32_t pos, float* out) const { read(v_pool_, seq, layer, pos, out); }

void PagedKvCache::write(int32_t seq, int32_t layer, int32_t pos, const float* key, const float* value) {
    // The forward pass's own store, scalar: the same bits on every ISA.
    store_kv_row(Isa::Scalar, shape_.type, key, slot(k_pool_, seq, layer, pos), shape_.kv_dim);
    store_kv_row(Isa::Scalar, shape_.type, value, slot(v_pool_, seq, layer, pos), shape_.kv_dim);
}

}  // namespace specd
