#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/thread_pool.h"

using namespace specd;

TEST_CASE("split_range covers [0, n) exactly once with aligned interior boundaries", "[pool]") {
    for (int64_t n : {0, 1, 7, 16, 100, 288, 32000}) {
        for (int nth : {1, 2, 3, 8}) {
            for (int64_t align : {1, 16}) {
                int64_t expect_begin = 0;
                for (int i = 0; i < nth; ++i) {
                    const Range r = split_range(n, i, nth, align);
                    CHECK(r.begin == expect_begin);
                    CHECK(r.end >= r.begin);
                    if (r.end < n) CHECK(r.end % align == 0);
                    expect_begin = r.end;
                }
                CHECK(expect_begin == n);
            }
        }
    }
}

TEST_CASE("thread pool runs the job on every thread, repeatedly", "[pool]") {
    ThreadPool pool(3);
    std::vector<std::atomic<int>> hits(3);
    for (int round = 0; round < 1000; ++round) {
        pool.run([&](int ith, int nth) {
            REQUIRE(nth == 3);
            hits[static_cast<size_t>(ith)].fetch_add(1);
        });
    }
    for (auto& h : hits) CHECK(h.load() == 1000);
}

TEST_CASE("thread pool barrier orders phases: every write before it is seen after it", "[pool]") {
    ThreadPool pool(2);
    std::vector<int> data(2);
    int mismatches = 0;
    for (int round = 0; round < 2000; ++round) {
        pool.run([&](int ith, int nth) {
            data[static_cast<size_t>(ith)] = round;
            pool.barrier();
            if (data[static_cast<size_t>((ith + 1) % nth)] != round && ith == 0) ++mismatches;
            pool.barrier();
        });
    }
    CHECK(mismatches == 0);
}

TEST_CASE("thread pool workers run at the nice value given; the caller keeps its own", "[pool]") {
    const auto own_nice = [] {
        errno = 0;
        return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
    };
    const int caller_before = own_nice();
    const int wanted = std::min(caller_before + 3, 19);  // raising nice needs no privilege
    ThreadPool pool(3, wanted);
    std::vector<int> seen(3, -100);
    pool.run([&](int ith, int) { seen[static_cast<size_t>(ith)] = own_nice(); });
    CHECK(seen[0] == caller_before);
    CHECK(seen[1] == wanted);
    CHECK(seen[2] == wanted);
    CHECK(own_nice() == caller_before);

    ThreadPool unchanged(2);  // 0: workers keep the creator's value
    int worker = -100;
    unchanged.run([&](int ith, int) {
        if (ith == 1) worker = own_nice();
    });
    CHECK(worker == caller_before);
}
