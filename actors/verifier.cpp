// The verifier actor: a thin shell over BatchVerifier (one batched target
// forward per step for every session's pending job), the run-ahead of plain
// requests' steps, and its restart after a failure.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "actors/runtime_shared.h"
#include "actors/step_hold.h"
#include "actors/wire.h"
#include "engine/batch_verifier.h"
#include "engine/kv_cache.h"
#include "engine/run_ahead.h"

namespace specd {

namespace {

struct verifier_state {
    std::unique_ptr<ForwardBackend> fwd;
    std::unique_ptr<PagedKvCache> kv;
    std::unique_ptr<BatchVerifier> batch;
    struct Waiting {
        uint64_t request = 0;
        caf::typed_response_promise<verify_result> rp;
    };
    std::unordered_map<uint64_t, Waiting> promises;  // by job tag: the replies owed for jobs from sessions
    RunAheadChains<session_actor> run_ahead;  // plain steps chained for sessions (verify_msg::run_ahead)
    uint64_t next_tag = 1;
    StepHold hold;
    std::vector<VerifyOutcome> outcomes;
    std::vector<VerifyJob> chained;  // the next steps run_ahead chained after a step
    std::vector<uint8_t> continued;  // (outcomes) 1 where the verifier queued the request's next step itself
    std::vector<session_actor> send_to;  // (outcomes) the session of a run-ahead job (null: none)
    std::vector<uint64_t> answered;  // (outcomes not continued) their requests
    static inline const char* name = "specd.verifier";
    // A verifier that dies (killed, or an exception in a step) still
    // answers everyone waiting on it, so no session hangs.
    ~verifier_state() {
        auto stopped = []() {
            verify_result r;
            r.ok = false;
            r.error = "the verifier stopped before this step ran";
            return r;
        };
        for (auto& [tag, w] : promises) w.rp.deliver(stopped());
        run_ahead.for_each([&](uint64_t tag, const session_actor& session) {
            if (!promises.count(tag)) caf::anon_send(session, stopped());  // a step it queued itself
        });
    }
};

verifier_actor::behavior_type verifier_fun(verifier_actor::stateful_pointer<verifier_state> self,
                                           std::shared_ptr<RuntimeShared> rt) {
    auto& st = self->state;
    // Detached: this runs on the actor's own thread, thread 0 of its pool.
    ThreadPool::set_current_thread_name("specd.verifier");
    if (rt->config.compute_nice != 0) ThreadPool::set_current_thread_nice(rt->config.compute_nice);
    ForwardOptions fo;
    fo.max_batch_tokens = rt->config.max_step_tokens;
    fo.max_logit_rows = std::min(rt->config.max_step_tokens, rt->config.max_sequences * (rt->config.draft_max + 1));
    fo.max_logit_rows = std::max(fo.max_logit_rows, 1);
    st.fwd = rt->backends->make_target(fo);
    st.kv = st.fwd->make_kv_cache(rt->target_shape);
    BatchVerifierOptions vo;
    vo.max_step_tokens = rt->config.max_step_tokens;
    vo.prefill_chunk_tokens = rt->config.prefill_chunk;
    st.batch = std::make_unique<BatchVerifier>(*st.fwd, *st.kv, vo);
    if (rt->config.prefix_cache) st.batch->enable_prefix_cache();
    st.batch->set_cost_probe(&rt->step_probe);
    auto try_step = [self, rt]() {
        queue_step(self, self->state.hold, self->state.batch->has_work(), rt->rendezvous.get(), Phase::Verify);
    };
    return {
        [=](verify_msg& m) -> caf::typed_response_promise<verify_result> {
            auto& s = self->state;
            // The session, for the results of the steps run ahead (before
            // make_response_promise, which takes the sender out of the message).
            session_actor session;
            if (m.run_ahead > 0 && m.n_draft == 0) session = caf::actor_cast<session_actor>(self->current_sender());
            auto rp = self->make_response_promise<verify_result>();
            const uint64_t job_request = m.request;
            const uint64_t tag = s.next_tag++;
            VerifyJob job;
            try {
                job = verify_job_from_msg(m);
            } catch (const Error& e) {
                verify_result r;
                r.ok = false;
                r.error = e.what();
                rp.deliver(std::move(r));
                return rp;
            }
            job.tag = tag;
            s.promises.emplace(job.tag, verifier_state::Waiting{job_request, rp});
            if (session) s.run_ahead.begin(job.tag, job_request, std::move(session), m.run_ahead, m.stop_at_eos, m.sampling);
            s.batch->submit(std::move(job));
            if (rt->rendezvous && rt->rendezvous->arrived(Phase::Verify, job_request)) {
                caf::anon_send(rt->current_drafter(), step_atom::value);  // it may have held for this request
            }
            try_step();
            return rp;
        },
        [=](close_atom, uint64_t request) -> bool {
            auto& s = self->state;
            s.batch->close(request);  // drops its queued job
            s.run_ahead.close(request);
            for (auto it = s.promises.begin(); it != s.promises.end();) {
                if (it->second.request != request) {
                    ++it;
                    continue;
                }
                verify_result r;
                r.ok = false;
                r.error = "the request was closed";
                it->second.rp.deliver(std::move(r));
                it = s.promises.erase(it);
            }
            if (rt->rendezvous) rt->rendezvous->closed(request);
            try_step();
            return true;
        },
        // A queued step, a hold's timer, or a nudge from the drafter.
        [=](step_atom) {
            auto& s = self->state;
            if (!s.hold.step_queued) return try_step();
            s.hold.step_queued = false;
            s.outcomes.clear();
            s.batch->step(s.outcomes);  // an exception here kills the verifier: its sessions fail, it is restarted
            // Run-ahead: queue the next plain step of each request allowed
            // one before anything goes out, so the next step holds them all.
            const Tokenizer& tok = rt->target->tokenizer();
            s.chained.clear();
            s.run_ahead.after_step(
                s.outcomes, [&tok](int32_t token) { return tok.is_end_of_generation(token); },
                [&s](uint64_t request) { return s.batch->is_open(request); }, s.next_tag, s.chained, s.continued, s.send_to);
            for (VerifyJob& job : s.chained) s.batch->submit(std::move(job));
            if (rt->rendezvous) {
                // Before the results go out: their next messages must find
                // them expected. A request run ahead is not on its way back.
                s.answered.clear();
                for (size_t i = 0; i < s.outcomes.size(); ++i) {
                    if (!s.continued[i]) s.answered.push_back(s.outcomes[i].request);
                }
                rt->rendezvous->answered(s.answered);
            }
            for (size_t i = 0; i < s.outcomes.size(); ++i) {
                VerifyOutcome& o = s.outcomes[i];
                verify_result r = verify_result_from_outcome(o, s.continued[i] != 0);
                if (auto it = s.promises.find(o.tag); it != s.promises.end()) {
                    it->second.rp.deliver(std::move(r));
                    s.promises.erase(it);
                } else if (s.send_to[i]) {
                    self->send(s.send_to[i], std::move(r));  // a step the verifier queued itself
                }
            }
            try_step();
        },
    };
}

// A verifier that dies of a failure is replaced; sessions that were
// waiting on it have already been told (their requests failed).
void watch_verifier(const std::shared_ptr<RuntimeShared>& rt, const verifier_actor& v) {
    std::weak_ptr<RuntimeShared> weak = rt;
    v->attach_functor([weak](const caf::error& reason) {
        auto rt = weak.lock();
        if (!rt || rt->stopping || !reason || reason == caf::exit_reason::user_shutdown) return;
        ++rt->verifier_restarts;
        spawn_verifier(rt);
    });
}

}  // namespace

void spawn_verifier(const std::shared_ptr<RuntimeShared>& rt) {
    auto v = rt->system->spawn<caf::detached>(verifier_fun, rt);
    rt->publish_verifier(v);
    watch_verifier(rt, v);
}

}  // namespace specd
