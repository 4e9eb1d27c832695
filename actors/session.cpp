// The session actor: one per request. It places the request (target and
// draft), acquires its KV blocks, and drives SessionCore through prefill,
// draft (pipelined when asked) and verify steps, streaming what the core
// emits; it survives a lost draft (plain decoding) and, before anything
// streamed, a lost target (another replica).
#include "actors/session.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "actors/error_code.h"
#include "actors/placement.h"
#include "actors/runtime_shared.h"
#include "actors/wire.h"
#include "engine/error.h"
#include "engine/utf8.h"

namespace specd {

namespace {

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

void session_fail(session_ptr self, ErrorCode code, std::string message) {
    auto& s = self->state;
    if (s.ended) return;
    s.sink.error(error_event{s.id, error_code_name(code), std::move(message)});
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
    const int32_t replicas = static_cast<int32_t>(s.rt->replicas.load()->targets.size());
    if (s.t_first < 0 && s.resumes < replicas && !s.core->finished()) {
        ++s.resumes;
        if (place_target(*s.rt, *s.place, failed)) {
            if (s.place->verifier) self->monitor(s.place->verifier);
            return session_acquire(self);
        }
    }
    session_fail(self, ErrorCode::unavailable, "target node " + address + " was lost (" + why + ") after " +
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
        return session_fail(self, r.kv_full ? ErrorCode::overloaded : ErrorCode::internal, r.error);
    }
    VerifyOutcome o = verify_outcome_from_result(r);
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
    const bool prefill = job.prefill;
    job.request = s.request;
    verify_msg m = verify_msg_from_job(std::move(job), run_ahead, s.core->params().stop_at_eos);
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
            session_fail(self, ErrorCode::internal, "the verifier failed: " + self->system().render(e));
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
    const uint64_t id = ++s.draft_jobs;
    job.request = s.request;
    // Pipelined: one more token, the guess of the bonus token, on the draft's own random stream.
    draft_msg m = draft_msg_from_job(job, std::move(u), s.pipelined ? k + 1 : k, s.pipelined ? s.core->draft_rng(id) : job.rng);
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
                s.prefetch.outcome = draft_outcome_from_result(r, s.core->rng_state());
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
            session_take_draft(self, draft_outcome_from_result(r, s.core->rng_state()), s.waiting_k);
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
            if (!g.ok) return session_fail(self, ErrorCode::overloaded, g.error);
            s.kv_held = true;
            // A plain request runs ahead from its first token; a
            // speculative one drafts after it (run_ahead_limit() is 0).
            session_run_job(self, s.core->prefill_job(s.request, 0), session_run_ahead(self));
        },
        [self, epoch](caf::error& e) {
            auto& s = self->state;
            if (s.ended || epoch != s.verify_epoch) return;
            if (s.rt->clustered) return session_target_lost(self, self->system().render(e));
            session_fail(self, ErrorCode::internal, "the KV cache manager failed: " + self->system().render(e));
        });
}

void session_start(session_ptr self, generate_request& req) {
    auto& s = self->state;
    const RuntimeShared& rt = *s.rt;
    if (rt.draining) return session_fail(self, ErrorCode::draining, "the server is shutting down; retry on another instance");
    if (!req.model.empty() && req.model != rt.config.effective_model_name())
        return session_fail(self, ErrorCode::unknown_model, "unknown model \"" + utf8_excerpt(req.model, 100) + "\"; this server has \"" +
                                                       rt.config.effective_model_name() + "\"");
    std::vector<int32_t> prompt = req.prompt_tokens;
    const Tokenizer& tok = rt.target->tokenizer();
    if (prompt.empty()) {
        if (req.prompt.empty()) return session_fail(self, ErrorCode::invalid_request, "the prompt is empty");
        prompt = tok.encode(req.prompt, true, req.parse_special);
    }
    for (int32_t t : prompt) {
        if (t < 0 || t >= tok.n_vocab())
            return session_fail(self, ErrorCode::invalid_request, "prompt token " + std::to_string(t) + " is outside the vocabulary");
    }
    if (req.sampling.temperature < 0.0f)
        return session_fail(self, ErrorCode::invalid_request, "temperature must be >= 0 (0: greedy), got " + std::to_string(req.sampling.temperature));
    if (req.max_tokens < 1) return session_fail(self, ErrorCode::invalid_request, "max_tokens must be >= 1, got " + std::to_string(req.max_tokens));
    if (static_cast<int64_t>(prompt.size()) + req.max_tokens > rt.n_ctx && static_cast<int32_t>(prompt.size()) >= rt.n_ctx)
        return session_fail(self, ErrorCode::context_exceeded, "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
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
    } catch (const ContextError& e) {
        return session_fail(self, ErrorCode::context_exceeded, e.what());
    } catch (const Error& e) {
        return session_fail(self, ErrorCode::invalid_request, e.what());
    }
    if (s.core->speculative()) {
        std::lock_guard<std::mutex> lock(s.rt->learned_mu);
        if (s.rt->learned_controller) s.core->seed_controller(*s.rt->learned_controller);
    }
    if (req.timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(req.timeout_ms), timeout_atom::value);

    s.pipelined = rt.pipeline;
    if (!place_target(*s.rt, *s.place, -1))
        return session_fail(self, ErrorCode::unavailable, "no target node is reachable (" + rt.config.target_nodes + "); retry later");
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
        session_fail(self, ErrorCode::internal, e.what());
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
            session_fail(self, ErrorCode::timeout, "the request's deadline passed before it finished");
        },
    };
}

}  // namespace

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

}  // namespace specd
