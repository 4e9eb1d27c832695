// How a process builds the runtime's shared state (models, thread pools,
// backends, KV pool shapes) and stops its long-lived actors.
#include "actors/runtime_shared.h"

#include <algorithm>
#include <chrono>

#include <caf/io/all.hpp>

#include "actors/capacity_plan.h"
#include "config/log.h"
#include "engine/context_plan.h"
#include "engine/model_integrity.h"
#include "engine/tensor_type.h"

namespace specd {

void stop_actors(RuntimeShared& rt, caf::scoped_actor& self) {
    std::vector<caf::actor> all;
    if (auto v = rt.current_verifier()) all.push_back(caf::actor_cast<caf::actor>(v));
    if (auto d = rt.current_drafter()) all.push_back(caf::actor_cast<caf::actor>(d));
    if (rt.kv) all.push_back(caf::actor_cast<caf::actor>(rt.kv));
    if (rt.cluster) {
        if (rt.cluster_port != 0) (void)rt.system->middleman().unpublish(rt.cluster, rt.cluster_port);
        all.push_back(caf::actor_cast<caf::actor>(rt.cluster));
    }
    for (auto& a : all) {
        self->monitor(a);
        self->send_exit(a, caf::exit_reason::user_shutdown);
    }
    size_t left = all.size();
    bool timed_out = false;
    while (left > 0 && !timed_out)
        self->receive([&](caf::down_msg&) { --left; }, caf::after(std::chrono::seconds(10)) >> [&] { timed_out = true; });
}

std::shared_ptr<RuntimeShared> build_shared(caf::actor_system& system, const RuntimeConfig& config, Build build) {
    config.validate();
    auto rt = std::make_shared<RuntimeShared>();
    rt->config = config;
    rt->system = &system;
    rt->speculation.store(std::make_shared<const SpeculationSettings>(
        SpeculationSettings{config.enable_speculative, config.draft_max, config.adaptive}));
    // Structure (a truncated download fails here) and, when known, the hash.
    verify_model_file(config.target_model, config.target_sha256);
    if (build == Build::draft_node) {
        rt->draft = LlamaModel::load(config.target_model);  // a draft node serves its -m as the draft
    } else {
        rt->target = LlamaModel::load(config.target_model);
    }
    if (build == Build::local && !config.draft_model.empty()) {
        try {
            verify_model_file(config.draft_model, config.draft_sha256);
            rt->draft = LlamaModel::load(config.draft_model);
            check_vocab_compatible(*rt->target, *rt->draft);
        } catch (const Error& e) {
            if (config.require_draft) throw Error(std::string("draft model (require_draft is set): ") + e.what());
            // Serve anyway, without speculation: the guide's rollback state.
            rt->draft.reset();
            rt->draft_load_error = e.what();
            SpeculationSettings off = *rt->speculation.load();
            off.enabled = false;
            rt->speculation.store(std::make_shared<const SpeculationSettings>(off));
        }
    }
    const LlamaModel& primary = rt->target ? *rt->target : *rt->draft;
    const int32_t n_ctx_train = primary.hparams().n_ctx_train;
    rt->n_ctx = config.n_ctx > 0 ? std::min(config.n_ctx, n_ctx_train) : n_ctx_train;
    if (build == Build::gateway) return rt;  // no compute here

    const CapacityPlan plan(config, rt->target != nullptr, rt->draft != nullptr, ThreadPool::hardware_threads());
    auto cpus_from = [&](int first, int n) { return ThreadPool::affinity_cpus(plan.affinity(), plan.compute_threads(), first, n); };
    if (rt->target)
        rt->target_pool = std::make_unique<ThreadPool>(plan.target_threads(), config.compute_nice,
                                                       cpus_from(plan.target_first_cpu(), plan.target_threads()));
    ThreadPool* draft_pool = nullptr;
    if (rt->draft) {
        if (plan.share_pool()) {
            draft_pool = rt->target_pool.get();
            rt->shared_pool = true;
        } else {
            rt->draft_pool = std::make_unique<ThreadPool>(plan.draft_threads(), config.compute_nice,
                                                          cpus_from(plan.draft_first_cpu(), plan.draft_threads()));
            draft_pool = rt->draft_pool.get();
        }
    }
    rt->backends = BackendFactory::create(config, rt->target.get(), rt->draft.get(), rt->target_pool.get(), draft_pool);

    // The config validated the name (f16 or f32); a GPU keeps its own 16-bit pools.
    const TensorType kv_type = tensor_type_from_name(config.kv_cache_type).value_or(TensorType::F16);
    const int64_t budget = config.memory_budget_bytes > 0 ? config.memory_budget_bytes
                                                          : rt->backends->kv_memory_bytes(CapacityPlan::available_ram_bytes());
    {
        // ctx_size 0: the trained length capped by what the budget holds (engine/context_plan.h).
        int64_t token_bytes = 0;  // target + draft KV bytes per position, as the backend stores them
        for (const LlamaModel* m : {rt->target.get(), rt->draft.get()}) {
            if (!m) continue;
            KvCacheShape one = ForwardBackend::kv_shape_for(*m, 1, 1, 1);
            one.type = kv_type;
            token_bytes += static_cast<int64_t>(rt->backends->kv_block_bytes(one));
        }
        const ContextPlan context = plan_context({.requested = config.n_ctx, .n_ctx_train = n_ctx_train, .kv_cache_ratio = config.kv_cache_ratio,
                                                  .budget_bytes = budget, .kv_bytes_per_token = token_bytes, .max_sequences = config.max_sequences,
                                                  .block_size = 16, .kv_type = config.kv_cache_type});
        rt->n_ctx = context.n_ctx;
        log::info("context", {{"n_ctx", context.n_ctx}, {"why", context.reason}});
    }
    KvPoolInputs kv;
    kv.ratio = config.kv_cache_ratio;
    kv.n_ctx = rt->n_ctx;
    if (rt->target) {
        rt->target_shape = ForwardBackend::kv_shape_for(*rt->target, rt->n_ctx, config.max_sequences);
        rt->target_shape.type = kv_type;
        kv.block_bytes += rt->backends->kv_block_bytes(rt->target_shape);
        kv.shape_blocks = rt->target_shape.n_blocks;
        kv.block_size = rt->target_shape.block_size;
    }
    if (rt->draft) {
        rt->draft_shape = ForwardBackend::kv_shape_for(*rt->draft, rt->n_ctx, config.max_sequences);
        rt->draft_shape.type = kv_type;
        kv.block_bytes += rt->backends->kv_block_bytes(rt->draft_shape);
        if (!rt->target) {
            kv.shape_blocks = rt->draft_shape.n_blocks;
            kv.block_size = rt->draft_shape.block_size;
        }
    }
    kv.budget_bytes = budget;
    const int32_t n_blocks = CapacityPlan::kv_blocks(kv);
    if (rt->target) rt->target_shape.n_blocks = n_blocks;
    if (rt->draft) rt->draft_shape.n_blocks = n_blocks;
    return rt;
}

}  // namespace specd
