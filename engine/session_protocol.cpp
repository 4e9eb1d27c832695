#include "engine/session_protocol.h"

#include <algorithm>

namespace specd {

SessionProtocol::SessionProtocol(std::unique_ptr<SessionCore> core, const Config& config, bool has_draft, std::string target_address)
    : core_(std::move(core)), cfg_(config), has_draft_(has_draft), target_address_(std::move(target_address)) {}

bool SessionProtocol::next_action(Action& out) {
    if (out_head_ == out_.size()) {
        out_.clear();  // keeps its capacity
        out_head_ = 0;
        return false;
    }
    out = std::move(out_[out_head_++]);
    return true;
}

void SessionProtocol::fail(ErrorCode code, std::string message) {
    if (ended_) return;
    ended_ = true;
    out_.push_back(Fail{code, std::move(message)});
}

// What the core emitted goes out; when it finished, the end too.
void SessionProtocol::flush() {
    core_->take_emitted(emitted_);
    if (!emitted_.tokens.empty() || !emitted_.text.empty()) {
        streamed_ = true;
        out_.push_back(Emit{std::move(emitted_)});
        emitted_ = SessionCore::Emitted{};
    }
    if (!core_->finished()) return;
    ended_ = true;
    out_.push_back(Finish{});
}

void SessionProtocol::start() {
    if (ended_) return;
    acquire();
}

void SessionProtocol::acquire() {
    AcquireKv a;
    a.epoch = verify_epoch_;
    a.target_positions = core_->max_positions();
    a.draft_positions = core_->speculative() && cfg_.kv_admits_draft ? core_->max_positions() : 0;
    out_.push_back(a);
}

void SessionProtocol::on_kv_grant(uint64_t epoch, bool ok, const std::string& error) {
    if (ended_ || epoch != verify_epoch_) return;
    if (!ok) return fail(ErrorCode::overloaded, error);
    kv_held_ = true;
    // A plain request runs ahead from its first token; a speculative one
    // drafts after it (run_ahead_limit() is 0).
    run_job(core_->prefill_job(cfg_.request, 0), run_ahead());
}

void SessionProtocol::on_kv_error(uint64_t epoch, const std::string& why) {
    if (ended_ || epoch != verify_epoch_) return;
    if (cfg_.clustered) return target_lost(why);
    fail(ErrorCode::internal, "the KV cache manager failed: " + why);
}

// How many plain steps the verifier may chain after a job that drafts
// nothing: SessionCore::run_ahead_limit() says which requests may (plain
// ones, and speculative ones the load policy keeps plain). Not across
// nodes: a session notices a cut-off target only by its requests' timeouts.
int32_t SessionProtocol::run_ahead() const {
    if (cfg_.run_ahead <= 0 || cfg_.clustered) return 0;
    return std::min(cfg_.run_ahead, core_->run_ahead_limit());
}

void SessionProtocol::run_job(VerifyJob job, int32_t run_ahead) {
    job.request = cfg_.request;
    run_ahead_epoch_ = verify_epoch_;
    out_.push_back(Verify{verify_epoch_, std::move(job), run_ahead, core_->params().stop_at_eos});
}

void SessionProtocol::on_verify_reply(uint64_t epoch, bool prefill, const VerifyReply& reply) {
    if (ended_ || epoch != verify_epoch_) return;
    on_result(reply, prefill);
}

void SessionProtocol::on_run_ahead(const VerifyReply& reply) {
    if (ended_ || !running_ahead_ || run_ahead_epoch_ != verify_epoch_) return;
    on_result(reply, false);
}

void SessionProtocol::on_verify_error(uint64_t epoch, const std::string& why) {
    if (ended_ || epoch != verify_epoch_) return;
    if (cfg_.clustered) return target_lost(why);
    fail(ErrorCode::internal, "the verifier failed: " + why);
}

// Feeds a verifier's result to the core; then the next step, unless the
// verifier goes on by itself.
void SessionProtocol::on_result(const VerifyReply& reply, bool prefill) {
    running_ahead_ = reply.continued;
    const VerifyOutcome& o = reply.outcome;
    if (!o.ok) {
        if (cfg_.clustered && !o.kv_full) return target_lost(o.error);
        return fail(o.kv_full ? ErrorCode::overloaded : ErrorCode::internal, o.error);
    }
    if (prefill) {
        core_->on_prefill(o);
    } else {
        // The prefetch holds only when its assumption came true.
        const bool all = o.n_accepted == static_cast<int32_t>(verifying_.size());
        if (prefetch_.active && !(all && bonus_guess_ >= 0 && o.next == bonus_guess_)) prefetch_ = Prefetch{};
        core_->on_verify(o);
        verifying_.clear();  // a run-ahead step after this one verifies no draft
    }
    // The next step goes out before the tokens: the compute actors wait for
    // it, and delivering the tokens (a sink actor's wake-up, or the
    // submitter's callbacks) would delay it.
    if (!core_->finished() && !reply.continued) step();
    flush();
}

void SessionProtocol::step() {
    const int32_t k = core_->next_k();
    if (k <= 0 || !has_draft_) {
        prefetch_ = Prefetch{};
        return send_verify();
    }
    if (prefetch_.active) {
        // Every token was accepted and the bonus was the guess: the
        // prefetched draft continues exactly this history.
        if (prefetch_.ready) {
            DraftOutcome o = std::move(prefetch_.outcome);
            prefetch_ = Prefetch{};
            return take_draft(std::move(o), k);
        }
        awaiting_prefetch_ = true;
        prefetch_k_ = k;
        return;
    }
    send_draft(k, false);
}

void SessionProtocol::send_verify() {
    VerifyJob job = core_->verify_job(cfg_.request, 0);
    verifying_.assign(job.tokens.begin() + 1, job.tokens.end());
    if (job.n_draft == 0) bonus_guess_ = -1;
    const int32_t k = job.n_draft;
    run_job(std::move(job), k == 0 ? run_ahead() : 0);
    // Pipelining: while the target verifies, the draft already works on the
    // next step as if everything is accepted and the bonus token is its guess.
    if (cfg_.pipelined && k > 0 && bonus_guess_ >= 0 && has_draft_) send_draft(k, true);
}

// A draft arrived (fresh or prefetched) for a step that wants k tokens:
// when it has more, the first one beyond k is the guess of the bonus token.
void SessionProtocol::take_draft(DraftOutcome o, int32_t k) {
    bonus_guess_ = -1;
    if (cfg_.pipelined) {
        if (static_cast<int32_t>(o.draft.tokens.size()) > k) {
            bonus_guess_ = o.draft.tokens[static_cast<size_t>(k)];
            o.draft.tokens.resize(static_cast<size_t>(k));
            if (o.draft.has_probs && o.draft.probs.size() > static_cast<size_t>(k)) o.draft.probs.resize(static_cast<size_t>(k));
        }
        o.rng = core_->rng_state();  // the draft used its own stream; the acceptance stream goes on unchanged
    }
    core_->on_draft(o);
    send_verify();
}

// Asks the draft for the next step (prefetch: the step after the one being
// verified, under the full-acceptance assumption).
void SessionProtocol::send_draft(int32_t k, bool prefetch) {
    DraftJob job = core_->draft_job(cfg_.request, 0, k);
    std::vector<int32_t> assumed;
    if (prefetch) {
        assumed = verifying_;
        assumed.push_back(bonus_guess_);
        job.context.insert(job.context.end(), assumed.begin(), assumed.end());
    }
    ContextUpdate u = make_context_update(draft_sent_, job.context);
    const uint64_t id = ++draft_jobs_;
    // Pipelined: one more token, the guess of the bonus token, on the draft's own random stream.
    const int32_t want = cfg_.pipelined ? k + 1 : k;
    const RngState rng = cfg_.pipelined ? core_->draft_rng(id) : job.rng;
    if (prefetch) {
        prefetch_ = Prefetch{};
        prefetch_.active = true;
        prefetch_.id = id;
        prefetch_.assumed = std::move(assumed);
    } else {
        waiting_draft_ = id;
        waiting_k_ = k;
        waiting_whole_ = u.keep == 0;
    }
    out_.push_back(Draft{id, prefetch, std::move(job), std::move(u), want, rng});
}

void SessionProtocol::on_draft_reply(uint64_t id, bool prefetch, DraftReply reply) {
    if (ended_) return;
    if (prefetch) {
        if (!prefetch_.active || prefetch_.id != id) return;  // discarded
        if (reply.resync) {
            draft_sent_.clear();
            prefetch_ = Prefetch{};
            if (awaiting_prefetch_) {
                awaiting_prefetch_ = false;
                send_draft(prefetch_k_, false);
            }
            return;
        }
        prefetch_.ready = true;
        prefetch_.outcome = std::move(reply.outcome);
        if (awaiting_prefetch_) {
            awaiting_prefetch_ = false;
            DraftOutcome o = std::move(prefetch_.outcome);
            prefetch_ = Prefetch{};
            take_draft(std::move(o), prefetch_k_);
        }
        return;
    }
    if (waiting_draft_ != id) return;
    waiting_draft_ = 0;
    if (reply.resync) {
        // The draft doesn't hold our context (it restarted): send it whole;
        // a refused whole send is no draft.
        draft_sent_.clear();
        if (!waiting_whole_) return send_draft(waiting_k_, false);
        reply.outcome = DraftOutcome{};
        reply.outcome.rng = core_->rng_state();
    }
    take_draft(std::move(reply.outcome), waiting_k_);
}

void SessionProtocol::on_draft_error(uint64_t id, bool prefetch, const std::string& why) {
    if (ended_) return;
    if (prefetch ? (prefetch_.active && prefetch_.id == id) : waiting_draft_ == id) draft_lost(why);
}

void SessionProtocol::on_draft_lost(const std::string& why) { draft_lost(why); }

// The draft is gone: this request goes on in plain decoding, without an error.
void SessionProtocol::draft_lost(const std::string& why) {
    if (ended_ || !has_draft_) return;
    out_.push_back(ReleaseDraft{why});
    has_draft_ = false;
    core_->disable_speculation();
    prefetch_ = Prefetch{};
    const bool was_waiting = waiting_draft_ != 0 || awaiting_prefetch_;
    waiting_draft_ = 0;
    awaiting_prefetch_ = false;
    if (was_waiting) step();
}

void SessionProtocol::on_target_lost(const std::string& why) { target_lost(why); }

// The target is gone (down message, timeout, or an error from the node):
// whatever it still sends is of an old epoch.
void SessionProtocol::target_lost(const std::string& why) {
    if (ended_) return;
    ++verify_epoch_;
    kv_held_ = false;  // the node's blocks went with it
    lost_address_ = target_address_;
    lost_why_ = why;
    out_.push_back(ReleaseTarget{why});
}

// Nothing streamed yet: start over on another replica, each tried once.
// Else a clear error: the target's KV state (and the stream's position) is lost.
void SessionProtocol::on_target_released(int32_t replicas) {
    if (ended_) return;
    if (!streamed_ && resumes_ < replicas && !core_->finished()) {
        ++resumes_;
        out_.push_back(FailOver{});
        return;
    }
    fail(ErrorCode::unavailable, lost_message());
}

void SessionProtocol::on_failover(bool placed, const std::string& address) {
    if (ended_) return;
    if (!placed) return fail(ErrorCode::unavailable, lost_message());
    target_address_ = address;
    acquire();
}

std::string SessionProtocol::lost_message() const {
    return "target node " + lost_address_ + " was lost (" + lost_why_ + ") after " + std::to_string(core_->output().size()) +
           " streamed tokens; retry the request";
}

void SessionProtocol::on_cancel() {
    if (ended_) return;
    core_->cancel();
    flush();
}

void SessionProtocol::on_deadline() { fail(ErrorCode::timeout, "the request's deadline passed before it finished"); }

}  // namespace specd
