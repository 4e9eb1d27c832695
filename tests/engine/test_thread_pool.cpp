#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include <sched.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/thread_pool.h"

using namespace specd;

TEST_CASE("split_range covers 0 to n-1 exactly once with aligned interior boundaries", "[pool]") {
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

TEST_CASE("RangeShare: every item is taken exactly once per phase, and a held-up thread's share is taken over", "[pool]") {
    auto wait_for = [](const std::atomic<int>& v, int value) {
        while (v.load() < value) std::this_thread::yield();
    };
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        RangeShare share(threads);
        for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{67}, int64_t{1000}}) {
            constexpr int kPhases = 6;
            std::vector<std::atomic<int>> taken(static_cast<size_t>(n));
            std::atomic<int> started[kPhases] = {}, others_done[kPhases] = {}, held_items{0};
            // On even phases with n = 1000, thread 0 holds on to its first
            // chunk until the others are done: they must take the rest of its share.
            const auto held = [&](int phase, int nth) { return n == 1000 && nth > 1 && phase % 2 == 0; };
            pool.run([&](int ith, int nth) {
                for (int phase = 0; phase < kPhases; ++phase) {
                    share.share(ith, nth, n, 16, 16, [&](int64_t b, int64_t e) {
                        CHECK(b < e);
                        CHECK(b % 16 == 0);
                        for (int64_t i = b; i < e; ++i) taken[static_cast<size_t>(i)].fetch_add(1);
                        if (!held(phase, nth)) return;
                        if (ith == 0) {
                            held_items.fetch_add(static_cast<int>(e - b));
                            started[phase].store(1);
                            wait_for(others_done[phase], nth - 1);
                        } else {
                            wait_for(started[phase], 1);  // thread 0's share is set up
                        }
                    });
                    if (ith != 0) others_done[phase].fetch_add(1);
                    pool.barrier();
                }
            });
            INFO("threads " << threads << " n " << n);
            for (int64_t i = 0; i < n; ++i) REQUIRE(taken[static_cast<size_t>(i)].load() == kPhases);
            if (held(0, threads)) CHECK(held_items.load() == 16 * kPhases / 2);
        }
    }
}

TEST_CASE("thread pool runs the job on every thread, repeatedly", "[pool]") {
    ThreadPool pool(3);
    std::vector<std::atomic<int>> hits(3);
    std::atomic<int> wrong_nth{0};  // counted, not asserted: Catch's assertions are not thread-safe
    for (int round = 0; round < 1000; ++round) {
        pool.run([&](int ith, int nth) {
            if (nth != 3) wrong_nth.fetch_add(1);
            hits[static_cast<size_t>(ith)].fetch_add(1);
        });
    }
    CHECK(wrong_nth.load() == 0);
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

TEST_CASE("thread pool workers run at the nice value given, and the caller keeps its own", "[pool]") {
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

// The calling thread's affinity mask now (ThreadPool::allowed_cpus() is the process's at start).
std::vector<int> own_affinity() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> out;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) out.push_back(c);
    }
    return out;
}

TEST_CASE("thread pool with cpus pins worker i to the i-th cpu and its caller to the first, and without cpus nothing is pinned", "[pool]") {
    const std::vector<int> allowed = ThreadPool::allowed_cpus();
    REQUIRE_FALSE(allowed.empty());
    const int n = 3;  // more threads than a 2-CPU machine has: the list wraps around
    std::vector<int> cpus;
    for (int i = 0; i < n; ++i) cpus.push_back(allowed[static_cast<size_t>(i) % allowed.size()]);
    // The caller is pinned by run(): do it on a thread of its own, so the
    // test runner's thread keeps its affinity.
    std::vector<int> seen(n, -1);
    std::vector<int> caller_after;
    std::thread caller([&] {
        ThreadPool pool(n, 0, cpus);
        for (int round = 0; round < 3; ++round) {
            pool.run([&](int ith, int) { seen[static_cast<size_t>(ith)] = sched_getcpu(); });
            for (int i = 0; i < n; ++i) CHECK(seen[static_cast<size_t>(i)] == cpus[static_cast<size_t>(i)]);
        }
        caller_after = own_affinity();  // its whole affinity mask now
    });
    caller.join();
    CHECK(caller_after == std::vector<int>{cpus[0]});

    // A pool of one thread is only its caller: pinned all the same.
    std::vector<int> single_after;
    std::thread single([&] {
        ThreadPool one(1, 0, {allowed.back()});
        one.run([](int, int) {});
        single_after = own_affinity();
    });
    single.join();
    CHECK(single_after == std::vector<int>{allowed.back()});

    // The policy: "off" and unknown never pin; "on" always; "auto" only
    // when the compute threads number the allowed CPUs (and no quota caps them).
    const int all = static_cast<int>(allowed.size());
    CHECK(ThreadPool::affinity_cpus("off", all, 0, all).empty());
    CHECK(ThreadPool::affinity_cpus("on", 1, 0, 2) == std::vector<int>{allowed[0], allowed[1 % allowed.size()]});
    CHECK(ThreadPool::affinity_cpus("auto", all + 1, 0, all).empty());
    CHECK(ThreadPool::affinity_cpus("auto", all, 0, all).empty() == ThreadPool::cpu_quota_limited());

    // Unpinned pools leave every thread free to run anywhere.
    ThreadPool free_pool(2);
    std::vector<size_t> masks(2, 0);
    free_pool.run([&](int ith, int) { masks[static_cast<size_t>(ith)] = own_affinity().size(); });
    CHECK(masks[0] == allowed.size());
    CHECK(masks[1] == allowed.size());
}

TEST_CASE("two thread pools whose workers fall asleep between jobs both run every job", "[pool]") {
    // Two pools, as the runtime's target and draft pools; each worker falls
    // asleep between jobs here (the pause outlasts the spin).
    ThreadPool a(2), b(2);
    std::atomic<int> ran_a{0}, ran_b{0};
    for (int round = 0; round < 20; ++round) {
        a.run([&](int, int) { ran_a.fetch_add(1); });
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        b.run([&](int, int) { ran_b.fetch_add(1); });
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    CHECK(ran_a.load() == 40);
    CHECK(ran_b.load() == 40);
}
