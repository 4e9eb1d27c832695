// The messages of actors/messages.h and the engine's batch types, converted
// in one place: a session packs a job (SessionCore) into a message, the
// compute actor unpacks it for BatchVerifier / BatchDrafter and packs the
// outcome back, the session unpacks that for the core. Internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/session_protocol.h"

namespace specd {

// Session → verifier. `run_ahead`: plain steps the verifier may add after a
// job that drafts nothing (ignored for a job with drafts).
verify_msg verify_msg_from_job(VerifyJob job, int32_t run_ahead, bool stop_at_eos);

// Verifier: the job a message asks for, without its tag (the verifier's to
// set); its tokens are moved out of `m`. specd::Error on a malformed random
// state or draft distributions.
VerifyJob verify_job_from_msg(verify_msg& m);

// Verifier → session. `continued`: the verifier queued the request's next
// step itself. Moves the outcome's error text.
verify_result verify_result_from_outcome(VerifyOutcome& o, bool continued);

// Session: the outcome the core takes (ok and error are the caller's to
// check first). specd::Error on a malformed random state.
VerifyOutcome verify_outcome_from_result(const verify_result& r);

// Session: the verifier's answer as the session protocol takes it. A
// malformed random state in a result that ran reads as a failed step
// (ok false, the problem in error), not an exception.
VerifyReply verify_reply_from_result(const verify_result& r);

// Session → client: the done event of a finished request (finish reason,
// counts, statistics); `ttft_ms` and `total_ms` are the session's clock's.
done_event done_event_from_core(const std::string& id, const SessionCore& core, double ttft_ms, double total_ms);

// Session → draft: the context update (only what changed since the last
// message), `k` tokens wanted and the random state the draft samples with.
draft_msg draft_msg_from_job(const DraftJob& job, ContextUpdate update, int32_t k, const RngState& rng);

// Draft: the job a message asks for, over the request's rebuilt context.
// specd::Error on a malformed random state.
DraftJob draft_job_from_msg(const draft_msg& m, const std::vector<int32_t>& context);

// Draft → session. Moves the outcome's tokens.
draft_result draft_result_from_outcome(DraftOutcome& o);

// Session: the draft the core takes. A malformed reply reads as an empty
// draft with the acceptance stream unchanged (`fallback`).
DraftOutcome draft_outcome_from_result(draft_result& r, const RngState& fallback);
DraftReply draft_reply_from_result(draft_result& r, const RngState& fallback);

}  // namespace specd
