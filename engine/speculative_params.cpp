#include "engine/speculative_params.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace specd {

void SpeculativeParams::validate() const {
    if (draft_max < 0 || draft_max > kMaxDraftTokens) {
        throw Error("draft-max must be in 0.." + std::to_string(kMaxDraftTokens) + ", got " + std::to_string(draft_max));
    }
    if (draft_min < 0 || draft_min > std::max(draft_max, 0)) {
        throw Error("draft-min must be in 0..draft-max (" + std::to_string(draft_max) + "), got " +
                    std::to_string(draft_min));
    }
    if (!(draft_p_min >= 0.0f && draft_p_min <= 1.0f)) {
        throw Error("draft-p-min must be in [0, 1], got " + std::to_string(draft_p_min));
    }
}

}  // namespace specd
