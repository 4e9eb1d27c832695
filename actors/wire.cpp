// The message <-> job/outcome conversions (actors/wire.h) and the packing
// of draft distributions and random states (actors/messages.h).
#include "actors/wire.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/error.h"

namespace specd {

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

verify_msg verify_msg_from_job(VerifyJob job, int32_t run_ahead, bool stop_at_eos) {
    verify_msg m;
    m.request = job.request;
    m.prefill = job.prefill;
    m.tokens = std::move(job.tokens);
    m.n_draft = job.n_draft;
    m.has_probs = job.draft_has_probs;
    if (job.draft_has_probs) m.probs = pack_probs(job.draft_probs);
    m.sampling = job.sampling;
    m.rng = rng_to_wire(job.rng);
    m.run_ahead = job.n_draft == 0 ? run_ahead : 0;
    m.stop_at_eos = stop_at_eos;
    m.cache_prompt = job.cache_prompt;
    return m;
}

VerifyJob verify_job_from_msg(verify_msg& m) {
    VerifyJob job;
    job.request = m.request;
    job.prefill = m.prefill;
    job.tokens = std::move(m.tokens);
    job.n_draft = m.n_draft;
    job.sampling = m.sampling;
    job.rng = rng_from_wire(m.rng);
    job.cache_prompt = m.cache_prompt;
    job.draft_has_probs = m.has_probs;
    if (m.has_probs) job.draft_probs = unpack_probs(m.probs);
    return job;
}

verify_result verify_result_from_outcome(VerifyOutcome& o, bool continued) {
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
    r.continued = continued;
    r.logprobs = std::move(o.logprobs);
    r.cached_tokens = o.cached_tokens;
    return r;
}

VerifyOutcome verify_outcome_from_result(const verify_result& r) {
    VerifyOutcome o;
    o.n_accepted = r.n_accepted;
    o.next = r.next;
    o.rng = rng_from_wire(r.rng);
    o.batch_requests = r.batch_requests;
    o.open_requests = r.open_requests;
    o.step_ms = r.step_ms;
    o.logprobs = r.logprobs;
    o.cached_tokens = r.cached_tokens;
    const size_t k = static_cast<size_t>(std::max(0, o.logprobs.n_top));
    if (o.logprobs.top_ids.size() != o.logprobs.size() * k || o.logprobs.top_logprobs.size() != o.logprobs.size() * k)
        throw Error("log-probabilities of " + std::to_string(o.logprobs.size()) + " tokens with mismatched alternatives");
    return o;
}

VerifyReply verify_reply_from_result(const verify_result& r) {
    VerifyReply reply;
    reply.continued = r.continued;
    if (r.ok) {
        try {
            reply.outcome = verify_outcome_from_result(r);
            return reply;
        } catch (const Error& e) {
            reply.outcome.error = std::string("malformed verify result: ") + e.what();
        }
    } else {
        reply.outcome.kv_full = r.kv_full;
        reply.outcome.error = r.error;
    }
    reply.outcome.ok = false;
    return reply;
}

done_event done_event_from_core(const std::string& id, const SessionCore& core, double ttft_ms, double total_ms) {
    done_event d;
    d.id = id;
    switch (core.stop_reason()) {
        case StopReason::Eos: d.finish_reason = "stop"; break;
        case StopReason::Length: d.finish_reason = "length"; break;
        case StopReason::ContextFull: d.finish_reason = "context"; break;
        case StopReason::Cancelled: d.finish_reason = "cancelled"; break;
        case StopReason::StopSequence: d.finish_reason = "stop"; break;  // as OpenAI: a stop string and EOS read alike
    }
    d.stop_word = core.stop_word();
    const SpecStats& st = core.stats();
    d.prompt_tokens = core.n_prompt();
    d.cached_prompt_tokens = core.n_cached_prompt();
    d.completion_tokens = static_cast<int32_t>(core.output().size());
    d.ttft_ms = ttft_ms;
    d.total_ms = total_ms;
    d.speculative = core.speculative();
    d.steps = st.n_steps;
    d.drafted = st.n_drafted;
    d.accepted = st.n_accepted;
    d.draft_steps = st.n_drafts;
    d.load_capped = st.n_load_capped;
    d.draft_ms = st.draft_ms;
    d.verify_ms = st.verify_ms;
    d.drafted_per_position = st.drafted_per_position;
    d.accepted_per_position = st.accepted_per_position;
    return d;
}

draft_msg draft_msg_from_job(const DraftJob& job, ContextUpdate update, int32_t k, const RngState& rng) {
    draft_msg m;
    m.request = job.request;
    m.keep = update.keep;
    m.tail = std::move(update.tail);
    m.k = k;
    m.p_min = job.p_min;
    m.sampling = job.sampling;
    m.rng = rng_to_wire(rng);
    m.cache_prompt = job.cache_prompt;
    return m;
}

DraftJob draft_job_from_msg(const draft_msg& m, const std::vector<int32_t>& context) {
    DraftJob job;
    job.request = m.request;
    job.context = context;
    job.k = m.k;
    job.p_min = m.p_min;
    job.sampling = m.sampling;
    job.rng = rng_from_wire(m.rng);
    job.cache_prompt = m.cache_prompt;
    return job;
}

draft_result draft_result_from_outcome(DraftOutcome& o) {
    draft_result r;
    r.tokens = std::move(o.draft.tokens);
    r.has_probs = o.draft.has_probs;
    if (o.draft.has_probs) r.probs = pack_probs(o.draft.probs);
    r.rng = rng_to_wire(o.rng);
    r.step_ms = o.step_ms;
    return r;
}

DraftOutcome draft_outcome_from_result(draft_result& r, const RngState& fallback) {
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

DraftReply draft_reply_from_result(draft_result& r, const RngState& fallback) {
    DraftReply reply;
    reply.resync = r.resync;
    if (!r.resync) reply.outcome = draft_outcome_from_result(r, fallback);
    return reply;
}

}  // namespace specd
