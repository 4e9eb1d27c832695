// The draft actor: a thin shell over BatchDrafter (one batched draft-model
// step, or n-gram lookups, for every session that asked), holding each
// request's context as rebuilt from incremental draft_msgs.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "actors/runtime_shared.h"
#include "actors/step_hold.h"
#include "actors/wire.h"
#include "engine/batch_drafter.h"
#include "engine/kv_cache.h"

namespace specd {

namespace {

struct draft_state {
    ContextMirror contexts;            // each request's context, rebuilt from incremental draft_msgs
    // Remote sessions by request: a gateway that dies or is cut off leaves
    // no close behind, so the down message frees the draft sequence.
    std::unordered_map<caf::actor_addr, uint64_t> remote_owners;
    std::unique_ptr<ForwardBackend> fwd;
    std::unique_ptr<PagedKvCache> kv;
    std::unique_ptr<BatchDrafter> batch;
    std::vector<DraftJob> jobs;
    std::vector<caf::typed_response_promise<draft_result>> promises;  // (jobs)
    std::vector<DraftOutcome> outcomes;
    StepHold hold;
    static inline const char* name = "specd.draft";
    ~draft_state() {
        for (auto& rp : promises) rp.deliver(draft_result{});  // empty drafts: the sessions just verify
    }
};

draft_actor::behavior_type draft_fun(draft_actor::stateful_pointer<draft_state> self, std::shared_ptr<RuntimeShared> rt) {
    auto& st = self->state;
    ThreadPool::set_current_thread_name("specd.draft");  // detached: its own thread
    if (rt->config.compute_nice != 0) ThreadPool::set_current_thread_nice(rt->config.compute_nice);
    self->set_down_handler([self](caf::down_msg& dm) {
        auto it = self->state.remote_owners.find(dm.source);
        if (it == self->state.remote_owners.end()) return;
        self->state.batch->close(it->second);
        self->state.contexts.close(it->second);
        self->state.remote_owners.erase(it);
    });
    if (rt->draft) {
        ForwardOptions fo;
        fo.max_batch_tokens = rt->config.max_step_tokens;
        fo.max_logit_rows = std::max(1, std::min(rt->config.max_step_tokens, rt->config.max_sequences));
        fo.draft_head_tokens = rt->config.draft_vocab;
        st.fwd = rt->backends->make_draft(fo);
        st.kv = st.fwd->make_kv_cache(rt->draft_shape);
        st.batch = std::make_unique<BatchDrafter>(st.fwd.get(), st.kv.get(), 1, 4, rt->target ? rt->target->hparams().n_vocab : 0);
        if (rt->config.prefix_cache) st.batch->enable_prefix_cache();
    } else {
        st.batch = std::make_unique<BatchDrafter>(nullptr, nullptr, rt->config.ngram_min, rt->config.ngram_max);
    }
    auto try_step = [self, rt]() {
        queue_step(self, self->state.hold, !self->state.jobs.empty(), rt->rendezvous.get(), Phase::Draft);
    };
    return {
        [=](draft_msg& m) -> caf::typed_response_promise<draft_result> {
            auto& s = self->state;
            // (Before make_response_promise, which takes the sender out of the message.)
            if (const caf::strong_actor_ptr sender = self->current_sender(); sender && sender->node() != self->node()) {
                auto [it, added] = s.remote_owners.emplace(caf::actor_cast<caf::actor_addr>(sender), m.request);
                if (added) self->monitor(sender);
            }
            auto rp = self->make_response_promise<draft_result>();
            const std::vector<int32_t>* context = s.contexts.apply(m.request, m.keep, m.tail);
            if (!context) {
                draft_result r;
                r.resync = true;
                rp.deliver(std::move(r));
                return rp;
            }
            // A newer request of the same session supersedes a queued one
            // (a pipelined draft that turned out wrong): one job per request
            // and step, and the stale one gets an empty draft at once.
            for (size_t i = 0; i < s.jobs.size(); ++i) {
                if (s.jobs[i].request != m.request) continue;
                s.promises[i].deliver(draft_result{});
                s.jobs.erase(s.jobs.begin() + static_cast<std::ptrdiff_t>(i));
                s.promises.erase(s.promises.begin() + static_cast<std::ptrdiff_t>(i));
                break;
            }
            DraftJob job;
            try {
                job = draft_job_from_msg(m, *context);
            } catch (const Error&) {
                rp.deliver(draft_result{});  // an empty draft: the session just verifies its pending token
                return rp;
            }
            s.jobs.push_back(std::move(job));
            s.promises.push_back(rp);
            if (rt->rendezvous && rt->rendezvous->arrived(Phase::Draft, m.request)) {
                caf::anon_send(rt->current_verifier(), step_atom::value);  // it may have held for this request
            }
            try_step();
            return rp;
        },
        [=](close_atom, uint64_t request) -> bool {
            auto& s = self->state;
            s.batch->close(request);
            s.contexts.close(request);
            for (auto it = s.remote_owners.begin(); it != s.remote_owners.end(); ++it) {
                if (it->second != request) continue;
                self->demonitor(it->first);
                s.remote_owners.erase(it);
                break;
            }
            if (rt->rendezvous) rt->rendezvous->closed(request);
            try_step();
            return true;
        },
        // A queued step, a hold's timer, or a nudge from the verifier.
        [=](step_atom) {
            auto& s = self->state;
            if (!s.hold.step_queued) return try_step();
            s.hold.step_queued = false;
            s.outcomes.clear();
            s.batch->draft(s.jobs, s.outcomes);
            for (size_t i = 0; i < s.outcomes.size(); ++i) {
                s.promises[i].deliver(draft_result_from_outcome(s.outcomes[i]));
            }
            s.jobs.clear();
            s.promises.clear();
        },
    };
}

}  // namespace

draft_actor spawn_draft(const std::shared_ptr<RuntimeShared>& rt) { return rt->system->spawn<caf::detached>(draft_fun, rt); }

}  // namespace specd
