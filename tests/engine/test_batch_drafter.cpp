// BatchDrafter's wire side: incremental draft contexts (make_context_update
// and the receiver's ContextMirror).
#include <catch2/catch.hpp>

#include <vector>

#include "engine/batch_drafter.h"

using namespace specd;

TEST_CASE("incremental draft contexts: the mirror rebuilds every context the sender had, and asks for a resend when it can't",
          "[batch][wire]") {
    std::vector<int32_t> sent;
    ContextMirror mirror;
    const std::vector<std::vector<int32_t>> contexts = {
        {1, 5, 9},              // first: sent whole (keep 0)
        {1, 5, 9, 4, 4, 7},     // accepted tokens appended
        {1, 5, 9, 4, 8},        // a rejection: two dropped, one new
        {1, 5, 9, 4, 8, 2, 3},  // and on
        {2},                    // a different history altogether
    };
    const std::vector<int32_t> expected_keep = {0, 3, 4, 5, 0};
    for (size_t i = 0; i < contexts.size(); ++i) {
        ContextUpdate u = make_context_update(sent, contexts[i]);
        CHECK(u.keep == expected_keep[i]);
        CHECK(u.tail.size() == contexts[i].size() - static_cast<size_t>(u.keep));
        const std::vector<int32_t>* rebuilt = mirror.apply(7, u.keep, u.tail);
        REQUIRE(rebuilt != nullptr);
        CHECK(*rebuilt == contexts[i]);
    }
    // A receiver that lost the request (restarted) or holds fewer tokens refuses.
    ContextMirror fresh;
    CHECK(fresh.apply(7, 3, std::vector<int32_t>{1}) == nullptr);
    CHECK(mirror.apply(7, 5, std::vector<int32_t>{1}) == nullptr);
    CHECK(mirror.size() == 0);  // the bad update dropped what was held: the next send must be whole
    CHECK(mirror.apply(7, 0, std::vector<int32_t>{4, 2}) != nullptr);
    mirror.close(7);
    CHECK(mirror.size() == 0);
}
