// The speculative-decoding knobs of one request (MAX_DRAFT_TOKENS and its
// companions) and their bound, in a header of their own so that config/,
// the actors' messages and the network layer can check a draft length
// without the decoder's headers.
#pragma once

#include <cstdint>

namespace specd {

// The most tokens one step may draft, wherever a draft length is set:
// MAX_DRAFT_TOKENS / draft_max in the config, the admin endpoint, a
// request's own, and the runtime's switch. Verifying k tokens costs a
// forward of k + 1 rows; beyond 64 even a draft accepted 95% of the time
// yields under 20 tokens a step (E(k) = (1 - α^(k+1)) / (1 - α)).
inline constexpr int32_t kMaxDraftTokens = 64;

struct SpeculativeParams {
    int32_t draft_max = 8;      // MAX_DRAFT_TOKENS: most tokens drafted per step, 0..kMaxDraftTokens; 0 = plain decoding
    int32_t draft_min = 0;      // drafts shorter than this are not verified (decode plainly that step)
    float draft_p_min = 0.0f;   // a draft model stops when its top probability falls below this; 0 = off
    bool adaptive = true;       // choose k per step from measured acceptance and costs (else always draft_max)
    void validate() const;      // specd::Error naming the field, value and allowed range
    bool operator==(const SpeculativeParams&) const = default;
};

}  // namespace specd
