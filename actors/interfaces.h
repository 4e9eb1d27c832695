// The typed interfaces of the runtime's actors, in one place.
//
//   session  ── kv_acquire ──▶ kv_manager     (admission; blocks held until release)
//   session  ── verify_msg ──▶ verifier       (prefill / verify, batched across sessions)
//   verifier ── verify_result ──▶ session     (results of the plain steps it runs ahead)
//   session  ── draft_msg  ──▶ draft          (proposals, batched across sessions)
//   session  ── token_event / done_event / error_event ──▶ sink (any actor)
//   kv_manager ── close ──▶ verifier, draft   (free a finished request's sequences)
//   gateway  ── hello ──▶ node                (multi-node: a `specd node` names its actors)
//   node     ── join ──▶ cluster              (multi-node: a node asks a gateway to add it)
#pragma once

#include <caf/all.hpp>

#include "actors/messages.h"

namespace specd {

// Owns the target model and its KV pool; one batched forward per step.
using verifier_actor = caf::typed_actor<
    caf::replies_to<verify_msg>::with<verify_result>,
    caf::replies_to<close_atom, uint64_t>::with<bool>,
    caf::reacts_to<step_atom>>;

// Owns the proposer (draft model + its KV pool, or n-gram lookup).
using draft_actor = caf::typed_actor<
    caf::replies_to<draft_msg>::with<draft_result>,
    caf::replies_to<close_atom, uint64_t>::with<bool>,
    caf::reacts_to<step_atom>>;

// Admission control over both pools; releases a request's blocks when it
// ends or its session dies.
using kv_manager_actor = caf::typed_actor<
    caf::replies_to<kv_acquire>::with<kv_grant>,
    caf::reacts_to<release_atom, uint64_t>,
    caf::replies_to<stats_atom>::with<runtime_stats>>;

// What a `specd node` process publishes through CAF's middleman: it hands
// out its verifier + KV manager (target role) or its draft actor (draft
// role); the gateway talks to those with the single-process messages.
using node_actor = caf::typed_actor<
    caf::replies_to<hello_atom>::with<node_hello>>;

// The gateway's membership and health-check actor: nodes listed on its
// command line, plus those that join (role "target"/"draft", host, port).
using cluster_actor = caf::typed_actor<
    caf::reacts_to<join_atom, std::string, std::string, uint16_t>,
    caf::reacts_to<tick_atom>>;

// One per request. A verify_result arrives as a message from a verifier
// running ahead (verify_msg::run_ahead).
using session_actor = caf::typed_actor<
    caf::reacts_to<verify_result>,
    caf::reacts_to<cancel_atom>,
    caf::reacts_to<timeout_atom>>;

}  // namespace specd
