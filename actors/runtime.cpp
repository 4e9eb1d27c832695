// The runtime's actors (thin shells over BatchVerifier, BatchDrafter,
// KvLedger and SessionCore) and the embedding API. One translation unit:
// CAF headers cost ~8 s each to compile.
#include "actors/runtime.h"

#include "actors/backend_factory.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/kv_ledger.h"
#include "engine/model.h"
#include "engine/model_integrity.h"
#include "engine/session_core.h"
#include "engine/thread_pool.h"

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

void configure_low_latency(caf::actor_system_config& cfg) { cfg.set("scheduler.policy", caf::atom("sharing")); }

// ----------------------------------------------------------- shared ---

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

// ------------------------------------------------------- verifier ---

struct verifier_state {
    std::unique_ptr<ForwardBackend> fwd;
    std::unique_ptr<PagedKvCache> kv;
    std::unique_ptr<BatchVerifier> batch;
    std::unordered_map<uint64_t, caf::typed_response_promise<verify_result>> promises;  // by job tag
    uint64_t next_tag = 1;
    bool scheduled = false;
    std::vector<VerifyOutcome> outcomes;
    static inline const char* name = "specd.verifier";
    // A verifier that dies (killed, or an exception in a step) still
    // answers everyone waiting on it, so no session hangs.
    ~verifier_state() {
        for (auto& [tag, rp] : promises) {
            verify_result r;
            r.ok = false;
            r.error = "the verifier stopped before this step ran";
            rp.deliver(std::move(r));
        }
    }
};

verifier_actor::behavior_type verifier_fun(verifier_actor::stateful_pointer<verifier_state> self,
                                           std::shared_ptr<RuntimeShared> rt) {
    auto& st = self->state;
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
    return {
        [=](verify_msg& m) -> caf::typed_response_promise<verify_result> {
            auto& s = self->state;
            auto rp = self->make_response_promise<verify_result>();
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
            s.promises.emplace(job.tag, rp);
            s.batch->submit(std::move(job));
            if (!s.scheduled) {
                s.scheduled = true;
                self->send(self, step_atom::value);
            }
            return rp;
        },
        [=](close_atom, uint64_t request) -> bool {
            self->state.batch->close(request);
            return true;
        },
        [=](step_atom) {
            auto& s = self->state;
            s.scheduled = false;
            s.outcomes.clear();
            s.batch->step(s.outcomes);  // an exception here kills the verifier: its sessions fail, it is restarted
            for (VerifyOutcome& o : s.outcomes) {
                auto it = s.promises.find(o.tag);
                if (it == s.promises.end()) continue;
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
                it->second.deliver(std::move(r));
                s.promises.erase(it);
            }
            if (s.batch->has_work() && !s.scheduled) {
                s.scheduled = true;
                self->send(self, step_atom::value);
            }
        },
    };
}

// ---------------------------------------------------------- draft ---

struct draft_state {
    std::unique_ptr<ForwardBackend> fwd;
    std::unique_ptr<PagedKvCache> kv;
    std::unique_ptr<BatchDrafter> batch;
    std::vector<DraftJob> jobs;
    std::vector<caf::typed_response_promise<draft_result>> promises;  // (jobs)
    std::vector<DraftOutcome> outcomes;
    bool scheduled = false;
    static inline const char* name = "specd.draft";
    ~draft_state() {
        for (auto& rp : promises) rp.deliver(draft_result{});  // empty drafts: the sessions just verify
    }
};

