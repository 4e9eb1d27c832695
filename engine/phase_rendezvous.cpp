#include "engine/phase_rendezvous.h"

namespace specd {

void PhaseRendezvous::answered(std::span<const uint64_t> requests) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t r : requests) expected_[r] = Where::Returning;
}

bool PhaseRendezvous::arrived(Phase phase, uint64_t request) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = expected_.find(request);
    if (it == expected_.end()) return false;
    const Where before = it->second;
    if (phase == Phase::Verify) {
        expected_.erase(it);
        // The drafter waited for it while it was returning.
        return before == Where::Returning && holding_[static_cast<int>(Phase::Draft)];
    }
    it->second = Where::AtDraft;
    // A non-strict verifier waited for it while it was returning; a strict one still does.
    return !strict_ && holding_[static_cast<int>(Phase::Verify)];
}

void PhaseRendezvous::closed(uint64_t request) {
    std::lock_guard<std::mutex> lock(mu_);
    expected_.erase(request);
}

PhaseRendezvous::Wait PhaseRendezvous::waiting_for(Phase phase) {
    std::lock_guard<std::mutex> lock(mu_);
    Wait wait = Wait::None;
    for (const auto& [request, where] : expected_) {
        if (where == Where::Returning) {
            wait = Wait::Returning;
            break;
        }
        if (waits_for(phase, where)) wait = Wait::Drafting;
    }
    holding_[static_cast<int>(phase)] = wait != Wait::None;
    return wait;
}

void PhaseRendezvous::give_up(Phase phase) {
    std::lock_guard<std::mutex> lock(mu_);
    holding_[static_cast<int>(phase)] = false;
    for (auto it = expected_.begin(); it != expected_.end();) {
        if (waits_for(phase, it->second)) it = expected_.erase(it);
        else ++it;
    }
}

size_t PhaseRendezvous::tracked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return expected_.size();
}

}  // namespace specd
