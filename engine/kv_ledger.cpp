#include "engine/kv_ledger.h"

#include "engine/error.h"

namespace specd {

KvLedger::KvLedger(KvPoolSpec target, KvPoolSpec draft, int32_t max_waiting)
    : target_(target), draft_(draft), max_waiting_(max_waiting),
      target_free_(target.n_blocks), draft_free_(draft.n_blocks),
      target_slots_free_(target.max_sequences), draft_slots_free_(draft.max_sequences) {
    if (target.n_blocks <= 0 || target.block_size <= 0 || target.max_sequences <= 0)
        throw Error("KV ledger: the target pool needs blocks, a block size and sequence slots");
    if (max_waiting < 0) throw Error("KV ledger: max_waiting must be >= 0");
}

KvLedger::Blocks KvLedger::blocks_for(KvDemand d) const {
    Blocks b;
    b.target = (d.target_positions + target_.block_size - 1) / target_.block_size;
    if (d.draft_positions > 0 && draft_.n_blocks > 0)
        b.draft = (d.draft_positions + draft_.block_size - 1) / draft_.block_size;
    return b;
}

bool KvLedger::fits_now(Blocks b) const {
    return b.target <= target_free_ && target_slots_free_ > 0 &&
           (b.draft == 0 || (b.draft <= draft_free_ && draft_slots_free_ > 0));
}

void KvLedger::take(uint64_t request, Blocks b) {
    target_free_ -= b.target;
    --target_slots_free_;
    if (b.draft > 0) {
        draft_free_ -= b.draft;
        --draft_slots_free_;
    }
    granted_.emplace(request, b);
}

Admission KvLedger::acquire(uint64_t request, KvDemand demand, std::string* why) {
    if (demand.target_positions <= 0) throw Error("KV ledger: a request needs at least one target position");
    const Blocks b = blocks_for(demand);
    if (b.target > target_.n_blocks) {
        if (why)
            *why = "KV cache too small: the request needs " + std::to_string(b.target) + " blocks of " +
                   std::to_string(target_.block_size) + " positions, the pool has " + std::to_string(target_.n_blocks);
        return Admission::Refused;
    }
    // A draft that could never fit just isn't reserved: the request then runs without speculation.
    Blocks want = b;
    if (want.draft > draft_.n_blocks) want.draft = 0;
    // FIFO: nobody overtakes a waiting request.
    if (waiting_.empty() && fits_now(want)) {
        take(request, want);
        return Admission::Granted;
    }
    if (static_cast<int32_t>(waiting_.size()) >= max_waiting_) {
        // Name the limit that holds the queue up: sequence slots (max_sessions)
        // or KV blocks; the queue itself is then full too.
        if (why) {
            const bool slots = target_slots_free_ == 0 || (want.draft > 0 && draft_slots_free_ == 0);
            *why = (slots ? "too many requests: " + std::to_string(granted_.size()) + " running (max_sessions " +
                                std::to_string(target_.max_sequences) + ")"
                          : "KV cache full: " + std::to_string(target_.n_blocks - target_free_) + " of " +
                                std::to_string(target_.n_blocks) + " blocks held by " + std::to_string(granted_.size()) + " running requests") +
                   " and " + std::to_string(waiting_.size()) + " waiting (queue_length " + std::to_string(max_waiting_) + ")";
        }
        return Admission::Refused;
    }
    waiting_.emplace_back(request, want);
    return Admission::Queued;
}

void KvLedger::release(uint64_t request, std::vector<uint64_t>& newly_granted) {
    auto it = granted_.find(request);
    if (it != granted_.end()) {
        target_free_ += it->second.target;
        ++target_slots_free_;
        if (it->second.draft > 0) {
            draft_free_ += it->second.draft;
            ++draft_slots_free_;
        }
        granted_.erase(it);
    } else {
        for (auto w = waiting_.begin(); w != waiting_.end(); ++w) {
            if (w->first == request) {
                waiting_.erase(w);
                break;
            }
        }
    }
    while (!waiting_.empty() && fits_now(waiting_.front().second)) {
        auto [id, b] = waiting_.front();
        waiting_.pop_front();
        take(id, b);
        newly_granted.push_back(id);
    }
}

}  // namespace specd
