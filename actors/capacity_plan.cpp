#include "actors/capacity_plan.h"

#include <algorithm>
#include <fstream>

#include "engine/error.h"

namespace specd {

CapacityPlan::CapacityPlan(const RuntimeConfig& config, bool has_target, bool has_draft, int hardware_threads) {
    target_threads_ = config.threads_target > 0 ? config.threads_target : hardware_threads;
    // The draft gets its own pool, so its phase of some sessions overlaps
    // the verify phase of others; by default as wide as the target's (when
    // the phases don't overlap, each gets every core). Unless the two would
    // need more threads than the machine has: then they share the target's
    // pool and take turns. Two busy pools of spinning threads on too few
    // cores stall each other's barriers (stories15M, 2 cores: 2 sessions
    // with speculation ran at 0.64x of plain with two pools).
    draft_threads_ = config.threads_draft > 0 ? config.threads_draft : target_threads_;
    share_pool_ = has_draft && has_target && config.threads_draft == 0 && target_threads_ + draft_threads_ > hardware_threads;
    // Pinning: the target pool takes the first allowed CPUs, a draft pool of
    // its own the next ones. Unpinned, a verifier or draft thread woken by a
    // session often landed on the core where a pool worker still spun, and
    // the two shared it until the scheduler moved one (stories15M, 2 cores,
    // one session: drafting took 1.06 ms a token against 0.86 ms).
    // The verifier and draft threads of a shared pool both pin to its first
    // core, which is right while they take turns; pipelined drafts can run
    // them at once, so a shared pool then stays unpinned.
    compute_threads_ = (has_target ? target_threads_ : 0) + (has_draft && !share_pool_ ? draft_threads_ : 0);
    affinity_ = share_pool_ && config.pipeline_drafts == "on" ? "off" : config.cpu_affinity;
    draft_first_cpu_ = has_target ? target_threads_ : 0;
}

int32_t CapacityPlan::kv_blocks(const KvPoolInputs& in) {
    // KV pools: KV_CACHE_RATIO of the budget, split between target and
    // draft by their bytes per block (both get the same block count), and
    // no more than max_sequences full contexts.
    const int64_t kv_bytes = static_cast<int64_t>(in.ratio * static_cast<double>(in.budget_bytes));
    const int64_t affordable = kv_bytes / static_cast<int64_t>(in.block_bytes);
    const int32_t per_seq = (in.n_ctx + in.block_size - 1) / in.block_size;
    if (affordable < per_seq)
        throw Error("KV cache budget too small: " + std::to_string(kv_bytes) + " bytes (KV_CACHE_RATIO " + std::to_string(in.ratio) +
                    " of " + std::to_string(in.budget_bytes) + ") hold " + std::to_string(affordable) + " blocks; one context needs " +
                    std::to_string(per_seq));
    return static_cast<int32_t>(std::min<int64_t>(affordable, in.shape_blocks));
}

int CapacityPlan::io_threads(int configured, int hardware_threads) {
    return configured > 0 ? configured : std::clamp(hardware_threads / 8, 1, 4);
}

int64_t CapacityPlan::available_ram_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit) {
        if (key == "MemAvailable:") return kb * 1024;
    }
    return int64_t{8} << 30;
}

}  // namespace specd
