// The runtime's actors (thin shells over BatchVerifier, BatchDrafter,
// KvLedger and SessionCore), the embedding API, and the multi-node pieces
// (the gateway's cluster actor, a node's published actor). One translation
// unit: CAF headers cost ~8 s each to compile.
#include "actors/runtime.h"

#include "actors/backend_factory.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <caf/io/all.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "actors/node.h"
#include "config/log.h"
#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/context_plan.h"
#include "engine/kv_ledger.h"
#include "engine/model.h"
#include "engine/model_integrity.h"
#include "engine/phase_rendezvous.h"
#include "engine/session_core.h"
#include "engine/thread_pool.h"
#include "engine/utf8.h"

namespace specd {

// ------------------------------------------------------------- wire ---

std::string pack_probs(const std::vector<std::vector<TokenProb>>& probs) {
    size_t bytes = 0;
    for (const auto& d : probs) bytes += 4 + d.size() * 8;
    std::string out(bytes, '\0');
    char* p = out.data();
    for (const auto& d : probs) {
        const uint32_t n = static_cast<uint32_t>(d.size());
        std::memcpy(p, &n, 4);
        p += 4;
        for (const TokenProb& t : d) {
            std::memcpy(p, &t.id, 4);
            std::memcpy(p + 4, &t.p, 4);
            p += 8;
        }
    }
    return out;
}

std::vector<std::vector<TokenProb>> unpack_probs(const std::string& bytes) {
    std::vector<std::vector<TokenProb>> out;
    size_t at = 0;
    while (at < bytes.size()) {
        uint32_t n = 0;
        if (bytes.size() - at < 4) throw Error("draft distributions: truncated count");
        std::memcpy(&n, bytes.data() + at, 4);
        at += 4;
        if ((bytes.size() - at) / 8 < n) throw Error("draft distributions: truncated entries");
        std::vector<TokenProb> d(n);
        for (uint32_t i = 0; i < n; ++i) {
            std::memcpy(&d[i].id, bytes.data() + at, 4);
            std::memcpy(&d[i].p, bytes.data() + at + 4, 4);
            at += 8;
        }
        out.push_back(std::move(d));
    }
    return out;
}

std::vector<uint64_t> rng_to_wire(const RngState& s) { return {s.s[0], s.s[1], s.s[2], s.s[3]}; }

RngState rng_from_wire(const std::vector<uint64_t>& v) {
    if (v.size() != 4) throw Error("random state must have 4 words, got " + std::to_string(v.size()));
    RngState s;
    for (size_t i = 0; i < 4; ++i) s.s[i] = v[i];
    return s;
}

void register_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::specd>(); }

void configure_network(caf::actor_system_config& cfg) { cfg.load<caf::io::middleman>(); }

namespace {

// CAF's work-sharing policy (one queue, workers sleep on a condition
// variable) with two changes for compute actors that share cores with it:
// - A worker is woken after the queue's lock is released. CAF signals
//   while holding it: the woken worker (on a core a compute thread fills)
//   blocked on the lock and was woken a second time by the unlock
//   (`perf record -e sched:sched_wakeup`, `specd bench --concurrency 1`:
//   2,924 signals and 2,411 unlock wake-ups from the verifier thread).
// - At most one worker is being woken at a time, and a worker that finds
//   more jobs behind the one it takes wakes the next. A verifier step that
//   answers 16 sessions so makes one wake-up call instead of one per
//   session, and no longer blocks inside pthread_cond_signal (glibc waits
//   there for earlier waiters to leave: 597 times in one c=16 run).
class prompt_work_sharing : public caf::policy::unprofiled {
public:
    using queue_type = std::list<caf::resumable*>;

    struct coordinator_data {
        explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}
        queue_type queue;  // guarded by lock
        std::mutex lock;
        std::condition_variable cv;
        int32_t sleeping = 0;  // workers waiting on cv
        bool waking = false;   // a worker was signalled and has not yet looked at the queue
    };

    struct worker_data {
        explicit worker_data(caf::scheduler::abstract_coordinator*) {}
    };

    template <class Coordinator>
    void enqueue(Coordinator* self, caf::resumable* job) {
        queue_type one;
        one.push_back(job);  // allocates outside the lock
        auto& data = d(self);
        bool wake = false;
        {
            std::lock_guard<std::mutex> guard(data.lock);
            data.queue.splice(data.queue.end(), one);
            wake = claim_wake(data);
        }
        if (wake) data.cv.notify_one();
    }
    template <class Coordinator>
    void central_enqueue(Coordinator* self, caf::resumable* job) {
        enqueue(self, job);
    }
    template <class Worker>
    void external_enqueue(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }
    template <class Worker>
    void internal_enqueue(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }
    template <class Worker>
    void resume_job_later(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }

    template <class Worker>
    caf::resumable* dequeue(Worker* self) {
        auto& data = d(self->parent());
        caf::resumable* job = nullptr;
        bool wake = false;
        {
            std::unique_lock<std::mutex> guard(data.lock);
            while (data.queue.empty()) {
                ++data.sleeping;
                data.cv.wait(guard);
                --data.sleeping;
                data.waking = false;  // signalled or not, this worker is the one looking now
            }
            job = data.queue.front();
            data.queue.pop_front();
            if (!data.queue.empty()) wake = claim_wake(data);  // more behind it: pass the baton
        }
        if (wake) data.cv.notify_one();
        return job;
    }

    template <class Worker, class UnaryFunction>
    void foreach_resumable(Worker*, UnaryFunction) {}

    template <class Coordinator, class UnaryFunction>
    void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
        auto& data = d(self);
        std::lock_guard<std::mutex> guard(data.lock);
        while (!data.queue.empty()) {
            caf::resumable* job = data.queue.front();
            data.queue.pop_front();
            f(job);
        }
    }

private:
    // Under the lock: whether the caller should signal a sleeping worker.
    static bool claim_wake(coordinator_data& data) {
        if (data.sleeping == 0 || data.waking) return false;
        data.waking = true;
        return true;
    }
};

}  // namespace

void configure_low_latency(caf::actor_system_config& cfg) { cfg.load<caf::scheduler::coordinator<prompt_work_sharing>>(); }

// ----------------------------------------------------------- shared ---

// A target node as the gateway sees it; guarded by RuntimeShared::mu.
struct TargetReplica {
    NodeAddress address_parts;
    std::string address;                  // host:port
    node_actor node;                      // the published actor (health checks)
    verifier_actor verifier;              // valid while up
    kv_manager_actor kv;
    bool up = false;
    bool connecting = false;              // a connect is in flight
    int32_t sessions = 0;                 // this gateway's requests on it
    int64_t served = 0;
    int32_t kv_free = 0, kv_blocks = 0, waiting = 0;   // from its last health check
    int32_t joins = 0;
    std::string last_error;
};

struct DraftReplica {
    NodeAddress address_parts;
    std::string address;
    node_actor node;
    draft_actor drafter;
    bool up = false;
    bool connecting = false;
    int32_t sessions = 0;
    int64_t served = 0;
    int32_t joins = 0;
    std::string last_error;
};

struct RuntimeShared {
    RuntimeConfig config;
    std::unique_ptr<LlamaModel> target;
    std::unique_ptr<LlamaModel> draft;
    std::unique_ptr<ThreadPool> target_pool;
    std::unique_ptr<ThreadPool> draft_pool;
    std::unique_ptr<BackendFactory> backends;  // CPU or CUDA forward passes (--device)
    int32_t n_ctx = 0;
    KvCacheShape target_shape, draft_shape;
    caf::actor_system* system = nullptr;

    mutable std::mutex mu;
    verifier_actor verifier;
    draft_actor drafter;
    kv_manager_actor kv;
    std::unordered_set<caf::strong_actor_ptr> sessions;
    std::atomic<bool> draining{false};
    std::atomic<bool> stopping{false};
    std::atomic<uint64_t> next_request{1};
    std::atomic<int32_t> active{0};
    std::atomic<int32_t> verifier_restarts{0};
    // The defaults for requests that don't say, switchable while serving
    // (set_speculation); they start as the config's.
    std::atomic<bool> spec_enabled{true};
    std::atomic<int32_t> spec_draft_max{8};
    std::atomic<bool> spec_adaptive{true};
    std::string draft_load_error;  // set once in create(): why the configured draft is not loaded
    // The draft-length controller of the last session that finished: new
    // sessions start from it (SessionCore::seed_controller). Guarded by learned_mu.
    std::mutex learned_mu;
    std::optional<DraftLengthController> learned_controller;
    // The verifier's single-request steps, for the load policy's measured budget.
    StepCostProbe step_probe;
    // Multi-node. A gateway (clustered) has no local compute actors: its
    // sessions use the replicas' remote actors.
    bool clustered = false;
    bool pipeline = false;         // sessions draft step t+1 while step t verifies
    bool shared_pool = false;      // the draft runs on the target's thread pool (the phases take turns)
    // Holds each compute actor's step until the sessions the last verifier
    // step answered are back (engine/phase_rendezvous.h); null: no holding
    // (multi-node, pipelined drafts).
    std::shared_ptr<PhaseRendezvous> rendezvous;
    std::vector<TargetReplica> targets;  // guarded by mu
    std::vector<DraftReplica> drafts;    // guarded by mu
    cluster_actor cluster;
    uint16_t cluster_port = 0;
    std::string node_role;         // a `specd node`: "target" or "draft"

    verifier_actor current_verifier() const {
        std::lock_guard<std::mutex> lock(mu);
        return verifier;
    }
    draft_actor current_drafter() const {
        std::lock_guard<std::mutex> lock(mu);
        return drafter;
    }
};

