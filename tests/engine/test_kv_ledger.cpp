// KvLedger: admission of requests to the KV pools (grant, queue, refuse).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/kv_ledger.h"

using namespace specd;

TEST_CASE("KV ledger: grants what fits, queues in order, refuses what never fits or overflows the queue", "[batch][ledger]") {
    KvPoolSpec target{10, 16, 4};
    KvPoolSpec draft{4, 16, 4};
    KvLedger ledger(target, draft, 2);
    std::string why;
    CHECK(ledger.acquire(1, {64, 64}, &why) == Admission::Granted);  // 4 + 4 blocks
    CHECK(ledger.target_free_blocks() == 6);
    CHECK(ledger.draft_free_blocks() == 0);
    CHECK(ledger.acquire(2, {32, 32}, &why) == Admission::Queued);   // the draft pool is empty
    CHECK(ledger.acquire(3, {16, 0}, &why) == Admission::Queued);    // would fit, but FIFO
    CHECK(ledger.acquire(4, {16, 0}, &why) == Admission::Refused);   // queue full
    CHECK_THAT(why, Catch::Contains("KV cache full"));
    CHECK(ledger.acquire(5, {1000, 0}, &why) == Admission::Refused);
    CHECK_THAT(why, Catch::Contains("too small"));
    std::vector<uint64_t> granted;
    ledger.release(1, granted);
    CHECK(granted == std::vector<uint64_t>{2, 3});
    granted.clear();
    ledger.release(2, granted);
    ledger.release(3, granted);
    CHECK(ledger.target_free_blocks() == 10);
    CHECK(ledger.draft_free_blocks() == 4);
    CHECK(ledger.granted() == 0);
    // A draft that could never fit is not reserved; the request runs without it.
    CHECK(ledger.acquire(6, {16, 1000}, &why) == Admission::Granted);
    CHECK(ledger.draft_free_blocks() == 4);
}

TEST_CASE("KV ledger: a refusal names the limit that was hit, sequence slots or KV blocks", "[batch][ledger]") {
    KvLedger ledger(KvPoolSpec{100, 16, 2}, KvPoolSpec{}, 1);
    std::string why;
    CHECK(ledger.acquire(1, {16, 0}, &why) == Admission::Granted);
    CHECK(ledger.acquire(2, {16, 0}, &why) == Admission::Granted);
    CHECK(ledger.acquire(3, {16, 0}, &why) == Admission::Queued);    // both slots taken, blocks plenty
    CHECK(ledger.acquire(4, {16, 0}, &why) == Admission::Refused);
    CHECK_THAT(why, Catch::Contains("too many requests") && Catch::Contains("max_sessions 2") && Catch::Contains("queue_length 1"));
    CHECK_THAT(why, !Catch::Contains("KV cache full"));
}
