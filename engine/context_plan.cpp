#include "engine/context_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/kv_cache.h"

namespace specd {

std::string format_bytes(int64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
    return buf;
}

ContextPlan plan_context(const ContextInputs& in) {
    if (in.n_ctx_train <= 0) throw Error("context: the model's trained context must be positive, got " + std::to_string(in.n_ctx_train));
    if (in.max_sequences < 1) throw Error("context: max_sequences must be >= 1, got " + std::to_string(in.max_sequences));
    ContextPlan plan;
    const std::string train = std::to_string(in.n_ctx_train);
    if (in.requested > 0) {
        plan.n_ctx = std::min(in.requested, in.n_ctx_train);
        plan.reason = in.requested <= in.n_ctx_train ? "ctx_size " + std::to_string(in.requested) + " as set (trained " + train + ")"
                                                     : "ctx_size " + std::to_string(in.requested) + " capped to the trained " + train;
        return plan;
    }
    if (in.kv_bytes_per_token <= 0) throw Error("context: KV bytes per token must be positive");
    const int64_t kv_bytes = static_cast<int64_t>(in.kv_cache_ratio * static_cast<double>(in.budget_bytes));
    const int32_t block = std::max(1, in.block_size);
    // Positions each sequence can have when all of them are full, whole blocks.
    int64_t per_seq = kv_bytes / (static_cast<int64_t>(in.max_sequences) * in.kv_bytes_per_token);
    per_seq -= per_seq % block;
    char ratio[16];
    std::snprintf(ratio, sizeof ratio, "%.2f", in.kv_cache_ratio);
    const std::string holds = "KV_CACHE_RATIO " + std::string(ratio) + " of " + format_bytes(in.budget_bytes) + " holds " +
                              std::to_string(per_seq) + " tokens for each of " + std::to_string(in.max_sequences) + " sequences (" +
                              format_bytes(in.kv_bytes_per_token) + " per token, " + in.kv_type + ")";
    const int32_t minimum = std::min(in.n_ctx_train, kMinDefaultContext);
    if (per_seq >= in.n_ctx_train) {
        plan.n_ctx = in.n_ctx_train;
        plan.reason = "the trained " + train + " (" + holds + ")";
    } else if (per_seq >= minimum) {
        plan.n_ctx = static_cast<int32_t>(per_seq);
        plan.reason = "trained " + train + ", capped to " + std::to_string(per_seq) + ": " + holds;
    } else {
        plan.n_ctx = minimum;
        plan.reason = "trained " + train + ", capped to the minimum " + std::to_string(minimum) + ": " + holds +
                      "; fewer sequences decode at once";
    }
    return plan;
}

int64_t kv_bytes_per_token(const LlamaModel& model, TensorType type) {
    KvCacheShape s = ForwardBackend::kv_shape_for(model, 1, 1, 1);
    s.type = type;
    return static_cast<int64_t>(PagedKvCache::block_bytes(s));
}

int64_t available_memory_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t kb = 0;
    while (in >> key >> kb >> unit) {
        if (key == "MemAvailable:") return kb * 1024;
    }
    return int64_t{8} << 30;
}

}  // namespace specd
