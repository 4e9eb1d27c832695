// The verifier's run-ahead: after a job that drafts nothing, a verifier may
// chain up to n more plain steps of the same request on its own, each on
// the token the step before sampled, and send their results to the
// request's session unasked (the session would only echo the token back).
// The output is the same as step by step: each result still goes through
// SessionCore::on_verify in order; the chain saves a round trip per token.
//
// RunAheadChains keeps, per job in the verifier's batch, the chain it
// belongs to, and after each step says which requests go on (the next jobs
// to submit) and where each result goes. `Route` is the driver's handle for
// a session (the verifier actor's session_actor); it must be
// default-constructible (Route{} for "not run ahead").
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/batch_verifier.h"
#include "engine/sampler.h"

namespace specd {

template <class Route>
class RunAheadChains {
public:
    // Job `tag` (of `request`, just submitted, drafting nothing) may be
    // followed by up to `steps` plain steps (> 0) whose results go to
    // `route`; `stop_at_eos`: the chain ends after an end-of-generation token.
    void begin(uint64_t tag, uint64_t request, Route route, int32_t steps, bool stop_at_eos, const SamplingParams& sampling) {
        by_tag_.emplace(tag, Chain{request, std::move(route), steps, stop_at_eos, sampling});
    }

    // After a verifier step, over its outcomes in order. For each outcome of
    // a chained job, routes[i] is its chain's route (Route{} otherwise);
    // when the request goes on, its next job ([next token], the outcome's
    // random state, the chain's sampling; tagged next_tag++) is
    // appended to `next` and continued[i] is 1. A chain ends at a failed
    // outcome, its last step, an end-of-generation token (when asked), or a
    // request the verifier no longer holds. `is_end(token)`: an
    // end-of-generation token; `is_open(request)`: the verifier holds it.
    template <class IsEnd, class IsOpen>
    void after_step(std::span<const VerifyOutcome> outcomes, IsEnd is_end, IsOpen is_open, uint64_t& next_tag,
                    std::vector<VerifyJob>& next, std::vector<uint8_t>& continued, std::vector<Route>& routes) {
        continued.assign(outcomes.size(), 0);
        routes.assign(outcomes.size(), Route{});
        for (size_t i = 0; i < outcomes.size(); ++i) {
            const VerifyOutcome& o = outcomes[i];
            auto it = by_tag_.find(o.tag);
            if (it == by_tag_.end()) continue;
            Chain c = std::move(it->second);
            by_tag_.erase(it);
            routes[i] = c.route;
            if (!o.ok || c.steps_left <= 0 || (c.stop_at_eos && is_end(o.next)) || !is_open(o.request)) continue;
            VerifyJob job;
            job.request = o.request;
            job.tag = next_tag++;
            job.tokens.push_back(o.next);
            job.sampling = c.sampling;
            job.rng = o.rng;
            --c.steps_left;
            by_tag_.emplace(job.tag, std::move(c));
            next.push_back(std::move(job));
            continued[i] = 1;
        }
    }

    // The request is closed: its chain ends (its queued job is the verifier's to drop).
    void close(uint64_t request) {
        std::erase_if(by_tag_, [request](const auto& kv) { return kv.second.request == request; });
    }

    // f(tag, route) for each job still in a chain.
    template <class F>
    void for_each(F f) const {
        for (const auto& [tag, c] : by_tag_) f(tag, c.route);
    }

    bool chained(uint64_t tag) const { return by_tag_.count(tag) != 0; }
    size_t size() const { return by_tag_.size(); }

private:
    struct Chain {
        uint64_t request = 0;
        Route route;
        int32_t steps_left = 0;           // plain steps it may still add
        bool stop_at_eos = true;
        SamplingParams sampling;
    };
    std::unordered_map<uint64_t, Chain> by_tag_;  // by the tag of the request's job in the batch (the session's, then each chained)
};

}  // namespace specd
