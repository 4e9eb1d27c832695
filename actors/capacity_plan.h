// How a process divides the machine among its compute actors: how wide the
// target's and the draft's thread pools are, whether the draft shares the
// target's pool, where each pool's pinned CPUs start, and how many blocks
// the KV pools get. Plain arithmetic over the config and what the machine
// and the backend report (no models, no threads, no actors), so a test
// covers every branch; build_shared (actors/runtime_shared.cpp) applies it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/runtime_config.h"
// ThreadPool: hardware_threads(), what every plan starts from, and
// set_current_thread_name(), the names that tell the process's threads
// apart (compute, actors, and a front end's network threads).
#include "engine/thread_pool.h"

namespace specd {

// What the KV pools are sized from.
struct KvPoolInputs {
    int64_t budget_bytes = 0;   // memory the pools are a share of: config.memory_budget_bytes, else the backend's (free RAM or GPU memory)
    double ratio = 0.85;        // KV_CACHE_RATIO: the share of the budget the pools may take
    size_t block_bytes = 0;     // one target block plus one draft block (both pools get the same count); > 0
    int32_t shape_blocks = 0;   // blocks of max_sequences full contexts (ForwardBackend::kv_shape_for): the most worth having
    int32_t block_size = 1;     // positions per block
    int32_t n_ctx = 0;          // the context one sequence may fill
};

class CapacityPlan {
public:
    // has_target / has_draft: the models this process computes with (a
    // draft node has only a draft); hardware_threads: what
    // ThreadPool::hardware_threads() reports.
    CapacityPlan(const RuntimeConfig& config, bool has_target, bool has_draft, int hardware_threads);

    // The target pool's width: config.threads_target, 0: every hardware thread.
    int target_threads() const { return target_threads_; }
    // The draft's own pool's width: config.threads_draft, 0: as wide as the
    // target's. Unused when share_pool().
    int draft_threads() const { return draft_threads_; }
    // The draft runs on the target's pool (the phases take turns): both
    // models here, threads_draft unset, and two pools would need more
    // threads than the machine has.
    bool share_pool() const { return share_pool_; }

    // Pinning, as ThreadPool::affinity_cpus(affinity(), compute_threads(),
    // first, width) takes it: the policy ("off" for a shared pool with
    // pipeline_drafts "on"), the compute threads of all pools, and where
    // each pool's CPUs start (the target's first, a draft pool of its own next).
    const std::string& affinity() const { return affinity_; }
    int compute_threads() const { return compute_threads_; }
    int target_first_cpu() const { return 0; }
    int draft_first_cpu() const { return draft_first_cpu_; }

    // Blocks per KV pool: `ratio` of the budget in blocks, at most
    // shape_blocks. specd::Error naming the figures when that is less than
    // one full context.
    static int32_t kv_blocks(const KvPoolInputs& in);

    // Network threads for a front end beside the compute pools (net/'s
    // Server): `configured`, or with 0 one per 8 hardware threads, 1 to 4
    // (one keeps up with many sessions' streams; the rest compute).
    static int io_threads(int configured, int hardware_threads);

    // MemAvailable from /proc/meminfo (8 GiB where it can't be read).
    static int64_t available_ram_bytes();

private:
    int target_threads_ = 0;
    int draft_threads_ = 0;
    bool share_pool_ = false;
    std::string affinity_;
    int compute_threads_ = 0;
    int draft_first_cpu_ = 0;
};

}  // namespace specd