namespace {

int64_t available_ram_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit) {
        if (key == "MemAvailable:") return kb * 1024;
    }
    return int64_t{8} << 30;
}

// ------------------------------------------------------ step holds ---

// How long a compute actor holds its step for sessions on their way back:
// a session's next message follows its result within microseconds; a strict
// verifier (shared pool) also waits out the sessions' drafting.
constexpr auto kHoldForReturning = std::chrono::milliseconds(2);
constexpr auto kHoldForDrafting = std::chrono::milliseconds(30);

// When a compute actor's step runs: queued at once when nobody is on the
// way back, else held (a timer re-checks) until they arrive or the hold
// expires. `step_queued`: a step_atom for a real step is in the mailbox.
struct StepHold {
    bool step_queued = false;
    bool holding = false;
    std::chrono::steady_clock::time_point since;  // when the hold began
};

// Queues the actor's next step (a step_atom to itself) unless one is queued,
// there is no work, or the rendezvous says to hold; a held step has a timer
// (a delayed step_atom) re-check it.
template <class Self>
void queue_step(Self* self, StepHold& h, bool has_work, PhaseRendezvous* rendezvous, Phase phase) {
    if (h.step_queued || !has_work) return;
    const PhaseRendezvous::Wait wait = rendezvous ? rendezvous->waiting_for(phase) : PhaseRendezvous::Wait::None;
    if (wait != PhaseRendezvous::Wait::None) {
        const auto now = std::chrono::steady_clock::now();
        const auto window = wait == PhaseRendezvous::Wait::Drafting ? kHoldForDrafting : kHoldForReturning;
        if (!h.holding) {
            h.holding = true;
            h.since = now;
            self->delayed_send(self, window, step_atom::value);
            return;
        }
        // Measured from the hold's start: a returning request that reached
        // the drafter meanwhile extends a 2 ms hold to a draft's length.
        if (now < h.since + window) {
            if (wait == PhaseRendezvous::Wait::Drafting && now >= h.since + kHoldForReturning) {
                const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(h.since + window - now);
                self->delayed_send(self, left + std::chrono::milliseconds(1), step_atom::value);
            }
            return;
        }
        rendezvous->give_up(phase);  // they join whichever step they reach
    }
    h.holding = false;
    h.step_queued = true;
    self->send(self, step_atom::value);
}

// ------------------------------------------------------- verifier ---

// A request the verifier runs ahead for (verify_msg::run_ahead): where its
// results go and how many more plain steps it may add.
struct RunAhead {
    uint64_t request = 0;
    session_actor session;
    int32_t steps_left = 0;
    bool stop_at_eos = true;
    SamplingParams sampling;
};

struct verifier_state {
    std::unique_ptr<ForwardBackend> fwd;
    std::unique_ptr<PagedKvCache> kv;
    std::unique_ptr<BatchVerifier> batch;
    struct Waiting {
        uint64_t request = 0;
        caf::typed_response_promise<verify_result> rp;
    };
    std::unordered_map<uint64_t, Waiting> promises;  // by job tag: the replies owed for jobs from sessions
    std::unordered_map<uint64_t, RunAhead> run_ahead;  // by the tag of the request's job in the batch (the session's, then each it queued)
    uint64_t next_tag = 1;
    StepHold hold;
    std::vector<VerifyOutcome> outcomes;
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
        for (auto& [tag, ra] : run_ahead) {
            if (!promises.count(tag)) caf::anon_send(ra.session, stopped());  // a step it queued itself
        }
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
            VerifyJob job;
            job.request = m.request;
            job.tag = s.next_tag++;
            job.prefill = m.prefill;
            job.tokens = std::move(m.tokens);
            job.n_draft = m.n_draft;
            job.sampling = m.sampling;
            try {
                job.rng = rng_from_wire(m.rng);
                job.draft_has_probs = m.has_probs;
                if (m.has_probs) job.draft_probs = unpack_probs(m.probs);
            } catch (const Error& e) {
                verify_result r;
                r.ok = false;
                r.error = e.what();
                rp.deliver(std::move(r));
                return rp;
            }
            s.promises.emplace(job.tag, verifier_state::Waiting{job_request, rp});
            if (session) s.run_ahead.emplace(job.tag, RunAhead{job_request, std::move(session), m.run_ahead, m.stop_at_eos, m.sampling});
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
            std::erase_if(s.run_ahead, [request](const auto& kv) { return kv.second.request == request; });
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
            s.continued.assign(s.outcomes.size(), 0);
            s.send_to.assign(s.outcomes.size(), session_actor{});
            const Tokenizer& tok = rt->target->tokenizer();
            for (size_t i = 0; i < s.outcomes.size(); ++i) {
                const VerifyOutcome& o = s.outcomes[i];
                auto it = s.run_ahead.find(o.tag);
                if (it == s.run_ahead.end()) continue;
                RunAhead ra = std::move(it->second);
                s.run_ahead.erase(it);
                s.send_to[i] = ra.session;
                if (!o.ok || ra.steps_left <= 0 || (ra.stop_at_eos && tok.is_end_of_generation(o.next)) || !s.batch->is_open(o.request))
                    continue;
                VerifyJob next;
                next.request = o.request;
                next.tag = s.next_tag++;
                next.tokens.push_back(o.next);
                next.sampling = ra.sampling;
                next.rng = o.rng;
                --ra.steps_left;
                s.run_ahead.emplace(next.tag, std::move(ra));
                s.batch->submit(std::move(next));
                s.continued[i] = 1;
            }
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
                verify_result r;
                r.ok = o.ok;
                r.kv_full = o.kv_full;
                r.error = std::move(o.error);
                r.n_accepted = o.n_accepted;
                r.next = o.next;
                r.rng = rng_to_wire(o.rng);
                r.batch_requests = o.batch_requests;
                r.open_requests = o.open_requests;
                r.step_ms = o.step_ms;
                r.continued = s.continued[i] != 0;
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

// ---------------------------------------------------------- draft ---

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
            job.request = m.request;
            job.context = *context;
            job.k = m.k;
            job.p_min = m.p_min;
            job.sampling = m.sampling;
            try {
                job.rng = rng_from_wire(m.rng);
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
                DraftOutcome& o = s.outcomes[i];
                draft_result r;
                r.tokens = std::move(o.draft.tokens);
                r.has_probs = o.draft.has_probs;
                if (o.draft.has_probs) r.probs = pack_probs(o.draft.probs);
                r.rng = rng_to_wire(o.rng);
                r.step_ms = o.step_ms;
                s.promises[i].deliver(std::move(r));
            }
            s.jobs.clear();
            s.promises.clear();
        },
    };
}

// ------------------------------------------------------ KV manager ---

struct kv_state {
    // Remote sessions (a gateway's) by the request they hold: when their
    // gateway dies or is cut off, the down message releases the blocks.
    std::unordered_map<caf::actor_addr, uint64_t> remote_owners;
    std::unique_ptr<KvLedger> ledger;
    std::unordered_map<uint64_t, caf::typed_response_promise<kv_grant>> waiting;
    std::vector<uint64_t> granted;
    static inline const char* name = "specd.kv_manager";
};

void kv_release(kv_manager_actor::stateful_pointer<kv_state> self, const std::shared_ptr<RuntimeShared>& rt, uint64_t request) {
    // Free the sequences on the compute actors first, then the blocks:
    // the next request admitted must find them free.
    auto finish = [self, request]() {
        auto& s = self->state;
        s.granted.clear();
        s.ledger->release(request, s.granted);
        auto w = s.waiting.find(request);
        if (w != s.waiting.end()) s.waiting.erase(w);  // died while waiting: its promise goes unanswered
        for (uint64_t id : s.granted) {
            auto it = s.waiting.find(id);
            if (it == s.waiting.end()) continue;
            it->second.deliver(kv_grant{true, {}});
            s.waiting.erase(it);
        }
    };
    auto pending = std::make_shared<int>(2);
    auto one_done = [pending, finish]() {
        if (--*pending == 0) finish();
    };
    const auto timeout = std::chrono::seconds(30);
    // A target node has no draft actor (the gateway's session closes the
    // draft node's sequence itself).
    if (auto v = rt->current_verifier())
        self->request(v, timeout, close_atom::value, request).then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
    else one_done();
    if (auto d = rt->current_drafter())
        self->request(d, timeout, close_atom::value, request).then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
    else one_done();
}

