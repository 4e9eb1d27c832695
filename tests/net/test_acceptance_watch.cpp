// AcceptanceWatch: a window of drafted tokens fills from whole requests,
// and only a window whose acceptance rate ended below the threshold is
// reported; requests that drafted nothing don't count; window 0 is off.
#include <catch2/catch.hpp>

#include "net/acceptance_watch.h"

using specd::AcceptanceWatch;

TEST_CASE("a low window is reported once it fills, with its figures, and the next one starts empty", "[acceptance]") {
    AcceptanceWatch watch(0.5, 100);
    CHECK_FALSE(watch.record(40, 10));  // 40 drafted: not full yet
    CHECK(watch.current().drafted == 40);
    const auto low = watch.record(70, 20);  // 110 drafted, 30 accepted: 0.27 < 0.5
    REQUIRE(low);
    CHECK(low->drafted == 110);
    CHECK(low->accepted == 30);
    CHECK(low->requests == 2);
    CHECK(low->rate() == Approx(30.0 / 110.0));
    CHECK(watch.current().drafted == 0);
    CHECK(watch.current().requests == 0);
}

TEST_CASE("a window at or above the threshold is not reported, and starts over too", "[acceptance]") {
    AcceptanceWatch watch(0.5, 100);
    CHECK_FALSE(watch.record(100, 50));  // exactly the threshold: not low
    CHECK(watch.current().drafted == 0);
    CHECK_FALSE(watch.record(60, 59));
    CHECK(watch.record(60, 0));  // 120 drafted, 59 accepted: 0.49
}

TEST_CASE("requests without drafts don't count, and window 0 turns the watch off", "[acceptance]") {
    AcceptanceWatch watch(0.9, 10);
    CHECK_FALSE(watch.record(0, 0));
    CHECK(watch.current().requests == 0);
    AcceptanceWatch off(0.9, 0);
    for (int i = 0; i < 100; ++i) CHECK_FALSE(off.record(100, 0));
}

TEST_CASE("reconfigure starts a new window with the new settings", "[acceptance]") {
    AcceptanceWatch watch(0.5, 1000);
    CHECK_FALSE(watch.record(500, 0));
    watch.reconfigure(0.5, 10);
    CHECK(watch.current().drafted == 0);
    const auto low = watch.record(10, 1);
    REQUIRE(low);
    CHECK(low->drafted == 10);  // the 500 from before the change are gone
    watch.reconfigure(0.05, 10);
    CHECK_FALSE(watch.record(10, 1));  // 0.1 >= 0.05
}
