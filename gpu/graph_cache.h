// Which forward calls of the CUDA backend replay a CUDA graph, and the cache
// of instantiated graphs. Plain C++ (no CUDA types), so the policy is tested
// on machines without a device; CudaForward instantiates it with its RAII
// graph owner.
//
// Why graphs: a decode or verification step of a small batch launches about
// 9 kernels and GEMMs per layer, each costing the host a few microseconds;
// for a small model that launch time exceeds the device time. A graph
// replays the whole step with one launch. A graph fixes every kernel
// argument and grid, so a step may replay one only when its shape matches:
// the rows, logit rows and items of the batch (the packed layout's offsets
// and the GEMM sizes) and the attention's shared-memory size, which follows
// the longest context in the batch and is rounded up to a bucket so that a
// growing sequence keeps its graph for `position_step` tokens. Everything
// else a step varies (tokens, positions, block tables) lives in device
// buffers the graph reads, uploaded before each launch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "gpu/batch_layout.h"

namespace specd::gpu {

struct GraphKey {
    int32_t n_rows = 0;     // tokens in the batch
    int32_t n_out = 0;      // logit rows
    int32_t n_items = 0;    // sequences
    int32_t positions = 0;  // the attention's position capacity: max_positions rounded up to the bucket
    friend bool operator==(const GraphKey&, const GraphKey&) = default;
};

struct GraphPolicy {
    // Batches of at most this many tokens replay graphs (decode and
    // verification steps); prefill chunks are long enough that launches
    // hide behind the device work.
    int32_t max_rows = 64;
    // The position bucket: one graph serves a sequence for this many tokens.
    int32_t position_step = 256;
    // Instantiated graphs kept per backend (least recently used goes first).
    size_t capacity = 32;
};

// The key of a planned batch, or nothing when it should run without a graph.
// `max_seq_len` caps the position bucket (no row attends past it). Steps
// whose bucket exceeds `max_graph_positions` get no graph: the backend sets
// it so that the attention's shared memory stays within the default limit,
// since raising a kernel's limit is process-wide state a graph would depend on.
inline std::optional<GraphKey> graph_key(const BatchLayout& layout, int32_t max_seq_len, const GraphPolicy& policy,
                                         int32_t max_graph_positions) {
    if (layout.n_rows <= 0 || layout.n_rows > policy.max_rows || policy.position_step <= 0) return std::nullopt;
    const int32_t step = policy.position_step;
    const int32_t rounded = (layout.max_positions + step - 1) / step * step;
    const int32_t positions = std::max(layout.max_positions, std::min(rounded, max_seq_len));
    if (positions > max_graph_positions) return std::nullopt;
    return GraphKey{layout.n_rows, layout.n_out, layout.n_items, positions};
}

// Counters of what the backend did with eligible and other steps.
struct GraphStats {
    int64_t replays = 0;     // steps run by launching a cached graph
    int64_t captures = 0;    // graphs captured and instantiated (each also ran its step)
    int64_t warmups = 0;     // eligible steps run eagerly: the first sighting of their key
    int64_t eager = 0;       // steps not eligible (too many rows) or run with graphs off
    int64_t evictions = 0;   // graphs dropped for capacity
};

// `Exec` is a movable owner of an instantiated graph.
template <class Exec>
class GraphCache {
public:
    enum class Action {
        Warmup,   // first sighting: run eagerly (lazy module loading and cuBLAS set-up happen outside a capture)
        Capture,  // seen before without a graph: capture, instantiate, launch, insert()
        Replay,   // find() has it
    };

    explicit GraphCache(size_t capacity = GraphPolicy{}.capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

    // What to do for this step's key; Replay refreshes the entry's use.
    Action plan(const GraphKey& key) {
        ++clock_;
        if (Entry* e = entry(key)) {
            e->last_use = clock_;
            return Action::Replay;
        }
        const auto seen = std::find(seen_.begin(), seen_.end(), key);
        if (seen != seen_.end()) {
            seen_.erase(seen);
            return Action::Capture;
        }
        // Remember a bounded number of first sightings (the oldest forgotten first).
        if (seen_.size() >= 4 * capacity_) seen_.erase(seen_.begin());
        seen_.push_back(key);
        return Action::Warmup;
    }

    Exec* find(const GraphKey& key) {
        Entry* e = entry(key);
        return e ? &e->exec : nullptr;
    }

    // Adds a graph; returns true when the least recently used one was dropped for room.
    bool insert(const GraphKey& key, Exec exec) {
        bool evicted = false;
        if (entries_.size() >= capacity_) {
            const auto lru = std::min_element(entries_.begin(), entries_.end(),
                                              [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
            entries_.erase(lru);
            evicted = true;
        }
        entries_.push_back(Entry{key, std::move(exec), ++clock_});
        return evicted;
    }

    // Drops every graph and sighting (the buffers they point into changed).
    void clear() {
        entries_.clear();
        seen_.clear();
    }

    size_t size() const { return entries_.size(); }

private:
    struct Entry {
        GraphKey key;
        Exec exec;
        uint64_t last_use = 0;
    };
    Entry* entry(const GraphKey& key) {
        for (Entry& e : entries_) {
            if (e.key == key) return &e;
        }
        return nullptr;
    }

    size_t capacity_;
    uint64_t clock_ = 0;
    std::vector<Entry> entries_;
    std::vector<GraphKey> seen_;
};

}  // namespace specd::gpu