draft_actor::behavior_type draft_fun(draft_actor::stateful_pointer<draft_state> self, std::shared_ptr<RuntimeShared> rt) {
    auto& st = self->state;
    if (rt->draft) {
        ForwardOptions fo;
        fo.max_batch_tokens = rt->config.max_step_tokens;
        fo.max_logit_rows = std::max(1, std::min(rt->config.max_step_tokens, rt->config.max_sequences));
        st.fwd = rt->backends->make_draft(fo);
        st.kv = st.fwd->make_kv_cache(rt->draft_shape);
        st.batch = std::make_unique<BatchDrafter>(st.fwd.get(), st.kv.get());
    } else {
        st.batch = std::make_unique<BatchDrafter>(nullptr, nullptr, rt->config.ngram_min, rt->config.ngram_max);
    }
    return {
        [=](draft_msg& m) -> caf::typed_response_promise<draft_result> {
            auto& s = self->state;
            auto rp = self->make_response_promise<draft_result>();
            DraftJob job;
            job.request = m.request;
            job.context = std::move(m.context);
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
            if (!s.scheduled) {
                s.scheduled = true;
                self->send(self, step_atom::value);
            }
            return rp;
        },
        [=](close_atom, uint64_t request) -> bool {
            self->state.batch->close(request);
            return true;
        },
        [=](step_atom) {
            auto& s = self->state;
            s.scheduled = false;
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
    self->request(rt->current_verifier(), timeout, close_atom::value, request)
        .then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
    self->request(rt->current_drafter(), timeout, close_atom::value, request)
        .then([one_done](bool) { one_done(); }, [one_done](caf::error&) { one_done(); });
}

kv_manager_actor::behavior_type kv_fun(kv_manager_actor::stateful_pointer<kv_state> self, std::shared_ptr<RuntimeShared> rt) {
    KvPoolSpec t{rt->target_shape.n_blocks, rt->target_shape.block_size, rt->target_shape.max_sequences};
    KvPoolSpec d{rt->draft ? rt->draft_shape.n_blocks : 0, rt->draft_shape.block_size, rt->draft_shape.max_sequences};
    self->state.ledger = std::make_unique<KvLedger>(t, d, rt->config.max_waiting);
    return {
        [=](kv_acquire& a) -> caf::typed_response_promise<kv_grant> {
            auto& s = self->state;
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
        [=](release_atom, uint64_t request) { kv_release(self, rt, request); },
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

// -------------------------------------------------------- session ---

struct session_state {
    std::shared_ptr<RuntimeShared> rt;
    std::unique_ptr<SessionCore> core;
    caf::actor sink;
    std::string id;
    uint64_t request = 0;
    double t_submit = 0.0;
    double t_first = -1.0;
    bool ended = false;
    bool kv_held = false;
    SessionCore::Emitted emitted;
    static inline const char* name = "specd.session";
};

using session_ptr = session_actor::stateful_pointer<session_state>;

void session_end(session_ptr self) {
    auto& s = self->state;
    if (s.ended) return;
    s.ended = true;
    if (s.kv_held) self->send(s.rt->kv, release_atom::value, s.request);
    self->quit();
}

void session_fail(session_ptr self, std::string code, std::string message) {
    auto& s = self->state;
    if (s.ended) return;
    caf::anon_send(s.sink, error_event{s.id, std::move(code), std::move(message)});
    session_end(self);
}

// Sends what was emitted; when the core finished, also the done event.
void session_flush(session_ptr self) {
    auto& s = self->state;
    s.core->take_emitted(s.emitted);
    if (!s.emitted.tokens.empty() || !s.emitted.text.empty()) {
        if (s.t_first < 0) s.t_first = now_ms();
        caf::anon_send(s.sink, token_event{s.id, s.emitted.tokens, s.emitted.from_draft, s.emitted.text});
    }
    if (!s.core->finished()) return;
    const SpecStats& st = s.core->stats();
    done_event d;
    d.id = s.id;
    switch (s.core->stop_reason()) {
        case StopReason::Eos: d.finish_reason = "stop"; break;
        case StopReason::Length: d.finish_reason = "length"; break;
        case StopReason::ContextFull: d.finish_reason = "context"; break;
        case StopReason::Cancelled: d.finish_reason = "cancelled"; break;
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
    d.drafted_per_position = st.drafted_per_position;
    d.accepted_per_position = st.accepted_per_position;
    caf::anon_send(s.sink, std::move(d));
    session_end(self);
}

void session_step(session_ptr self);

// Sends one job (the prefill, or [pending, drafts]) to the verifier and
// feeds its outcome to the core; then the next step.
void session_run_job(session_ptr self, VerifyJob job) {
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
    const bool prefill = job.prefill;
    self->request(s.rt->current_verifier(), caf::infinite, std::move(m))
        .then(
            [self, prefill](verify_result& r) {
                auto& s = self->state;
                if (s.ended) return;
                if (!r.ok) return session_fail(self, r.kv_full ? "overloaded" : "internal", r.error);
                VerifyOutcome o;
                o.n_accepted = r.n_accepted;
                o.next = r.next;
                o.rng = rng_from_wire(r.rng);
                o.batch_requests = r.batch_requests;
                o.open_requests = r.open_requests;
                o.step_ms = r.step_ms;
                if (prefill) s.core->on_prefill(o);
                else s.core->on_verify(o);
                session_flush(self);
                if (!s.ended) session_step(self);
            },
            [self](caf::error& e) {
                session_fail(self, "internal", "the verifier failed: " + self->system().render(e));
            });
}

void session_verify(session_ptr self) { session_run_job(self, self->state.core->verify_job(self->state.request, 0)); }

void session_step(session_ptr self) {
    auto& s = self->state;
    const int32_t k = s.core->next_k();
    if (k <= 0) return session_verify(self);
    DraftJob job = s.core->draft_job(s.request, 0, k);
    draft_msg m;
    m.request = s.request;
    m.context = std::move(job.context);
    m.k = job.k;
    m.p_min = job.p_min;
    m.sampling = job.sampling;
    m.rng = rng_to_wire(job.rng);
    self->request(s.rt->current_drafter(), caf::infinite, std::move(m))
        .then(
            [self](draft_result& r) {
                auto& s = self->state;
                if (s.ended) return;
                DraftOutcome o;
                o.draft.tokens = std::move(r.tokens);
                o.draft.has_probs = r.has_probs;
                try {
                    if (r.has_probs) o.draft.probs = unpack_probs(r.probs);
                    o.rng = rng_from_wire(r.rng);
                } catch (const Error&) {
                    o.draft.clear();
                    o.rng = rng_from_wire(rng_to_wire(RngState{}));
                }
                o.step_ms = r.step_ms;
                s.core->on_draft(o);
                session_verify(self);
            },
            [self](caf::error&) {
                // The draft actor is gone: this request goes on without speculation.
                auto& s = self->state;
                if (s.ended) return;
                s.core->disable_speculation();
                session_verify(self);
            });
}

void session_start(session_ptr self, generate_request& req) {
    auto& s = self->state;
    const RuntimeShared& rt = *s.rt;
    if (rt.draining) return session_fail(self, "draining", "the server is shutting down; retry on another instance");
    if (!req.model.empty() && req.model != rt.config.effective_model_name())
        return session_fail(self, "unknown_model", "unknown model \"" + req.model + "\"; this server has \"" +
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
    SpeculativeParams sp;
    sp.draft_max = req.draft_max >= 0 ? req.draft_max : rt.spec_draft_max.load();
    sp.adaptive = req.adaptive >= 0 ? req.adaptive != 0 : rt.spec_adaptive.load();
    const bool speculative = req.speculative >= 0 ? req.speculative != 0 : rt.spec_enabled.load();
    try {
        s.core = std::make_unique<SessionCore>(tok, std::move(prompt), gp, sp, speculative, rt.n_ctx, rt.config.load_policy());
    } catch (const Error& e) {
        const std::string what = e.what();
        return session_fail(self, what.find("context") != std::string::npos ? "context_exceeded" : "invalid_request", what);
    }
    if (req.timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(req.timeout_ms), timeout_atom::value);

    kv_acquire a;
    a.request = s.request;
    a.target_positions = s.core->max_positions();
    a.draft_positions = (s.core->speculative() && rt.draft) ? s.core->max_positions() : 0;
    self->request(rt.kv, caf::infinite, a)
        .then(
            [self](kv_grant& g) {
                auto& s = self->state;
                if (s.ended) return;
                if (!g.ok) return session_fail(self, "overloaded", g.error);
                s.kv_held = true;
                session_run_job(self, s.core->prefill_job(s.request, 0));
            },
            [self](caf::error& e) { session_fail(self, "internal", "the KV cache manager failed: " + self->system().render(e)); });
}

session_actor::behavior_type session_fun(session_ptr self, std::shared_ptr<RuntimeShared> rt, generate_request req,
                                         caf::actor sink, uint64_t request) {
    auto& s = self->state;
    s.rt = rt;
    s.sink = std::move(sink);
    s.id = req.id;
    s.request = request;
    s.t_submit = now_ms();
    try {
        session_start(self, req);
    } catch (const std::exception& e) {
        session_fail(self, "internal", e.what());
    }
    return {
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

caf::behavior callback_sink(caf::event_based_actor* self, RuntimeCallbacks cb) {
    return {
        [cb](const token_event& e) {
            if (cb.on_token) cb.on_token(e);
        },
        [self, cb](const done_event& e) {
            if (cb.on_done) cb.on_done(e);
            self->quit();
        },
        [self, cb](const error_event& e) {
            if (cb.on_error) cb.on_error(e);
            self->quit();
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

std::unique_ptr<Runtime> Runtime::create(caf::actor_system& system, const RuntimeConfig& config) {
    config.validate();
    auto rt = std::make_shared<RuntimeShared>();
    rt->config = config;
    rt->system = &system;
    rt->spec_enabled = config.enable_speculative;
    rt->spec_draft_max = config.draft_max;
    rt->spec_adaptive = config.adaptive;
    // Structure (a truncated download fails here) and, when known, the hash.
    verify_model_file(config.target_model, config.target_sha256);
    rt->target = LlamaModel::load(config.target_model);
    if (!config.draft_model.empty()) {
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
    const int32_t n_ctx_train = rt->target->hparams().n_ctx_train;
    rt->n_ctx = config.n_ctx > 0 ? std::min(config.n_ctx, n_ctx_train) : n_ctx_train;
    const int threads = config.threads_target > 0 ? config.threads_target : ThreadPool::hardware_threads();
    rt->target_pool = std::make_unique<ThreadPool>(threads);
    // The draft gets its own pool, so its phase of some sessions overlaps
    // the verify phase of others; by default as wide as the target's (when
    // the phases don't overlap, each gets every core).
    if (rt->draft) rt->draft_pool = std::make_unique<ThreadPool>(config.threads_draft > 0 ? config.threads_draft : threads);
    rt->backends = BackendFactory::create(config, *rt->target, rt->draft.get(), *rt->target_pool, rt->draft_pool.get());

    // KV pools: KV_CACHE_RATIO of the budget, split between target and
    // draft by their bytes per block (both get the same block count), and
    // no more than max_sequences full contexts.
    {
        rt->target_shape = ForwardBackend::kv_shape_for(*rt->target, rt->n_ctx, config.max_sequences);
        size_t block_bytes = rt->backends->kv_block_bytes(rt->target_shape);
        if (rt->draft) {
            rt->draft_shape = ForwardBackend::kv_shape_for(*rt->draft, rt->n_ctx, config.max_sequences);
            block_bytes += rt->backends->kv_block_bytes(rt->draft_shape);
        }
        const int64_t budget = config.memory_budget_bytes > 0 ? config.memory_budget_bytes : rt->backends->kv_memory_bytes(available_ram_bytes());
        const int64_t kv_bytes = static_cast<int64_t>(config.kv_cache_ratio * static_cast<double>(budget));
        const int64_t affordable = kv_bytes / static_cast<int64_t>(block_bytes);
        const int32_t per_seq = (rt->n_ctx + rt->target_shape.block_size - 1) / rt->target_shape.block_size;
        if (affordable < per_seq)
            throw Error("KV cache budget too small: " + std::to_string(kv_bytes) + " bytes (KV_CACHE_RATIO " +
                        std::to_string(config.kv_cache_ratio) + " of " + std::to_string(budget) + ") hold " +
                        std::to_string(affordable) + " blocks; one context needs " + std::to_string(per_seq));
        const int32_t n_blocks = static_cast<int32_t>(std::min<int64_t>(affordable, rt->target_shape.n_blocks));
        rt->target_shape.n_blocks = n_blocks;
        if (rt->draft) rt->draft_shape.n_blocks = n_blocks;
    }

    spawn_verifier(rt);
    rt->drafter = system.spawn<caf::detached>(draft_fun, rt);
    rt->kv = system.spawn(kv_fun, rt);
    return std::unique_ptr<Runtime>(new Runtime(rt));
}

Runtime::~Runtime() { shutdown(); }

session_actor Runtime::submit(generate_request request, caf::actor sink) {
    const uint64_t key = shared_->next_request++;
    auto session = shared_->system->spawn(session_fun, shared_, std::move(request), std::move(sink), key);
    ++shared_->active;
    std::weak_ptr<RuntimeShared> weak = shared_;
    auto ptr = caf::actor_cast<caf::strong_actor_ptr>(session);
    {
        std::lock_guard<std::mutex> lock(shared_->mu);
        shared_->sessions.insert(ptr);
    }
    kv_manager_actor kv = shared_->kv;
    session->attach_functor([weak, ptr, kv, key]() {
        caf::anon_send(kv, release_atom::value, key);  // a no-op when the session already released
        if (auto rt = weak.lock()) {
            --rt->active;
            std::lock_guard<std::mutex> lock(rt->mu);
            rt->sessions.erase(ptr);
        }
    });
    return session;
}

session_actor Runtime::submit(generate_request request, RuntimeCallbacks callbacks) {
    auto sink = shared_->system->spawn(callback_sink, std::move(callbacks));
    return submit(std::move(request), sink);
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
    caf::scoped_actor self{*shared_->system};
    runtime_stats out;
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
bool Runtime::has_draft_model() const { return shared_->draft != nullptr; }
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
    verifier_actor v = shared_->current_verifier();
    draft_actor d = shared_->current_drafter();
    kv_manager_actor kv = shared_->kv;
    self->send_exit(kv, caf::exit_reason::user_shutdown);
    self->send_exit(v, caf::exit_reason::user_shutdown);
    self->send_exit(d, caf::exit_reason::user_shutdown);
    self->wait_for(kv, v, d);
}

StandaloneRuntime::StandaloneRuntime(const RuntimeConfig& config) {
    cfg_ = std::make_unique<caf::actor_system_config>();
    register_types(*cfg_);
    configure_low_latency(*cfg_);
    system_ = std::make_unique<caf::actor_system>(*cfg_);
    runtime_ = Runtime::create(*system_, config);
}

StandaloneRuntime::~StandaloneRuntime() {
    runtime_.reset();
}

}  // namespace specd