kv_manager_actor::behavior_type kv_fun(kv_manager_actor::stateful_pointer<kv_state> self, std::shared_ptr<RuntimeShared> rt) {
    KvPoolSpec t{rt->target_shape.n_blocks, rt->target_shape.block_size, rt->target_shape.max_sequences};
    KvPoolSpec d{rt->draft ? rt->draft_shape.n_blocks : 0, rt->draft_shape.block_size, rt->draft_shape.max_sequences};
    self->state.ledger = std::make_unique<KvLedger>(t, d, rt->config.max_waiting);
    self->set_down_handler([=](caf::down_msg& dm) {
        auto it = self->state.remote_owners.find(dm.source);
        if (it == self->state.remote_owners.end()) return;
        const uint64_t request = it->second;
        self->state.remote_owners.erase(it);
        log::warn("a remote session is gone; releasing its KV blocks", {{"request", request}, {"reason", self->system().render(dm.reason)}});
        kv_release(self, rt, request);
    });
    return {
        [=](kv_acquire& a) -> caf::typed_response_promise<kv_grant> {
            auto& s = self->state;
            // Local sessions release through their exit functor; a remote
            // one may vanish with its gateway, so watch it. (Before
            // make_response_promise, which takes the sender out of the message.)
            if (const caf::strong_actor_ptr sender = self->current_sender(); sender && sender->node() != self->node()) {
                s.remote_owners[caf::actor_cast<caf::actor_addr>(sender)] = a.request;
                self->monitor(sender);
            }
            auto rp = self->make_response_promise<kv_grant>();
            std::string why;
            Admission ad;
            try {
                ad = s.ledger->acquire(a.request, KvDemand{a.target_positions, a.draft_positions}, &why);
            } catch (const Error& e) {
                rp.deliver(kv_grant{false, e.what()});
                return rp;
            }
            if (ad == Admission::Refused) {
                rp.deliver(kv_grant{false, why});
                return rp;
            }
            // From here on the blocks are held until a release_atom: the
            // session sends one when it ends, and Runtime::submit attached
            // one to the session's exit, so a session that dies releases too.
            if (ad == Admission::Granted) rp.deliver(kv_grant{true, {}});
            else s.waiting.emplace(a.request, rp);
            return rp;
        },
        [=](release_atom, uint64_t request) {
            auto& s = self->state;
            for (auto it = s.remote_owners.begin(); it != s.remote_owners.end(); ++it) {
                if (it->second != request) continue;
                self->demonitor(it->first);
                s.remote_owners.erase(it);
                break;
            }
            kv_release(self, rt, request);
        },
        [=](stats_atom) -> runtime_stats {
            const KvLedger& l = *self->state.ledger;
            runtime_stats r;
            r.kv_target_blocks = l.target().n_blocks;
            r.kv_target_free = l.target_free_blocks();
            r.kv_draft_blocks = l.draft().n_blocks;
            r.kv_draft_free = l.draft_free_blocks();
            r.running = l.granted();
            r.waiting = l.waiting();
            r.kv_block_size = l.target().block_size;
            return r;
        },
    };
}

// ------------------------------------------------------- placement ---

// Where a session runs: its target replica (verifier + KV manager) and its
// draft. In one process both are the local actors.
struct Placement {
    int32_t target = -1;                  // index into RuntimeShared::targets (-1: local)
    int32_t draft = -1;                   // index into RuntimeShared::drafts (-1: local or none)
    verifier_actor verifier;
    kv_manager_actor kv;
    draft_actor drafter;                  // invalid: no draft (plain decoding)
    bool remote = false;                  // on nodes: the session closes the draft's sequence itself
    std::string target_address = "local";
    std::string draft_address;
};

// Picks the replica with the fewest of this gateway's sessions plus queued
// requests, then the most free KV blocks (so concurrent arrivals spread at
// once, before the next health check reports the nodes' own counts).
// `exclude`: a replica that just failed this session. False: none is up.
bool place_target(RuntimeShared& rt, Placement& p, int32_t exclude) {
    std::lock_guard<std::mutex> lock(rt.mu);
    if (!rt.clustered) {
        p.target = -1;
        p.verifier = rt.verifier;
        p.kv = rt.kv;
        return true;
    }
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(rt.targets.size()); ++i) {
        const TargetReplica& t = rt.targets[static_cast<size_t>(i)];
        if (!t.up || i == exclude) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const TargetReplica& b = rt.targets[static_cast<size_t>(best)];
        const int32_t load = t.sessions + t.waiting, best_load = b.sessions + b.waiting;
        if (load < best_load || (load == best_load && t.kv_free > b.kv_free)) best = i;
    }
    if (best < 0) return false;
    TargetReplica& t = rt.targets[static_cast<size_t>(best)];
    ++t.sessions;
    ++t.served;
    p.target = best;
    p.verifier = t.verifier;
    p.kv = t.kv;
    p.target_address = t.address;
    return true;
}

void place_draft(RuntimeShared& rt, Placement& p) {
    std::lock_guard<std::mutex> lock(rt.mu);
    if (!rt.clustered) {
        p.drafter = rt.drafter;
        return;
    }
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(rt.drafts.size()); ++i) {
        const DraftReplica& d = rt.drafts[static_cast<size_t>(i)];
        if (d.up && (best < 0 || d.sessions < rt.drafts[static_cast<size_t>(best)].sessions)) best = i;
    }
    if (best < 0) return;
    DraftReplica& d = rt.drafts[static_cast<size_t>(best)];
    ++d.sessions;
    ++d.served;
    p.draft = best;
    p.drafter = d.drafter;
    p.remote = true;
    p.draft_address = d.address;
}

void unplace_target(RuntimeShared& rt, Placement& p) {
    std::lock_guard<std::mutex> lock(rt.mu);
    if (p.target >= 0 && p.target < static_cast<int32_t>(rt.targets.size())) --rt.targets[static_cast<size_t>(p.target)].sessions;
    p.target = -1;
    p.verifier = verifier_actor{};
    p.kv = kv_manager_actor{};
}

void unplace_draft(RuntimeShared& rt, Placement& p) {
    std::lock_guard<std::mutex> lock(rt.mu);
    if (p.draft >= 0 && p.draft < static_cast<int32_t>(rt.drafts.size())) --rt.drafts[static_cast<size_t>(p.draft)].sessions;
    p.draft = -1;
    p.drafter = draft_actor{};
}

// -------------------------------------------------------- session ---

// A draft asked for while the previous step is still being verified
// (pipelining): it assumes every drafted token is accepted and that the
// target's bonus token is the draft's own next guess.
struct Prefetch {
    bool active = false;                  // asked for and not discarded
    bool ready = false;                   // its reply is here
    uint64_t id = 0;                      // the draft request it answers
    std::vector<int32_t> assumed;         // tokens assumed after the history: d1..dk, then the bonus guess
    DraftOutcome outcome;
};

// Where a session's events go: a sink actor, or the submitter's callbacks,
// called by the session itself. A callback sink of its own would be one
// more actor to wake per step, and on a machine whose cores the compute
// threads fill that wake-up preempts the model in mid-step.
struct EventSink {
    caf::actor actor;
    std::shared_ptr<const RuntimeCallbacks> callbacks;

    template <class Event>
    void deliver(Event&& e, const std::function<void(const std::decay_t<Event>&)>& callback) const {
        if (!callbacks) return caf::anon_send(actor, std::forward<Event>(e));
        if (!callback) return;
        try {
            callback(e);
        } catch (const std::exception& ex) {
            log::warn("a runtime callback threw; the generation goes on", {{"request", e.id}, {"error", ex.what()}});
        }
    }
    void token(token_event e) const { deliver(std::move(e), callbacks ? callbacks->on_token : nullptr); }
    void done(done_event e) const { deliver(std::move(e), callbacks ? callbacks->on_done : nullptr); }
    void error(error_event e) const { deliver(std::move(e), callbacks ? callbacks->on_error : nullptr); }
};

struct session_state {
    std::shared_ptr<RuntimeShared> rt;
    std::unique_ptr<SessionCore> core;
    EventSink sink;
    std::string id;
    uint64_t request = 0;
    double t_submit = 0.0;
    double t_first = -1.0;
    bool ended = false;
    bool kv_held = false;
    SessionCore::Emitted emitted;
    // Shared with the exit functor, which releases whatever is placed when
    // the session ends (normally, failed or killed).
    std::shared_ptr<Placement> place = std::make_shared<Placement>();
    std::vector<int32_t> draft_sent;      // the context the draft actor holds for this request (what was sent)
    uint64_t draft_jobs = 0;              // draft requests sent (each gets its own random stream when pipelined)
    uint64_t waiting_draft = 0;           // id of the draft request the session waits for (0: none)
    int32_t waiting_k = 0;                // and its k
    uint64_t verify_epoch = 0;            // bumped when a target is abandoned: its late replies are ignored
    bool pipelined = false;
    Prefetch prefetch;
    bool awaiting_prefetch = false;       // the next step waits for the prefetch's reply
    int32_t prefetch_k = 0;               // the k that step wants
    std::vector<int32_t> verifying;       // drafted tokens of the step being verified
    int32_t bonus_guess = -1;             // the draft's guess of that step's bonus token (-1: none)
    int32_t resumes = 0;                  // times moved to another target before streaming
    bool running_ahead = false;           // the verifier runs this request's plain steps on its own (verify_msg::run_ahead)
    uint64_t run_ahead_epoch = 0;         // the verify_epoch of the job it runs ahead from
    static inline const char* name = "specd.session";
};

using session_ptr = session_actor::stateful_pointer<session_state>;

// Requests to local actors wait as long as it takes (a local actor that
// dies answers); requests to nodes time out, so a node that is cut off
// (no TCP reset, no down message) is noticed.
template <class Handle, class Msg, class OnValue, class OnError>
void ask(session_ptr self, const Handle& dest, Msg&& msg, OnValue on_value, OnError on_error) {
    const int32_t ms = self->state.rt->clustered ? self->state.rt->config.node_timeout_ms : 0;
    if (ms > 0) self->request(dest, std::chrono::milliseconds(ms), std::forward<Msg>(msg)).then(std::move(on_value), std::move(on_error));
    else self->request(dest, caf::infinite, std::forward<Msg>(msg)).then(std::move(on_value), std::move(on_error));
}

void session_end(session_ptr self) {
    auto& s = self->state;
    if (s.ended) return;
    s.ended = true;
    self->quit();  // the exit functor releases the KV blocks and the draft sequence
}

void session_fail(session_ptr self, std::string code, std::string message) {
    auto& s = self->state;
    if (s.ended) return;
    s.sink.error(error_event{s.id, std::move(code), std::move(message)});
    session_end(self);
}

