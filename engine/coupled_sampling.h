// Sampling whose randomness depends only on (seed, position): the
// exponential-race form of the Gumbel-max rule. Each token t of a position
// gets its own uniform u_t = U(seed, position, t) from a counter-based hash,
// and the pick is argmin_t -ln(u_t) / p_t, which is a draw from p exactly
// (the minimum of independent exponentials of rates p_t is the one of rate
// p_t with probability p_t).
//
// Why: the token at a position no longer depends on how many random numbers
// were drawn before it, so a seeded request gives the same text with
// speculation on or off, at any draft length, alone or batched (issue 35,
// item 9). A draft that picks with the same (seed, position) noise from its
// own distribution q agrees with the target's pick whenever the two races
// have the same winner; accepting a drafted token exactly when it equals the
// target's pick keeps the output the plain sampled sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace specd {

// The per-position key every token's uniform derives from.
uint64_t coupled_position_key(uint64_t seed, int64_t position);
// U(seed, position, token) in (0, 1), 53 random bits, never 0.
double coupled_uniform(uint64_t position_key, int32_t token);
// The race winner over `dist` (entries with p > 0; order does not matter).
// Throws specd::Error if dist is empty.
int32_t coupled_pick(std::span<const TokenProb> dist, uint64_t seed, int64_t position);
// The sampler's pick at the position after `history` (history.size(), the
// absolute position in prompt + output) under its params' seed:
// coupled_pick(distribution(logits, history), seed, history.size()).
// `scratch` holds the distribution (capacity reused).
int32_t coupled_sample(Sampler& sampler, const float* logits, std::span<const int32_t> history, std::vector<TokenProb>& scratch);

}  // namespace specd
