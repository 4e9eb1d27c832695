#include "engine/load_policy.h"

#include <algorithm>
#include <cmath>

#include "engine/batch_verifier.h"

namespace specd {

namespace {

// Tokens a step emits per request when it drafts k at per-position
// acceptance a: the accepted run's expected length plus the bonus token.
double expected_tokens(int32_t k, double a) {
    double sum = 0.0, term = 1.0;
    for (int32_t i = 0; i <= k; ++i, term *= a) sum += term;
    return sum;
}

}  // namespace

int32_t LoadPolicy::k_cap(int32_t batch_requests, int32_t draft_max, DraftCosts costs) const {
    if (verify_token_budget <= 0 || batch_requests <= 1) return draft_max;  // alone: nothing to share the step with
    const double t1 = probe ? probe->single_row_ms() : -1.0;
    const double per_row = probe ? probe->per_row_ms() : -1.0;
    if (t1 <= 0.0 || per_row < 0.0) {
        const int32_t cap = verify_token_budget / batch_requests - 1;
        // A draft this short gains less than the drafting round costs (on 2
        // cores: k <= 1 at 2 sessions ran at 0.7-0.8x of plain): decode plainly.
        if (cap < kMinUsefulDraft) return 0;
        return std::min(cap, draft_max);
    }
    const double a = std::clamp(costs.acceptance >= 0.0 ? costs.acceptance : kPriorAcceptance, 0.0, 1.0);
    const double d = costs.draft_token_ms >= 0.0 ? costs.draft_token_ms : kPriorDraftShare * t1;
    const double b = static_cast<double>(batch_requests);
    auto step_ms = [&](double rows) { return probe->step_ms(rows); };
    const double plain = b / step_ms(b);  // tokens per ms
    double best = plain * kMinGain;
    int32_t best_k = 0;
    for (int32_t k = 1; k <= draft_max; ++k) {
        const double rate = b * expected_tokens(k, a) / (step_ms(b * (k + 1)) + k * d);
        if (rate > best) {
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}

int32_t LoadPolicy::k_cap(int32_t batch_requests, int32_t draft_max) const {
    return k_cap(batch_requests, draft_max, DraftCosts{});
}

}  // namespace specd