// Sends what was emitted; when the core finished, also the done event.
void session_flush(session_ptr self) {
    auto& s = self->state;
    s.core->take_emitted(s.emitted);
    if (!s.emitted.tokens.empty() || !s.emitted.text.empty()) {
        if (s.t_first < 0) s.t_first = now_ms();
        s.sink.token(token_event{s.id, s.emitted.tokens, s.emitted.from_draft, s.emitted.text, s.emitted.text_ends});
    }
    if (!s.core->finished()) return;
    const SpecStats& st = s.core->stats();
    if (s.core->speculative() && st.n_drafts > 0) {
        std::lock_guard<std::mutex> lock(s.rt->learned_mu);
        s.rt->learned_controller = s.core->controller();
    }
    done_event d;
    d.id = s.id;
    switch (s.core->stop_reason()) {
        case StopReason::Eos: d.finish_reason = "stop"; break;
        case StopReason::Length: d.finish_reason = "length"; break;
        case StopReason::ContextFull: d.finish_reason = "context"; break;
        case StopReason::Cancelled: d.finish_reason = "cancelled"; break;
        case StopReason::StopSequence: d.finish_reason = "stop"; break;  // as OpenAI: a stop string and EOS read alike
    }
    d.prompt_tokens = s.core->n_prompt();
    d.completion_tokens = static_cast<int32_t>(s.core->output().size());
    const double now = now_ms();
    d.ttft_ms = s.t_first >= 0 ? s.t_first - s.t_submit : now - s.t_submit;
    d.total_ms = now - s.t_submit;
    d.speculative = s.core->speculative();
    d.steps = st.n_steps;
    d.drafted = st.n_drafted;
    d.accepted = st.n_accepted;
    d.draft_steps = st.n_drafts;
    d.load_capped = st.n_load_capped;
    d.draft_ms = st.draft_ms;
    d.verify_ms = st.verify_ms;
    d.drafted_per_position = st.drafted_per_position;
    d.accepted_per_position = st.accepted_per_position;
    s.sink.done(std::move(d));
    session_end(self);
}

void session_step(session_ptr self);
void session_acquire(session_ptr self);
void session_send_draft(session_ptr self, int32_t k, bool prefetch);

// The session's target is gone (down message, timeout, or an error from
// the node). Nothing streamed yet: start over on another replica. Else a
// clear error: the target's KV state (and the stream's position) is lost.
void session_target_lost(session_ptr self, const std::string& why) {
    auto& s = self->state;
    if (s.ended) return;
    const std::string address = s.place->target_address;
    ++s.verify_epoch;
    s.kv_held = false;  // the node's blocks went with it
    const int32_t failed = s.place->target;
    unplace_target(*s.rt, *s.place);
    log::warn("target node lost by a session", {{"node", address}, {"request", s.id}, {"error", why}, {"streamed", s.t_first >= 0}});
    int32_t replicas = 0;
    {
        std::lock_guard<std::mutex> lock(s.rt->mu);
        replicas = static_cast<int32_t>(s.rt->targets.size());
    }
    if (s.t_first < 0 && s.resumes < replicas && !s.core->finished()) {
        ++s.resumes;
        if (place_target(*s.rt, *s.place, failed)) {
            if (s.place->verifier) self->monitor(s.place->verifier);
            return session_acquire(self);
        }
    }
    session_fail(self, "unavailable", "target node " + address + " was lost (" + why + ") after " +
                                          std::to_string(s.core->output().size()) + " streamed tokens; retry the request");
}

// The draft is gone: this request goes on in plain decoding, without an error.
void session_draft_lost(session_ptr self, const std::string& why) {
    auto& s = self->state;
    if (s.ended || !s.place->drafter) return;
    if (s.place->remote) log::warn("draft node lost by a session; it continues without speculation",
                                   {{"node", s.place->draft_address}, {"request", s.id}, {"error", why}});
    unplace_draft(*s.rt, *s.place);
    s.core->disable_speculation();
    s.prefetch = Prefetch{};
    const bool was_waiting = s.waiting_draft != 0 || s.awaiting_prefetch;
    s.waiting_draft = 0;
    s.awaiting_prefetch = false;
    if (was_waiting) session_step(self);
}

void session_send_verify(session_ptr self);

// Feeds a verifier's result (the reply to a job, or a run-ahead step's
// message) to the core; then the next step, unless the verifier goes on.
void session_on_result(session_ptr self, verify_result& r, bool prefill) {
    auto& s = self->state;
    s.running_ahead = r.continued;
    if (!r.ok) {
        if (s.rt->clustered && !r.kv_full) return session_target_lost(self, r.error);
        return session_fail(self, r.kv_full ? "overloaded" : "internal", r.error);
    }
    VerifyOutcome o;
    o.n_accepted = r.n_accepted;
    o.next = r.next;
    o.rng = rng_from_wire(r.rng);
    o.batch_requests = r.batch_requests;
    o.open_requests = r.open_requests;
    o.step_ms = r.step_ms;
    if (prefill) {
        s.core->on_prefill(o);
    } else {
        // The prefetch holds only when its assumption came true.
        const bool all = r.n_accepted == static_cast<int32_t>(s.verifying.size());
        if (s.prefetch.active && !(all && s.bonus_guess >= 0 && r.next == s.bonus_guess)) s.prefetch = Prefetch{};
        s.core->on_verify(o);
        s.verifying.clear();  // a run-ahead step after this one verifies no draft
    }
    // The next step goes out before the tokens: the compute actors
    // wait for it, and delivering the tokens (a sink actor's
    // wake-up, or the submitter's callbacks) would delay it.
    if (!s.core->finished() && !r.continued) session_step(self);
    session_flush(self);
}

// How many plain steps the verifier may run after a job that drafts
// nothing (verify_msg::run_ahead): SessionCore::run_ahead_limit() says
// which requests may (plain ones, and speculative ones the load policy
// keeps plain). Not across nodes: a session notices a cut-off target only
// by its requests' timeouts.
int32_t session_run_ahead(session_ptr self) {
    auto& s = self->state;
    const int32_t chunk = s.rt->config.run_ahead;
    if (chunk <= 0 || s.rt->clustered) return 0;
    return std::min(chunk, s.core->run_ahead_limit());
}

// Sends one job (the prefill, or [pending, drafts]) to the verifier and
// feeds its outcome to the core; then the next step.
void session_run_job(session_ptr self, VerifyJob job, int32_t run_ahead) {
    auto& s = self->state;
    verify_msg m;
    m.request = s.request;
    m.prefill = job.prefill;
    m.tokens = std::move(job.tokens);
    m.n_draft = job.n_draft;
    m.has_probs = job.draft_has_probs;
    if (job.draft_has_probs) m.probs = pack_probs(job.draft_probs);
    m.sampling = job.sampling;
    m.rng = rng_to_wire(job.rng);
    m.run_ahead = job.n_draft == 0 ? run_ahead : 0;
    m.stop_at_eos = s.core->params().stop_at_eos;
    const bool prefill = job.prefill;
    const uint64_t epoch = s.verify_epoch;
    s.run_ahead_epoch = epoch;
    ask(self, s.place->verifier, std::move(m),
        [self, prefill, epoch](verify_result& r) {
            auto& s = self->state;
            if (s.ended || epoch != s.verify_epoch) return;
            session_on_result(self, r, prefill);
        },
        [self, epoch](caf::error& e) {
            auto& s = self->state;
            if (s.ended || epoch != s.verify_epoch) return;
            if (s.rt->clustered) return session_target_lost(self, self->system().render(e));
            session_fail(self, "internal", "the verifier failed: " + self->system().render(e));
        });
}

void session_send_verify(session_ptr self) {
    auto& s = self->state;
    VerifyJob job = s.core->verify_job(s.request, 0);
    s.verifying.assign(job.tokens.begin() + 1, job.tokens.end());
    if (job.n_draft == 0) s.bonus_guess = -1;
    const int32_t k = job.n_draft;
    session_run_job(self, std::move(job), k == 0 ? session_run_ahead(self) : 0);
    // Pipelining: while the target verifies, the draft already works on the
    // next step as if everything is accepted and the bonus token is its guess.
    if (s.pipelined && k > 0 && s.bonus_guess >= 0 && s.place->drafter) session_send_draft(self, k, true);
}

// A draft arrived (fresh or prefetched) for a step that wants k tokens:
// when it has more, the first one beyond k is the guess of the bonus token.
void session_take_draft(session_ptr self, DraftOutcome o, int32_t k) {
    auto& s = self->state;
    s.bonus_guess = -1;
    if (s.pipelined) {
        if (static_cast<int32_t>(o.draft.tokens.size()) > k) {
            s.bonus_guess = o.draft.tokens[static_cast<size_t>(k)];
            o.draft.tokens.resize(static_cast<size_t>(k));
            if (o.draft.has_probs && o.draft.probs.size() > static_cast<size_t>(k)) o.draft.probs.resize(static_cast<size_t>(k));
        }
        o.rng = s.core->rng_state();  // the draft used its own stream; the acceptance stream goes on unchanged
    }
    s.core->on_draft(o);
    session_send_verify(self);
}

DraftOutcome outcome_from_wire(draft_result& r, const RngState& fallback) {
    DraftOutcome o;
    o.draft.tokens = std::move(r.tokens);
    o.draft.has_probs = r.has_probs;
    try {
        if (r.has_probs) o.draft.probs = unpack_probs(r.probs);
        o.rng = rng_from_wire(r.rng);
    } catch (const Error&) {
        o.draft.clear();
        o.rng = fallback;
    }
    o.step_ms = r.step_ms;
    return o;
}

