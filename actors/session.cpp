// The session actor: one per request, a thin shell over SessionProtocol
// (engine/session_protocol.h). It admits the request (validation, the
// SessionCore, placement of its target and draft), then turns the
// protocol's actions into messages (KV manager, verifier, draft, the event
// sink) and their replies, down messages, cancel and the deadline into the
// protocol's events.
#include "actors/session.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "actors/placement.h"
#include "actors/runtime_shared.h"
#include "actors/wire.h"
#include "engine/error.h"
#include "engine/error_code.h"
#include "engine/session_protocol.h"
#include "engine/utf8.h"

namespace specd {

namespace {

struct session_state {
    std::shared_ptr<RuntimeShared> rt;
    std::unique_ptr<SessionProtocol> proto;  // from the admitted prompt on
    EventSink sink;
    std::string id;
    uint64_t request = 0;
    double t_submit = 0.0;
    double t_first = -1.0;
    bool ended = false;
    // Shared with the exit functor, which releases whatever is placed when
    // the session ends (normally, failed or killed).
    std::shared_ptr<Placement> place = std::make_shared<Placement>();
    int32_t lost_target = -1;             // the replica given up (FailOver skips it)
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

template <class Event>
void session_feed(session_ptr self, Event&& event);

// ---- the protocol's actions, as messages ----

void session_do(session_ptr self, SessionProtocol::AcquireKv& a) {
    auto& s = self->state;
    kv_acquire m{s.request, a.target_positions, a.draft_positions};
    const uint64_t epoch = a.epoch;
    ask(self, s.place->kv, m,
        [self, epoch](kv_grant& g) { session_feed(self, [&](SessionProtocol& p) { p.on_kv_grant(epoch, g.ok, g.error); }); },
        [self, epoch](caf::error& e) {
            const std::string why = self->system().render(e);
            session_feed(self, [&](SessionProtocol& p) { p.on_kv_error(epoch, why); });
        });
}

void session_do(session_ptr self, SessionProtocol::Verify& v) {
    auto& s = self->state;
    const uint64_t epoch = v.epoch;
    const bool prefill = v.job.prefill;
    ask(self, s.place->verifier, verify_msg_from_job(std::move(v.job), v.run_ahead, v.stop_at_eos),
        [self, epoch, prefill](verify_result& r) {
            const VerifyReply reply = verify_reply_from_result(r);
            session_feed(self, [&](SessionProtocol& p) { p.on_verify_reply(epoch, prefill, reply); });
        },
        [self, epoch](caf::error& e) {
            const std::string why = self->system().render(e);
            session_feed(self, [&](SessionProtocol& p) { p.on_verify_error(epoch, why); });
        });
}

void session_do(session_ptr self, SessionProtocol::Draft& d) {
    auto& s = self->state;
    const uint64_t id = d.id;
    const bool prefetch = d.prefetch;
    ask(self, s.place->drafter, draft_msg_from_job(d.job, std::move(d.update), d.k, d.rng),
        [self, id, prefetch](draft_result& r) {
            session_feed(self, [&](SessionProtocol& p) { p.on_draft_reply(id, prefetch, draft_reply_from_result(r, p.rng_state())); });
        },
        [self, id, prefetch](caf::error& e) {
            const std::string why = self->system().render(e);
            session_feed(self, [&](SessionProtocol& p) { p.on_draft_error(id, prefetch, why); });
        });
}

void session_do(session_ptr self, SessionProtocol::Emit& e) {
    auto& s = self->state;
    if (s.t_first < 0) s.t_first = now_ms();
    SessionCore::Emitted& x = e.emitted;
    s.sink.token(token_event{s.id, std::move(x.tokens), std::move(x.from_draft), std::move(x.text), std::move(x.text_ends),
                             std::move(x.logprobs)});
}

void session_do(session_ptr self, SessionProtocol::Finish&) {
    auto& s = self->state;
    const SessionCore& core = s.proto->core();
    if (core.speculative() && core.stats().n_drafts > 0)
        s.rt->learned_controller.store(std::make_shared<const DraftLengthController>(core.controller()));
    const double now = now_ms();
    s.sink.done(done_event_from_core(s.id, core, s.t_first >= 0 ? s.t_first - s.t_submit : now - s.t_submit, now - s.t_submit));
    session_end(self);
}

void session_do(session_ptr self, SessionProtocol::Fail& f) { session_fail(self, f.code, std::move(f.message)); }

void session_do(session_ptr self, SessionProtocol::ReleaseTarget& r) {
    auto& s = self->state;
    const std::string address = s.place->target_address;
    s.lost_target = s.place->target;
    unplace_target(*s.rt, *s.place);
    log::warn("target node lost by a session", {{"node", address}, {"request", s.id}, {"error", r.why}, {"streamed", s.t_first >= 0}});
    s.proto->on_target_released(static_cast<int32_t>(s.rt->replicas.load()->targets.size()));
}

void session_do(session_ptr self, SessionProtocol::FailOver&) {
    auto& s = self->state;
    const bool placed = place_target(*s.rt, *s.place, s.lost_target);
    if (placed && s.place->verifier) self->monitor(s.place->verifier);
    s.proto->on_failover(placed, s.place->target_address);
}

void session_do(session_ptr self, SessionProtocol::ReleaseDraft& r) {
    auto& s = self->state;
    if (s.place->remote) log::warn("draft node lost by a session; it continues without speculation",
                                   {{"node", s.place->draft_address}, {"request", s.id}, {"error", r.why}});
    unplace_draft(*s.rt, *s.place);
}

// One event into the protocol, then its actions in order (an action may
// answer with another event, whose actions follow).
template <class Event>
void session_feed(session_ptr self, Event&& event) {
    auto& s = self->state;
    if (s.ended || !s.proto) return;
    event(*s.proto);
    SessionProtocol::Action a;
    while (s.proto->next_action(a)) std::visit([self](auto& x) { session_do(self, x); }, a);
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
    gp.cache_prompt = req.cache_prompt;
    SpeculativeParams sp;
    const std::shared_ptr<const SpeculationSettings> defaults = rt.speculation.load();
    sp.draft_max = req.draft_max >= 0 ? req.draft_max : defaults->draft_max;
    sp.adaptive = req.adaptive >= 0 ? req.adaptive != 0 : defaults->adaptive;
    const bool speculative = req.speculative >= 0 ? req.speculative != 0 : defaults->enabled;
    LoadPolicy load_policy = rt.config.load_policy();
    load_policy.probe = &s.rt->step_probe;
    std::unique_ptr<SessionCore> core;
    try {
        core = std::make_unique<SessionCore>(tok, std::move(prompt), gp, sp, speculative, rt.n_ctx, load_policy);
    } catch (const ContextError& e) {
        return session_fail(self, ErrorCode::context_exceeded, e.what());
    } catch (const Error& e) {
        return session_fail(self, ErrorCode::invalid_request, e.what());
    }
    if (core->speculative()) {
        if (const std::shared_ptr<const DraftLengthController> learned = s.rt->learned_controller.load()) core->seed_controller(*learned);
    }
    if (req.timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(req.timeout_ms), timeout_atom::value);

    if (!place_target(*s.rt, *s.place, -1))
        return session_fail(self, ErrorCode::unavailable, "no target node is reachable (" + rt.config.target_nodes + "); retry later");
    if (core->speculative()) place_draft(*s.rt, *s.place);
    if (rt.clustered) {
        // A node that dies sends a down message at once (TCP reset); one
        // that is cut off is caught by the request timeouts.
        self->monitor(s.place->verifier);
        if (s.place->drafter) self->monitor(s.place->drafter);
        log::debug("request placed", {{"request", s.id}, {"target", s.place->target_address}, {"draft", s.place->draft_address}});
    }
    if (core->speculative() && !s.place->drafter) core->disable_speculation();
    SessionProtocol::Config pc;
    pc.request = s.request;
    pc.clustered = rt.clustered;
    pc.pipelined = rt.pipeline;
    pc.run_ahead = rt.config.run_ahead;
    // In one process the KV manager also admits the draft's blocks; a draft
    // node skips a request whose blocks it lacks (no draft that step).
    pc.kv_admits_draft = !rt.clustered && rt.draft;
    const bool has_draft = static_cast<bool>(s.place->drafter);
    s.proto = std::make_unique<SessionProtocol>(std::move(core), pc, has_draft, s.place->target_address);
    session_feed(self, [](SessionProtocol& p) { p.start(); });
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
        if (s.place->verifier && dm.source == s.place->verifier.address()) session_feed(self, [&](SessionProtocol& p) { p.on_target_lost(why); });
        else if (s.place->drafter && dm.source == s.place->drafter.address()) session_feed(self, [&](SessionProtocol& p) { p.on_draft_lost(why); });
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
            const VerifyReply reply = verify_reply_from_result(r);
            session_feed(self, [&](SessionProtocol& p) { p.on_run_ahead(reply); });
        },
        [self](cancel_atom) {
            if (!self->state.proto) return session_end(self);
            session_feed(self, [](SessionProtocol& p) { p.on_cancel(); });
        },
        [self](timeout_atom) { session_feed(self, [](SessionProtocol& p) { p.on_deadline(); }); },
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
        std::lock_guard<std::mutex> lock(shared->sessions_mu);
        shared->sessions.insert(ptr);
    }
    session->attach_functor([weak, ptr]() {
        if (auto rt = weak.lock()) {
            --rt->active;
            std::lock_guard<std::mutex> lock(rt->sessions_mu);
            rt->sessions.erase(ptr);
        }
    });
    return session;
}

}  // namespace specd
