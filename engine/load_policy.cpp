#include "engine/load_policy.h"

#include <algorithm>

#include "engine/batch_verifier.h"

namespace specd {

int32_t LoadPolicy::budget() const {
    if (verify_token_budget <= 0 || probe == nullptr) return verify_token_budget;
    return std::max(verify_token_budget, std::min(kMaxMeasuredBudget, probe->doubling_rows()));
}

int32_t LoadPolicy::k_cap(int32_t batch_requests, int32_t draft_max) const {
    if (verify_token_budget <= 0 || batch_requests <= 1) return draft_max;  // alone: nothing to share the step with
    const int32_t cap = budget() / std::max(1, batch_requests) - 1;
    // A draft this short gains less than the drafting round costs (on 2
    // cores: k <= 1 at 2 sessions ran at 0.7-0.8x of plain): decode plainly.
    if (cap < kMinUsefulDraft) return 0;
    return std::min(cap, draft_max);
}

}  // namespace specd
