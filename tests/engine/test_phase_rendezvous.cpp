// The rendezvous that keeps sessions in step between the verifier and the
// drafter (engine/phase_rendezvous.h): who each phase waits for, and that
// arrivals, ends and give-ups release the waits.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "engine/phase_rendezvous.h"

using namespace specd;

TEST_CASE("rendezvous: nobody answered, nobody waits", "[rendezvous]") {
    for (bool strict : {false, true}) {
        PhaseRendezvous r(strict);
        CHECK_FALSE(r.should_wait(Phase::Verify));
        CHECK_FALSE(r.should_wait(Phase::Draft));
        CHECK_FALSE(r.arrived(Phase::Verify, 7));  // unknown requests change nothing
        CHECK_FALSE(r.arrived(Phase::Draft, 7));
        CHECK(r.tracked() == 0);
    }
}

TEST_CASE("rendezvous: plain decoding, both phases wait until every answered session is back", "[rendezvous]") {
    PhaseRendezvous r(false);
    const std::vector<uint64_t> step = {1, 2};
    r.answered(step);
    CHECK(r.should_wait(Phase::Verify));
    CHECK(r.should_wait(Phase::Draft));
    // 1 comes back to the verifier: the drafter may have waited for it.
    CHECK(r.arrived(Phase::Verify, 1));
    CHECK(r.should_wait(Phase::Verify));  // 2 is still on its way
    CHECK(r.arrived(Phase::Verify, 2));
    CHECK_FALSE(r.should_wait(Phase::Verify));
    CHECK_FALSE(r.should_wait(Phase::Draft));
    CHECK(r.tracked() == 0);
}

TEST_CASE("rendezvous: separate pools, the verifier does not wait out a session's draft", "[rendezvous]") {
    PhaseRendezvous r(false);
    const std::vector<uint64_t> step = {1, 2};
    r.answered(step);
    CHECK(r.should_wait(Phase::Verify));  // the verifier holds its step
    CHECK(r.arrived(Phase::Draft, 1));  // the verifier may have waited for 1: it should look again
    CHECK(r.arrived(Phase::Draft, 2));
    CHECK(r.waiting_for(Phase::Verify) == PhaseRendezvous::Wait::None);  // loose: drafting ones are not waited for
    CHECK_FALSE(r.should_wait(Phase::Draft));
    CHECK(r.tracked() == 2);
    // Drafted, they reach the verifier: the drafter was not waiting for them any more.
    CHECK_FALSE(r.arrived(Phase::Verify, 1));
    CHECK_FALSE(r.arrived(Phase::Verify, 2));
    CHECK(r.tracked() == 0);
}

TEST_CASE("rendezvous: an arrival asks the other phase to look again only while that phase holds its step", "[rendezvous]") {
    PhaseRendezvous r(false);
    const std::vector<uint64_t> step = {1, 2, 3};
    r.answered(step);
    // Neither phase has asked, so neither holds: a wake-up would be wasted.
    CHECK_FALSE(r.arrived(Phase::Verify, 1));
    CHECK_FALSE(r.arrived(Phase::Draft, 2));
    // The drafter holds (3 is still returning): 3 reaching the verifier is news to it.
    CHECK(r.should_wait(Phase::Draft));
    CHECK(r.arrived(Phase::Verify, 3));
    // The drafter asked again and found nobody to wait for: it holds no more.
    CHECK_FALSE(r.should_wait(Phase::Draft));
    r.answered(step);
    CHECK_FALSE(r.arrived(Phase::Verify, 1));
    // Giving up ends a hold too.
    CHECK(r.should_wait(Phase::Draft));
    r.give_up(Phase::Draft);
    CHECK_FALSE(r.arrived(Phase::Verify, 2));
}

TEST_CASE("rendezvous: a shared pool makes the verifier wait for drafting sessions too", "[rendezvous]") {
    PhaseRendezvous r(true);
    const std::vector<uint64_t> step = {1, 2, 3};
    r.answered(step);
    CHECK_FALSE(r.arrived(Phase::Draft, 1));  // strict: the verifier still waits for 1, no need to look again
    CHECK(r.should_wait(Phase::Draft));        // 2 and 3 are on their way
    CHECK(r.waiting_for(Phase::Verify) == PhaseRendezvous::Wait::Returning);  // a short hold while any is returning
    CHECK(r.arrived(Phase::Verify, 2));        // 2 skipped drafting (k = 0): the drafter stops waiting for it
    r.closed(3);                               // 3 ended
    CHECK_FALSE(r.should_wait(Phase::Draft));  // the drafter can draft 1 now
    CHECK(r.waiting_for(Phase::Verify) == PhaseRendezvous::Wait::Drafting);  // the verifier waits for 1's draft: a long hold
    CHECK_FALSE(r.arrived(Phase::Verify, 1));
    CHECK_FALSE(r.should_wait(Phase::Verify));
}

TEST_CASE("rendezvous: giving up forgets only whom that phase waited for", "[rendezvous]") {
    PhaseRendezvous loose(false);
    const std::vector<uint64_t> step = {1, 2};
    loose.answered(step);
    loose.arrived(Phase::Draft, 1);
    loose.give_up(Phase::Draft);  // 2 was returning: forgotten; 1 is drafting: kept until it reaches the verifier
    CHECK_FALSE(loose.should_wait(Phase::Draft));
    CHECK_FALSE(loose.should_wait(Phase::Verify));
    CHECK(loose.tracked() == 1);

    PhaseRendezvous strict(true);
    strict.answered(step);
    strict.arrived(Phase::Draft, 1);
    strict.give_up(Phase::Verify);  // a strict verifier waited for both: both forgotten
    CHECK(strict.tracked() == 0);
    CHECK_FALSE(strict.should_wait(Phase::Verify));
}

TEST_CASE("rendezvous: a new step's answers replace where a request was", "[rendezvous]") {
    PhaseRendezvous r(true);
    const std::vector<uint64_t> one = {1};
    r.answered(one);
    r.arrived(Phase::Draft, 1);
    r.answered(one);  // answered again (e.g. its verification raced a give-up): returning once more
    CHECK(r.should_wait(Phase::Draft));
}

TEST_CASE("rendezvous: two threads, one per phase, end with nothing tracked", "[rendezvous]") {
    PhaseRendezvous r(true);
    std::vector<uint64_t> step(64);
    for (uint64_t i = 0; i < step.size(); ++i) step[i] = i + 1;
    for (int round = 0; round < 200; ++round) {
        r.answered(step);
        std::thread drafter([&] {
            for (uint64_t q : step) {
                if (q % 2 == 0) r.arrived(Phase::Draft, q);
                (void)r.should_wait(Phase::Draft);
            }
        });
        std::thread verifier([&] {
            for (uint64_t q : step) {
                if (q % 2 == 1) r.arrived(Phase::Verify, q);
                (void)r.should_wait(Phase::Verify);
            }
        });
        drafter.join();
        verifier.join();
        for (uint64_t q : step) {
            if (q % 2 == 0) r.arrived(Phase::Verify, q);
        }
        REQUIRE(r.tracked() == 0);
    }
}