// Asks the draft for the next step (prefetch: the step after the one being
// verified, under the full-acceptance assumption). Only the change of the
// context since the last request travels (draft_msg).
void session_send_draft(session_ptr self, int32_t k, bool prefetch) {
    auto& s = self->state;
    DraftJob job = s.core->draft_job(s.request, 0, k);
    std::vector<int32_t> assumed;
    if (prefetch) {
        assumed = s.verifying;
        assumed.push_back(s.bonus_guess);
        job.context.insert(job.context.end(), assumed.begin(), assumed.end());
    }
    ContextUpdate u = make_context_update(s.draft_sent, job.context);
    draft_msg m;
    m.request = s.request;
    m.keep = u.keep;
    m.tail = std::move(u.tail);
    m.k = s.pipelined ? k + 1 : k;  // pipelined: one more, the guess of the bonus token
    m.p_min = job.p_min;
    m.sampling = job.sampling;
    const uint64_t id = ++s.draft_jobs;
    m.rng = rng_to_wire(s.pipelined ? s.core->draft_rng(id) : job.rng);
    if (prefetch) {
        s.prefetch = Prefetch{};
        s.prefetch.active = true;
        s.prefetch.id = id;
        s.prefetch.assumed = std::move(assumed);
    } else {
        s.waiting_draft = id;
        s.waiting_k = k;
    }
    ask(self, s.place->drafter, std::move(m),
        [self, id, prefetch](draft_result& r) {
            auto& s = self->state;
            if (s.ended) return;
            if (prefetch) {
                if (!s.prefetch.active || s.prefetch.id != id) return;  // discarded
                if (r.resync) {
                    s.draft_sent.clear();
                    s.prefetch = Prefetch{};
                    if (s.awaiting_prefetch) {
                        s.awaiting_prefetch = false;
                        session_send_draft(self, s.prefetch_k, false);
                    }
                    return;
                }
                s.prefetch.ready = true;
                s.prefetch.outcome = outcome_from_wire(r, s.core->rng_state());
                if (s.awaiting_prefetch) {
                    s.awaiting_prefetch = false;
                    DraftOutcome o = std::move(s.prefetch.outcome);
                    s.prefetch = Prefetch{};
                    session_take_draft(self, std::move(o), s.prefetch_k);
                }
                return;
            }
            if (s.waiting_draft != id) return;
            s.waiting_draft = 0;
            if (r.resync) {
                // The draft doesn't hold our context (it restarted, or a full
                // send was refused): send it whole; a refused full send is no draft.
                const bool was_full = s.draft_sent.empty();
                s.draft_sent.clear();
                if (!was_full) return session_send_draft(self, s.waiting_k, false);
                r = draft_result{};
            }
            session_take_draft(self, outcome_from_wire(r, s.core->rng_state()), s.waiting_k);
        },
        [self, id, prefetch](caf::error& e) {
            auto& s = self->state;
            if (s.ended) return;
            if (prefetch ? (s.prefetch.active && s.prefetch.id == id) : s.waiting_draft == id)
                session_draft_lost(self, self->system().render(e));
        });
}

void session_step(session_ptr self) {
    auto& s = self->state;
    const int32_t k = s.core->next_k();
    if (k <= 0 || !s.place->drafter) {
        s.prefetch = Prefetch{};
        return session_send_verify(self);
    }
    if (s.prefetch.active) {
        // Every token was accepted and the bonus was the guess: the
        // prefetched draft continues exactly this history.
        if (s.prefetch.ready) {
            DraftOutcome o = std::move(s.prefetch.outcome);
            s.prefetch = Prefetch{};
            return session_take_draft(self, std::move(o), k);
        }
        s.awaiting_prefetch = true;
        s.prefetch_k = k;
        return;
    }
    session_send_draft(self, k, false);
}

void session_acquire(session_ptr self) {
    auto& s = self->state;
    kv_acquire a;
    a.request = s.request;
    a.target_positions = s.core->max_positions();
    // In one process the KV manager also admits the draft's blocks; a draft
    // node skips a request whose blocks it lacks (no draft that step).
    a.draft_positions = (s.core->speculative() && !s.rt->clustered && s.rt->draft) ? s.core->max_positions() : 0;
    const uint64_t epoch = s.verify_epoch;
    ask(self, s.place->kv, a,
        [self, epoch](kv_grant& g) {
            auto& s = self->state;
            if (s.ended || epoch != s.verify_epoch) return;
            if (!g.ok) return session_fail(self, "overloaded", g.error);
            s.kv_held = true;
            // A plain request runs ahead from its first token; a
            // speculative one drafts after it (run_ahead_limit() is 0).
            session_run_job(self, s.core->prefill_job(s.request, 0), session_run_ahead(self));
        },
        [self, epoch](caf::error& e) {
            auto& s = self->state;
            if (s.ended || epoch != s.verify_epoch) return;
            if (s.rt->clustered) return session_target_lost(self, self->system().render(e));
            session_fail(self, "internal", "the KV cache manager failed: " + self->system().render(e));
        });
}

