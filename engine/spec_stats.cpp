#include "engine/spec_stats.h"

#include <algorithm>

namespace specd {

SpecStats::SpecStats(int32_t draft_max)
    : drafted_per_position(static_cast<size_t>(std::max(draft_max, 0)), 0),
      accepted_per_position(static_cast<size_t>(std::max(draft_max, 0)), 0) {}

void SpecStats::record_step(int32_t drafted, int32_t accepted, double step_draft_ms, double step_verify_ms) {
    ++n_steps;
    k_sum += drafted;
    draft_ms += step_draft_ms;
    verify_ms += step_verify_ms;
    if (drafted <= 0) return;
    ++n_drafts;
    n_drafted += drafted;
    n_accepted += accepted;
    // A draft longer than the counters were made for (not reached by the
    // callers, which size them by draft_max) widens them.
    if (static_cast<size_t>(drafted) > drafted_per_position.size()) {
        drafted_per_position.resize(static_cast<size_t>(drafted), 0);
        accepted_per_position.resize(static_cast<size_t>(drafted), 0);
    }
    // Positions reached: the accepted ones and the first rejected one.
    const int32_t reached = std::min(drafted, accepted + 1);
    for (int32_t i = 0; i < reached; ++i) ++drafted_per_position[static_cast<size_t>(i)];
    for (int32_t i = 0; i < accepted; ++i) ++accepted_per_position[static_cast<size_t>(i)];
}

std::vector<double> SpecStats::accept_rate_per_position() const {
    std::vector<double> r(drafted_per_position.size(), 0.0);
    for (size_t i = 0; i < r.size(); ++i) {
        if (drafted_per_position[i]) r[i] = static_cast<double>(accepted_per_position[i]) / static_cast<double>(drafted_per_position[i]);
    }
    return r;
}

void SpecStats::add(const SpecStats& o) {
    n_steps += o.n_steps;
    n_drafts += o.n_drafts;
    n_drafted += o.n_drafted;
    n_accepted += o.n_accepted;
    draft_ms += o.draft_ms;
    verify_ms += o.verify_ms;
    k_sum += o.k_sum;
    n_load_capped += o.n_load_capped;
    const size_t n = std::max(drafted_per_position.size(), o.drafted_per_position.size());
    drafted_per_position.resize(n, 0);
    accepted_per_position.resize(n, 0);
    for (size_t i = 0; i < o.drafted_per_position.size(); ++i) {
        drafted_per_position[i] += o.drafted_per_position[i];
        accepted_per_position[i] += o.accepted_per_position[i];
    }
}

}  // namespace specd
