// Where a session runs: which target replica (verifier + KV manager) and
// which draft, chosen over the gateway's replica tables (in one process,
// the local actors). Defined with the cluster actor (actors/cluster.cpp),
// which keeps those tables. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actors/interfaces.h"

namespace specd {

struct RuntimeShared;
struct ReplicaLoad;

// Where a session runs: its target replica (verifier + KV manager) and its
// draft. In one process both are the local actors.
struct Placement {
    int32_t target = -1;                  // index into ReplicaTables::targets (-1: local)
    int32_t draft = -1;                   // index into ReplicaTables::drafts (-1: local or none)
    std::shared_ptr<ReplicaLoad> target_load, draft_load;  // where this session is counted (null: local)
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
bool place_target(RuntimeShared& rt, Placement& p, int32_t exclude);
// The draft replica with the fewest sessions; none up: p.drafter stays invalid.
void place_draft(RuntimeShared& rt, Placement& p);
// Give the placement back (the replica's session count drops).
void unplace_target(RuntimeShared& rt, Placement& p);
void unplace_draft(RuntimeShared& rt, Placement& p);

}  // namespace specd