void session_start(session_ptr self, generate_request& req) {
    auto& s = self->state;
    const RuntimeShared& rt = *s.rt;
    if (rt.draining) return session_fail(self, "draining", "the server is shutting down; retry on another instance");
    if (!req.model.empty() && req.model != rt.config.effective_model_name())
        return session_fail(self, "unknown_model", "unknown model \"" + utf8_excerpt(req.model, 100) + "\"; this server has \"" +
                                                       rt.config.effective_model_name() + "\"");
    std::vector<int32_t> prompt = req.prompt_tokens;
    const Tokenizer& tok = rt.target->tokenizer();
    if (prompt.empty()) {
        if (req.prompt.empty()) return session_fail(self, "invalid_request", "the prompt is empty");
        prompt = tok.encode(req.prompt, true, req.parse_special);
    }
    for (int32_t t : prompt) {
        if (t < 0 || t >= tok.n_vocab())
            return session_fail(self, "invalid_request", "prompt token " + std::to_string(t) + " is outside the vocabulary");
    }
    if (req.sampling.temperature < 0.0f)
        return session_fail(self, "invalid_request", "temperature must be >= 0 (0: greedy), got " + std::to_string(req.sampling.temperature));
    if (req.max_tokens < 1) return session_fail(self, "invalid_request", "max_tokens must be >= 1, got " + std::to_string(req.max_tokens));
    if (static_cast<int64_t>(prompt.size()) + req.max_tokens > rt.n_ctx && static_cast<int32_t>(prompt.size()) >= rt.n_ctx)
        return session_fail(self, "context_exceeded", "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                                          std::to_string(rt.n_ctx));
    GenerationParams gp;
    gp.max_tokens = req.max_tokens;
    gp.sampling = req.sampling;
    gp.stop_at_eos = req.stop_at_eos;
    gp.stop = req.stop;
    SpeculativeParams sp;
    sp.draft_max = req.draft_max >= 0 ? req.draft_max : rt.spec_draft_max.load();
    sp.adaptive = req.adaptive >= 0 ? req.adaptive != 0 : rt.spec_adaptive.load();
    const bool speculative = req.speculative >= 0 ? req.speculative != 0 : rt.spec_enabled.load();
    LoadPolicy load_policy = rt.config.load_policy();
    load_policy.probe = &s.rt->step_probe;
    try {
        s.core = std::make_unique<SessionCore>(tok, std::move(prompt), gp, sp, speculative, rt.n_ctx, load_policy);
    } catch (const Error& e) {
        const std::string what = e.what();
        return session_fail(self, what.find("context") != std::string::npos ? "context_exceeded" : "invalid_request", what);
    }
    if (s.core->speculative()) {
        std::lock_guard<std::mutex> lock(s.rt->learned_mu);
        if (s.rt->learned_controller) s.core->seed_controller(*s.rt->learned_controller);
    }
    if (req.timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(req.timeout_ms), timeout_atom::value);

    s.pipelined = rt.pipeline;
    if (!place_target(*s.rt, *s.place, -1))
        return session_fail(self, "unavailable", "no target node is reachable (" + rt.config.target_nodes + "); retry later");
    if (s.core->speculative()) place_draft(*s.rt, *s.place);
    if (rt.clustered) {
        // A node that dies sends a down message at once (TCP reset); one
        // that is cut off is caught by the request timeouts.
        self->monitor(s.place->verifier);
        if (s.place->drafter) self->monitor(s.place->drafter);
        log::debug("request placed", {{"request", s.id}, {"target", s.place->target_address}, {"draft", s.place->draft_address}});
    }
    if (s.core->speculative() && !s.place->drafter) s.core->disable_speculation();
    session_acquire(self);
}

session_actor::behavior_type session_fun(session_ptr self, std::shared_ptr<RuntimeShared> rt, generate_request req,
                                         EventSink sink, uint64_t request) {
    auto& s = self->state;
    s.rt = rt;
    s.sink = std::move(sink);
    s.id = req.id;
    s.request = request;
    s.t_submit = now_ms();
    // Whatever ends the session frees its KV blocks (the KV manager also
    // closes the verifier's sequence, and in one process the draft's) and,
    // on nodes, the draft node's sequence.
    std::weak_ptr<RuntimeShared> weak = rt;
    self->attach_functor([weak, place = s.place, request]() {
        if (place->kv) caf::anon_send(place->kv, release_atom::value, request);
        if (place->remote && place->drafter) caf::anon_send(place->drafter, close_atom::value, request);
        if (auto shared = weak.lock()) {
            unplace_target(*shared, *place);
            unplace_draft(*shared, *place);
        }
    });
    self->set_down_handler([self](caf::down_msg& dm) {
        auto& s = self->state;
        if (s.ended) return;
        const std::string why = "node down: " + self->system().render(dm.reason);
        if (s.place->verifier && dm.source == s.place->verifier.address()) session_target_lost(self, why);
        else if (s.place->drafter && dm.source == s.place->drafter.address()) session_draft_lost(self, why);
    });
    try {
        session_start(self, req);
    } catch (const std::exception& e) {
        session_fail(self, "internal", e.what());
    }
    return {
        // A plain step the verifier ran ahead (its result comes after the
        // reply to the job it ran ahead from, in order: one sender).
        [self](verify_result& r) {
            auto& s = self->state;
            if (s.ended || !s.running_ahead || s.run_ahead_epoch != s.verify_epoch) return;
            session_on_result(self, r, false);
        },
        [self](cancel_atom) {
            auto& s = self->state;
            if (s.ended) return;
            if (!s.core) return session_end(self);
            s.core->cancel();
            session_flush(self);
        },
        [self](timeout_atom) {
            session_fail(self, "timeout", "the request's deadline passed before it finished");
        },
    };
}

// -------------------------------------------------------- cluster ---
// The gateway's membership and health checks. Each tick it connects to the
// nodes that are down (a restarted node rejoins this way), and asks the up
// ones for a health answer within node_timeout_ms (a target's KV stats,
// which also feed placement). A node is down on a down message of any of
// its actors (CAF sees the connection close), a failed check, or an
// unanswered one (cut off).

struct cluster_state {
    static inline const char* name = "specd.cluster";
};
using cluster_ptr = cluster_actor::stateful_pointer<cluster_state>;

template <class Replica>
void mark_down(Replica& r, const std::string& role, const std::string& why) {
    if (r.up) log::warn("node down", {{"node", r.address}, {"role", role}, {"error", why}});
    r.up = false;
    r.last_error = why;
}

void cluster_connect(cluster_ptr self, const std::shared_ptr<RuntimeShared>& rt, bool target, size_t index) {
    NodeAddress where;
    {
        std::lock_guard<std::mutex> lock(rt->mu);
        if (target) {
            auto& r = rt->targets[index];
            if (r.up || r.connecting) return;
            r.connecting = true;
            where = r.address_parts;
        } else {
            auto& r = rt->drafts[index];
            if (r.up || r.connecting) return;
            r.connecting = true;
            where = r.address_parts;
        }
    }
    const auto timeout = std::chrono::milliseconds(rt->config.node_timeout_ms);
    auto failed = [rt, target, index](const std::string& why) {
        std::lock_guard<std::mutex> lock(rt->mu);
        if (target) {
            auto& r = rt->targets[index];
            r.connecting = false;
            if (r.last_error != why) log::debug("node unreachable", {{"node", r.address}, {"error", why}});
            mark_down(r, "target", why);
        } else {
            auto& r = rt->drafts[index];
            r.connecting = false;
            mark_down(r, "draft", why);
        }
    };
    auto mm = self->system().middleman().actor_handle();
    self->request(mm, timeout, caf::connect_atom::value, where.host, where.port)
        .then(
            [self, rt, target, index, failed, timeout](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
                if (!ptr) return failed("no actor is published there");
                auto node = caf::actor_cast<node_actor>(ptr);
                self->request(node, timeout, hello_atom::value)
                    .then(
                        [self, rt, target, index, failed, node](node_hello& h) {
                            const std::string want = target ? "target" : "draft";
                            if (h.role != want) return failed("it is a " + h.role + " node, listed as a " + want + " node");
                            const int32_t n_vocab = rt->target->tokenizer().n_vocab();
                            if (h.n_vocab != n_vocab)
                                return failed("its model " + h.model + " has " + std::to_string(h.n_vocab) + " tokens; the gateway's has " +
                                              std::to_string(n_vocab));
                            if (target && (!h.verifier || !h.kv)) return failed("it sent no verifier / KV manager");
                            if (!target && !h.drafter) return failed("it sent no draft actor");
                            std::lock_guard<std::mutex> lock(rt->mu);
                            if (target) {
                                auto& r = rt->targets[index];
                                r.node = node;
                                r.verifier = caf::actor_cast<verifier_actor>(h.verifier);
                                r.kv = caf::actor_cast<kv_manager_actor>(h.kv);
                                r.connecting = false;
                                r.up = true;
                                r.last_error.clear();
                                ++r.joins;
                                self->monitor(r.verifier);
                                self->monitor(r.kv);
                                log::info("node up", {{"node", r.address}, {"role", "target"}, {"model", h.model}, {"n_ctx", h.n_ctx}});
                            } else {
                                auto& r = rt->drafts[index];
                                r.node = node;
                                r.drafter = caf::actor_cast<draft_actor>(h.drafter);
                                r.connecting = false;
                                r.up = true;
                                r.last_error.clear();
                                ++r.joins;
                                self->monitor(r.drafter);
                                log::info("node up", {{"node", r.address}, {"role", "draft"}, {"model", h.model}});
                            }
                            self->monitor(node);
                        },
                        [self, failed](caf::error& e) { failed("no answer to hello: " + self->system().render(e)); });
            },
            [self, failed](caf::error& e) { failed(self->system().render(e)); });
}

void cluster_check(cluster_ptr self, const std::shared_ptr<RuntimeShared>& rt) {
    const auto timeout = std::chrono::milliseconds(rt->config.node_timeout_ms);
    std::vector<std::pair<size_t, kv_manager_actor>> targets;
    std::vector<std::pair<size_t, node_actor>> drafts;
    size_t n_targets = 0, n_drafts = 0;
    {
        std::lock_guard<std::mutex> lock(rt->mu);
        n_targets = rt->targets.size();
        n_drafts = rt->drafts.size();
        for (size_t i = 0; i < n_targets; ++i)
            if (rt->targets[i].up) targets.emplace_back(i, rt->targets[i].kv);
        for (size_t i = 0; i < n_drafts; ++i)
            if (rt->drafts[i].up) drafts.emplace_back(i, rt->drafts[i].node);
    }
    for (size_t i = 0; i < n_targets; ++i) cluster_connect(self, rt, true, i);
    for (size_t i = 0; i < n_drafts; ++i) cluster_connect(self, rt, false, i);
    for (auto& [i, kv] : targets) {
        self->request(kv, timeout, stats_atom::value)
            .then(
                [rt, i = i](runtime_stats& st) {
                    std::lock_guard<std::mutex> lock(rt->mu);
                    auto& r = rt->targets[i];
                    r.kv_free = st.kv_target_free;
                    r.kv_blocks = st.kv_target_blocks;
                    r.waiting = st.waiting;
                },
                [self, rt, i = i](caf::error& e) {
                    std::lock_guard<std::mutex> lock(rt->mu);
                    mark_down(rt->targets[i], "target", "health check: " + self->system().render(e));
                });
    }
    for (auto& [i, node] : drafts) {
        self->request(node, timeout, hello_atom::value)
            .then([](node_hello&) {},
                  [self, rt, i = i](caf::error& e) {
                      std::lock_guard<std::mutex> lock(rt->mu);
                      mark_down(rt->drafts[i], "draft", "health check: " + self->system().render(e));
                  });
    }
}

void cluster_add(const std::shared_ptr<RuntimeShared>& rt, bool target, const NodeAddress& a) {
    std::lock_guard<std::mutex> lock(rt->mu);
    if (target) {
        for (auto& r : rt->targets)
            if (r.address == a.text()) return;
        TargetReplica r;
        r.address_parts = a;
        r.address = a.text();
        r.last_error = "not connected yet";
        rt->targets.push_back(std::move(r));
    } else {
        for (auto& r : rt->drafts)
            if (r.address == a.text()) return;
        DraftReplica r;
        r.address_parts = a;
        r.address = a.text();
        r.last_error = "not connected yet";
        rt->drafts.push_back(std::move(r));
    }
}

cluster_actor::behavior_type cluster_fun(cluster_ptr self, std::shared_ptr<RuntimeShared> rt) {
    self->set_down_handler([self, rt](caf::down_msg& dm) {
        const std::string why = "connection lost: " + self->system().render(dm.reason);
        std::lock_guard<std::mutex> lock(rt->mu);
        for (auto& r : rt->targets)
            if (r.up && (dm.source == r.verifier.address() || dm.source == r.kv.address() || dm.source == r.node.address()))
                mark_down(r, "target", why);
        for (auto& r : rt->drafts)
            if (r.up && (dm.source == r.drafter.address() || dm.source == r.node.address())) mark_down(r, "draft", why);
    });
    self->send(self, tick_atom::value);
    return {
        [self, rt](tick_atom) {
            if (rt->stopping) return;
            cluster_check(self, rt);
            self->delayed_send(self, std::chrono::milliseconds(rt->config.health_interval_ms), tick_atom::value);
        },
        [self, rt](join_atom, const std::string& role, const std::string& host, uint16_t port) {
            if (role != "target" && role != "draft") return;
            log::info("node asks to join", {{"node", host + ":" + std::to_string(port)}, {"role", role}});
            cluster_add(rt, role == "target", NodeAddress{host, port});
            cluster_check(self, rt);
        },
    };
}

// ----------------------------------------------------------- node ---

node_actor::behavior_type node_fun(node_actor::pointer, std::shared_ptr<RuntimeShared> rt) {
    return {
        [rt](hello_atom) -> node_hello {
            node_hello h;
            h.role = rt->node_role;
            h.model = rt->config.effective_model_name();
            const LlamaModel& m = rt->target ? *rt->target : *rt->draft;
            h.n_vocab = m.tokenizer().n_vocab();
            h.n_ctx = rt->n_ctx;
            if (auto v = rt->current_verifier()) h.verifier = caf::actor_cast<caf::actor>(v);
            if (rt->kv) h.kv = caf::actor_cast<caf::actor>(rt->kv);
            if (auto d = rt->current_drafter()) h.drafter = caf::actor_cast<caf::actor>(d);
            return h;
        },
    };
}

void spawn_verifier(const std::shared_ptr<RuntimeShared>& rt);

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

void spawn_verifier(const std::shared_ptr<RuntimeShared>& rt) {
    auto v = rt->system->spawn<caf::detached>(verifier_fun, rt);
    {
        std::lock_guard<std::mutex> lock(rt->mu);
        rt->verifier = v;
    }
    watch_verifier(rt, v);
}

}  // namespace

