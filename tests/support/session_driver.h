// Drives many SessionCores by hand against one BatchVerifier (target) and
// an optional BatchDrafter, one "runtime step" per round, as the actors do
// but without a scheduler (tests of continuous batching and of features
// that must stay exact under speculation).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/batch_drafter.h"
#include "engine/batch_verifier.h"
#include "engine/session_core.h"

namespace specd::test {

struct Driven {
    std::unique_ptr<SessionCore> core;
    int start_round = 0;
    bool prefilled = false;
};

// One "runtime step" per round: every decoding session drafts (one batched
// drafter call), then every session's verify or prefill job goes to the
// verifier, which steps until each has its outcome.
// `edit_drafts`, when given, sees each round's draft jobs before the
// drafter does (a test may change what the draft is asked).
inline void drive(std::vector<Driven>& sessions, BatchVerifier& verifier, BatchDrafter* drafter,
                  const std::function<void(std::vector<DraftJob>&)>& edit_drafts = {}) {
    for (int round = 0;; ++round) {
        bool any = false;
        std::vector<DraftJob> djobs;
        std::vector<int32_t> ks(sessions.size(), 0);
        for (size_t i = 0; i < sessions.size(); ++i) {
            Driven& s = sessions[i];
            if (s.core->finished() || round < s.start_round) continue;
            any = true;
            if (!s.prefilled) continue;
            ks[i] = s.core->next_k();
            if (ks[i] > 0 && drafter) djobs.push_back(s.core->draft_job(i, i, ks[i]));
        }
        if (!any) {
            bool waiting = false;
            for (auto& s : sessions) waiting |= !s.core->finished();
            if (!waiting) return;
            continue;
        }
        std::vector<DraftOutcome> douts;
        if (edit_drafts) edit_drafts(djobs);
        if (drafter && !djobs.empty()) drafter->draft(djobs, douts);
        for (const DraftOutcome& o : douts) sessions[o.tag].core->on_draft(o);
        size_t expected = 0;
        for (size_t i = 0; i < sessions.size(); ++i) {
            Driven& s = sessions[i];
            if (s.core->finished() || round < s.start_round) continue;
            verifier.submit(s.prefilled ? s.core->verify_job(i, i) : s.core->prefill_job(i, i));
            ++expected;
        }
        size_t got = 0;
        std::vector<VerifyOutcome> outs;
        while (got < expected) {
            outs.clear();
            verifier.step(outs);
            for (const VerifyOutcome& o : outs) {
                INFO(o.error);
                REQUIRE(o.ok);
                Driven& s = sessions[o.tag];
                if (!s.prefilled) {
                    s.core->on_prefill(o);
                    s.prefilled = true;
                } else {
                    s.core->on_verify(o);
                }
                if (s.core->finished()) {
                    verifier.close(o.request);
                    if (drafter) drafter->close(o.request);
                }
                ++got;
            }
        }
    }
}

}  // namespace specd::test
