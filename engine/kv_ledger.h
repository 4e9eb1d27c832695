// Admission control for the paged KV pools: a request is admitted only when
// the blocks for its longest possible run (prompt + max_tokens + a draft)
// are free in every pool it needs, and those blocks stay set aside until it
// ends. So a running request can never meet an empty pool mid-generation
// (no preemption, no deadlock); requests that don't fit now wait in a
// bounded FIFO queue, and those that can never fit, or find the queue full,
// are refused with an error that says why. The KV-cache-manager actor is a
// thin shell over this.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace specd {

struct KvPoolSpec {
    int32_t n_blocks = 0;        // blocks in the pool
    int32_t block_size = 16;     // positions per block
    int32_t max_sequences = 64;  // sequence slots
};

struct KvDemand {
    int32_t target_positions = 0;  // positions on the target pool
    int32_t draft_positions = 0;   // positions on the draft pool (0: no draft model or speculation off)
};

enum class Admission { Granted, Queued, Refused };

class KvLedger {
public:
    // `max_waiting`: length of the waiting queue (0: refuse when full).
    KvLedger(KvPoolSpec target, KvPoolSpec draft, int32_t max_waiting = 64);

    // Grants, queues or refuses `request` (a new id). `why` explains a refusal.
    Admission acquire(uint64_t request, KvDemand demand, std::string* why);
    // Returns the request's blocks (granted or waiting; unknown ids are
    // ignored) and appends the waiting requests that are now granted, in
    // arrival order.
    void release(uint64_t request, std::vector<uint64_t>& newly_granted);

    int32_t waiting() const { return static_cast<int32_t>(waiting_.size()); }
    int32_t granted() const { return static_cast<int32_t>(granted_.size()); }
    int32_t target_free_blocks() const { return target_free_; }
    int32_t draft_free_blocks() const { return draft_free_; }
    const KvPoolSpec& target() const { return target_; }
    const KvPoolSpec& draft() const { return draft_; }

private:
    struct Blocks {
        int32_t target = 0;
        int32_t draft = 0;
    };
    Blocks blocks_for(KvDemand d) const;
    bool fits_now(Blocks b) const;
    void take(uint64_t request, Blocks b);

    KvPoolSpec target_, draft_;
    int32_t max_waiting_;
    int32_t target_free_, draft_free_;
    int32_t target_slots_free_, draft_slots_free_;
    std::unordered_map<uint64_t, Blocks> granted_;
    std::deque<std::pair<uint64_t, Blocks>> waiting_;
};

}  // namespace specd