// ---------------------------------------------------------- Runtime ---

Runtime::Runtime(std::shared_ptr<RuntimeShared> shared) : shared_(std::move(shared)) {}

namespace {
// Stops whichever of the runtime's long-lived actors this process has.
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
}  // namespace

namespace {

// What a process runs: everything (one process), a gateway (sessions only;
// it loads the target file for its tokenizer), or one node role.
enum class Build { local, gateway, target_node, draft_node };

// Loads the models this build needs and sizes their thread pools and KV
// pools; spawns nothing.
std::shared_ptr<RuntimeShared> build_shared(caf::actor_system& system, const RuntimeConfig& config, Build build) {
    config.validate();
    auto rt = std::make_shared<RuntimeShared>();
    rt->config = config;
    rt->system = &system;
    rt->spec_enabled = config.enable_speculative;
    rt->spec_draft_max = config.draft_max;
    rt->spec_adaptive = config.adaptive;
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
            rt->spec_enabled = false;
        }
    }
    const LlamaModel& primary = rt->target ? *rt->target : *rt->draft;
    const int32_t n_ctx_train = primary.hparams().n_ctx_train;
    rt->n_ctx = config.n_ctx > 0 ? std::min(config.n_ctx, n_ctx_train) : n_ctx_train;
    if (build == Build::gateway) return rt;  // no compute here

    const int threads = config.threads_target > 0 ? config.threads_target : ThreadPool::hardware_threads();
    // The draft gets its own pool, so its phase of some sessions overlaps
    // the verify phase of others; by default as wide as the target's (when
    // the phases don't overlap, each gets every core). Unless the two would
    // need more threads than the machine has: then they share the target's
    // pool and take turns. Two busy pools of spinning threads on too few
    // cores stall each other's barriers (stories15M, 2 cores: 2 sessions
    // with speculation ran at 0.64x of plain with two pools).
    const int draft_threads = config.threads_draft > 0 ? config.threads_draft : threads;
    const bool share_pool = rt->draft && rt->target && config.threads_draft == 0 && threads + draft_threads > ThreadPool::hardware_threads();
    // Pinning: the target pool takes the first allowed CPUs, a draft pool of
    // its own the next ones. Unpinned, a verifier or draft thread woken by a
    // session often landed on the core where a pool worker still spun, and
    // the two shared it until the scheduler moved one (stories15M, 2 cores,
    // one session: drafting took 1.06 ms a token against 0.86 ms).
    // The verifier and draft threads of a shared pool both pin to its first
    // core, which is right while they take turns; pipelined drafts can run
    // them at once, so a shared pool then stays unpinned.
    const int compute_threads = (rt->target ? threads : 0) + (rt->draft && !share_pool ? draft_threads : 0);
    const std::string affinity = share_pool && config.pipeline_drafts == "on" ? "off" : config.cpu_affinity;
    auto cpus_from = [&](int first, int n) { return ThreadPool::affinity_cpus(affinity, compute_threads, first, n); };
    if (rt->target) rt->target_pool = std::make_unique<ThreadPool>(threads, config.compute_nice, cpus_from(0, threads));
    ThreadPool* draft_pool = nullptr;
    if (rt->draft) {
        if (share_pool) {
            draft_pool = rt->target_pool.get();
            rt->shared_pool = true;
        } else {
            rt->draft_pool = std::make_unique<ThreadPool>(draft_threads, config.compute_nice,
                                                          cpus_from(rt->target ? threads : 0, draft_threads));
            draft_pool = rt->draft_pool.get();
        }
    }
    rt->backends = BackendFactory::create(config, rt->target.get(), rt->draft.get(), rt->target_pool.get(), draft_pool);

    // KV pools: KV_CACHE_RATIO of the budget, split between target and
    // draft by their bytes per block (both get the same block count), and
    // no more than max_sequences full contexts.
    {
        size_t block_bytes = 0;
        int32_t shape_blocks = 0, block_size = 1;
        // The config validated the name (f16 or f32); a GPU keeps its own 16-bit pools.
        const TensorType kv_type = tensor_type_from_name(config.kv_cache_type).value_or(TensorType::F16);
        const int64_t budget = config.memory_budget_bytes > 0 ? config.memory_budget_bytes : rt->backends->kv_memory_bytes(available_ram_bytes());
        // ctx_size 0: the trained length capped by what the budget holds (engine/context_plan.h).
        int64_t token_bytes = 0;  // target + draft KV bytes per position, as the backend stores them
        for (const LlamaModel* m : {rt->target.get(), rt->draft.get()}) {
            if (!m) continue;
            KvCacheShape one = ForwardBackend::kv_shape_for(*m, 1, 1, 1);
            one.type = kv_type;
            token_bytes += static_cast<int64_t>(rt->backends->kv_block_bytes(one));
        }
        const ContextPlan plan = plan_context({.requested = config.n_ctx, .n_ctx_train = n_ctx_train, .kv_cache_ratio = config.kv_cache_ratio,
                                               .budget_bytes = budget, .kv_bytes_per_token = token_bytes, .max_sequences = config.max_sequences,
                                               .block_size = 16, .kv_type = config.kv_cache_type});
        rt->n_ctx = plan.n_ctx;
        log::info("context", {{"n_ctx", plan.n_ctx}, {"why", plan.reason}});
        if (rt->target) {
            rt->target_shape = ForwardBackend::kv_shape_for(*rt->target, rt->n_ctx, config.max_sequences);
            rt->target_shape.type = kv_type;
            block_bytes += rt->backends->kv_block_bytes(rt->target_shape);
            shape_blocks = rt->target_shape.n_blocks;
            block_size = rt->target_shape.block_size;
        }
        if (rt->draft) {
            rt->draft_shape = ForwardBackend::kv_shape_for(*rt->draft, rt->n_ctx, config.max_sequences);
            rt->draft_shape.type = kv_type;
            block_bytes += rt->backends->kv_block_bytes(rt->draft_shape);
            if (!rt->target) {
                shape_blocks = rt->draft_shape.n_blocks;
                block_size = rt->draft_shape.block_size;
            }
        }
        const int64_t kv_bytes = static_cast<int64_t>(config.kv_cache_ratio * static_cast<double>(budget));
        const int64_t affordable = kv_bytes / static_cast<int64_t>(block_bytes);
        const int32_t per_seq = (rt->n_ctx + block_size - 1) / block_size;
        if (affordable < per_seq)
            throw Error("KV cache budget too small: " + std::to_string(kv_bytes) + " bytes (KV_CACHE_RATIO " +
                        std::to_string(config.kv_cache_ratio) + " of " + std::to_string(budget) + ") hold " +
                        std::to_string(affordable) + " blocks; one context needs " + std::to_string(per_seq));
        const int32_t n_blocks = static_cast<int32_t>(std::min<int64_t>(affordable, shape_blocks));
        if (rt->target) rt->target_shape.n_blocks = n_blocks;
        if (rt->draft) rt->draft_shape.n_blocks = n_blocks;
    }
    return rt;
}

}  // namespace

