// The statistics of speculative decoding, counted in one place: the
// single-sequence decoder and the session core both record each step here.
// Counting is apart from formatting and exporting them (the CLI, the
// runtime's done_event, the metrics page).
#pragma once

#include <cstdint>
#include <vector>

namespace specd {

// Counters of one generation (or summed over many).
struct SpecStats {
    int64_t n_steps = 0;         // target forwards in the decode loop
    int64_t n_drafts = 0;        // steps that verified at least one drafted token
    int64_t n_drafted = 0;       // drafted tokens verified
    int64_t n_accepted = 0;      // of those, accepted
    std::vector<int64_t> drafted_per_position;   // (draft_max) drafts that reached position i
    std::vector<int64_t> accepted_per_position;  // (draft_max) drafts whose token i was accepted
    double draft_ms = 0.0;       // time in the proposer
    double verify_ms = 0.0;      // time in target forwards and the acceptance rule
    int64_t k_sum = 0;           // sum of the k chosen per step (mean k = k_sum / n_steps)
    int64_t n_load_capped = 0;   // steps whose k the load policy cut (runtime only)

    SpecStats() = default;  // empty per-position counters (a sum to add() into)
    // Per-position counters for drafts of up to `draft_max` tokens.
    explicit SpecStats(int32_t draft_max);

    // One decode step: `drafted` tokens verified (0: a plain step), the
    // first `accepted` of them accepted; the draft and the verification
    // (forward and acceptance rule) took step_draft_ms and step_verify_ms.
    void record_step(int32_t drafted, int32_t accepted, double step_draft_ms, double step_verify_ms);

    double acceptance_rate() const { return n_drafted ? static_cast<double>(n_accepted) / static_cast<double>(n_drafted) : 0.0; }
    // 1 + accepted per draft: tokens a verifying forward yields on average.
    double mean_accept_len() const { return n_drafts ? 1.0 + static_cast<double>(n_accepted) / static_cast<double>(n_drafts) : 1.0; }
    std::vector<double> accept_rate_per_position() const;
    void add(const SpecStats& other);
};

}  // namespace specd