std::unique_ptr<Runtime> Runtime::create(caf::actor_system& system, const RuntimeConfig& config) {
    const bool clustered = !parse_node_list(config.target_nodes, "target_nodes").empty();
    if (clustered && !system.has_middleman())
        throw Error("a multi-node gateway needs CAF's network layer: call specd::configure_network(cfg) before creating the actor system");
    auto rt = build_shared(system, config, clustered ? Build::gateway : Build::local);
    const bool draft_nodes = !parse_node_list(config.draft_nodes, "draft_nodes").empty();
    rt->pipeline = config.pipeline_drafts == "on" || (config.pipeline_drafts == "auto" && clustered && draft_nodes);
    if (!clustered) {
        if (!rt->pipeline) rt->rendezvous = std::make_shared<PhaseRendezvous>(rt->shared_pool);
        spawn_verifier(rt);
        rt->drafter = system.spawn<caf::detached>(draft_fun, rt);
        rt->kv = system.spawn(kv_fun, rt);
        return std::unique_ptr<Runtime>(new Runtime(rt));
    }
    rt->clustered = true;
    // Nodes key sequences by request id, and several gateways may share
    // them: each gateway numbers its requests from a random 32-bit prefix.
    rt->next_request = (static_cast<uint64_t>(std::random_device{}()) << 32) | 1u;
    for (const NodeAddress& a : parse_node_list(config.target_nodes, "target_nodes")) cluster_add(rt, true, a);
    for (const NodeAddress& a : parse_node_list(config.draft_nodes, "draft_nodes")) cluster_add(rt, false, a);
    rt->cluster = system.spawn(cluster_fun, rt);
    if (config.cluster_port >= 0) {
        auto port = system.middleman().publish(rt->cluster, static_cast<uint16_t>(config.cluster_port), config.host.c_str(), true);
        if (!port) {
            caf::anon_send_exit(rt->cluster, caf::exit_reason::user_shutdown);
            throw Error("cannot open the cluster port " + config.host + ":" + std::to_string(config.cluster_port) + ": " +
                        system.render(port.error()));
        }
        rt->cluster_port = *port;
    }
    // Give the listed nodes one health interval (at least 2 s) to connect,
    // so the first requests find them.
    const double deadline = now_ms() + std::max(2000, config.health_interval_ms);
    while (now_ms() < deadline) {
        bool all = true;
        {
            std::lock_guard<std::mutex> lock(rt->mu);
            for (auto& r : rt->targets) all = all && (r.up || (!r.connecting && r.last_error != "not connected yet"));
            for (auto& r : rt->drafts) all = all && (r.up || (!r.connecting && r.last_error != "not connected yet"));
        }
        if (all) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::unique_ptr<Runtime>(new Runtime(rt));
}

Runtime::~Runtime() { shutdown(); }

namespace {
session_actor spawn_session(const std::shared_ptr<RuntimeShared>& shared, generate_request request, EventSink sink) {
    const uint64_t key = shared->next_request++;
    auto session = shared->system->spawn(session_fun, shared, std::move(request), std::move(sink), key);
    ++shared->active;
    std::weak_ptr<RuntimeShared> weak = shared;
    auto ptr = caf::actor_cast<caf::strong_actor_ptr>(session);
    {
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->sessions.insert(ptr);
    }
    session->attach_functor([weak, ptr]() {
        if (auto rt = weak.lock()) {
            --rt->active;
            std::lock_guard<std::mutex> lock(rt->mu);
            rt->sessions.erase(ptr);
        }
    });
    return session;
}
}  // namespace

session_actor Runtime::submit(generate_request request, caf::actor sink) {
    return spawn_session(shared_, std::move(request), EventSink{std::move(sink), nullptr});
}

session_actor Runtime::submit(generate_request request, RuntimeCallbacks callbacks) {
    return spawn_session(shared_, std::move(request),
                         EventSink{caf::actor{}, std::make_shared<const RuntimeCallbacks>(std::move(callbacks))});
}

GenerateResult Runtime::generate(generate_request request) {
    caf::scoped_actor self{*shared_->system};
    submit(std::move(request), caf::actor{self});
    GenerateResult result;
    bool running = true;
    while (running) {
        self->receive(
            [&](token_event& e) {
                ++result.token_events;
                result.tokens.insert(result.tokens.end(), e.tokens.begin(), e.tokens.end());
                result.from_draft.insert(result.from_draft.end(), e.from_draft.begin(), e.from_draft.end());
                result.text += e.text;
            },
            [&](done_event& e) {
                result.ok = true;
                result.done = std::move(e);
                running = false;
            },
            [&](error_event& e) {
                result.error = std::move(e);
                running = false;
            });
    }
    return result;
}

void Runtime::cancel(const session_actor& session) {
    if (session) caf::anon_send(session, cancel_atom::value);
}

runtime_stats Runtime::stats() {
    runtime_stats out;
    if (shared_->clustered) {
        // The targets' figures from their last health check, summed.
        std::lock_guard<std::mutex> lock(shared_->mu);
        for (const auto& r : shared_->targets) {
            if (!r.up) continue;
            out.kv_target_blocks += r.kv_blocks;
            out.kv_target_free += r.kv_free;
            out.running += r.sessions;
            out.waiting += r.waiting;
        }
        return out;
    }
    caf::scoped_actor self{*shared_->system};
    self->request(shared_->kv, std::chrono::seconds(10), stats_atom::value)
        .receive([&](runtime_stats& s) { out = s; }, [&](caf::error&) {});
    return out;
}

int32_t Runtime::active_sessions() const { return shared_->active; }
std::vector<gpu::GpuDeviceStats> Runtime::gpu_stats() const {
    return shared_->backends ? shared_->backends->gpu_stats() : std::vector<gpu::GpuDeviceStats>{};
}
const RuntimeConfig& Runtime::config() const { return shared_->config; }
std::string Runtime::model_name() const { return shared_->config.effective_model_name(); }
const Tokenizer& Runtime::tokenizer() const { return shared_->target->tokenizer(); }
std::string Runtime::chat_template_text() const {
    return shared_->target->file().get_string_opt("tokenizer.chat_template").value_or("");
}
int32_t Runtime::n_ctx() const { return shared_->n_ctx; }
bool Runtime::has_draft_model() const {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->draft != nullptr || !shared_->drafts.empty();
}

std::vector<NodeStatus> Runtime::cluster() const {
    std::vector<NodeStatus> out;
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (const auto& r : shared_->targets)
        out.push_back(NodeStatus{r.address, "target", r.up, r.sessions, r.served, r.kv_free, r.kv_blocks, r.waiting, r.joins, r.last_error});
    for (const auto& r : shared_->drafts)
        out.push_back(NodeStatus{r.address, "draft", r.up, r.sessions, r.served, 0, 0, 0, r.joins, r.last_error});
    return out;
}

uint16_t Runtime::cluster_port() const { return shared_->cluster_port; }
verifier_actor Runtime::verifier() const { return shared_->current_verifier(); }
draft_actor Runtime::drafter() const { return shared_->current_drafter(); }
int32_t Runtime::verifier_restarts() const { return shared_->verifier_restarts; }
bool Runtime::draining() const { return shared_->draining; }
const std::string& Runtime::draft_load_error() const { return shared_->draft_load_error; }

void Runtime::set_speculation(const SpeculationSettings& s) {
    if (s.draft_max < 0 || s.draft_max > 64) throw Error("draft_max must be in 0..64, got " + std::to_string(s.draft_max));
    shared_->spec_enabled = s.enabled;
    shared_->spec_draft_max = s.draft_max;
    shared_->spec_adaptive = s.adaptive;
}

SpeculationSettings Runtime::speculation() const {
    return SpeculationSettings{shared_->spec_enabled.load(), shared_->spec_draft_max.load(), shared_->spec_adaptive.load()};
}

void Runtime::shutdown() {
    if (shared_->stopping.exchange(true)) return;
    shared_->draining = true;
    std::vector<caf::strong_actor_ptr> sessions;
    {
        std::lock_guard<std::mutex> lock(shared_->mu);
        sessions.assign(shared_->sessions.begin(), shared_->sessions.end());
    }
    for (auto& s : sessions) caf::anon_send(caf::actor_cast<session_actor>(s), cancel_atom::value);
    caf::scoped_actor self{*shared_->system};
    // Sessions end at once on cancel (they flush a done event); wait a little for them.
    for (auto& s : sessions) {
        auto h = caf::actor_cast<caf::actor>(s);
        self->monitor(h);
    }
    size_t remaining = sessions.size();
    while (remaining > 0) {
        bool timed_out = false;
        self->receive([&](caf::down_msg&) { --remaining; },
                      caf::after(std::chrono::seconds(5)) >> [&] { timed_out = true; });
        if (timed_out) break;
    }
    stop_actors(*shared_, self);
}

StandaloneRuntime::StandaloneRuntime(const RuntimeConfig& config) {
    cfg_ = std::make_unique<caf::actor_system_config>();
    register_types(*cfg_);
    configure_low_latency(*cfg_);
    if (!config.target_nodes.empty()) configure_network(*cfg_);
    system_ = std::make_unique<caf::actor_system>(*cfg_);
    runtime_ = Runtime::create(*system_, config);
}

StandaloneRuntime::~StandaloneRuntime() {
    runtime_.reset();
}

}  // namespace specd

// ------------------------------------------------------------- Node ---

namespace specd {

std::unique_ptr<Node> Node::start(caf::actor_system& system, const RuntimeConfig& config, NodeRole role, const std::string& host,
                                  uint16_t port) {
    if (!system.has_middleman())
        throw Error("a node needs CAF's network layer: call specd::configure_network(cfg) before creating the actor system");
    auto rt = build_shared(system, config, role == NodeRole::target ? Build::target_node : Build::draft_node);
    rt->node_role = role == NodeRole::target ? "target" : "draft";
    if (role == NodeRole::target) {
        spawn_verifier(rt);
        rt->kv = system.spawn(kv_fun, rt);
    } else {
        rt->drafter = system.spawn<caf::detached>(draft_fun, rt);
    }
    std::unique_ptr<Node> node(new Node());
    node->shared_ = rt;
    node->system_ = &system;
    node->host_ = host;
    node->role_ = role;
    node->node_ = caf::actor_cast<caf::actor>(system.spawn(node_fun, rt));
    auto bound = system.middleman().publish(node->node_, port, host.c_str(), true);
    if (!bound) {
        const std::string why = system.render(bound.error());
        node->stop();
        throw Error("cannot listen on " + host + ":" + std::to_string(port) + ": " + why);
    }
    node->port_ = *bound;
    return node;
}

Node::~Node() { stop(); }

void Node::join(const std::string& gateway_host, uint16_t gateway_port, const std::string& advertised_host) {
    auto gateway = system_->middleman().remote_actor<cluster_actor>(gateway_host, gateway_port);
    if (!gateway)
        throw Error("cannot reach the gateway's cluster port " + gateway_host + ":" + std::to_string(gateway_port) + ": " +
                    system_->render(gateway.error()));
    caf::anon_send(*gateway, join_atom::value, shared_->node_role, advertised_host, port_);
}

void Node::stop() {
    if (stopped_) return;
    stopped_ = true;
    shared_->stopping = true;
    if (port_ != 0) (void)system_->middleman().unpublish(node_, port_);
    caf::scoped_actor self{*system_};
    self->send_exit(node_, caf::exit_reason::user_shutdown);
    stop_actors(*shared_, self);
}

}  // namespace specd
