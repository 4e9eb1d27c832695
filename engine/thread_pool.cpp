#include "engine/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECD_CPU_RELAX() _mm_pause()
#else
#define SPECD_CPU_RELAX() ((void)0)
#endif

namespace specd {

namespace {
// Spin this many rounds before yielding / sleeping: a token's phases are a
// few microseconds apart, so spinning is what keeps the barrier cheap; the
// fallback keeps an oversubscribed machine (CI, sanitizers) from crawling.
constexpr int kSpinRounds = 1 << 11;
// How long a pinned worker spins before it sleeps.
constexpr auto kPinnedIdleSpin = std::chrono::microseconds(500);

std::atomic<uint64_t> next_pool_id{1};
}  // namespace

ThreadPool::ThreadPool(int n_threads, int worker_nice, std::vector<int> cpus)
    : n_threads_(std::max(1, n_threads)), cpus_(std::move(cpus)), id_(next_pool_id.fetch_add(1)) {
    workers_.reserve(n_threads_ - 1);
    for (int i = 1; i < n_threads_; ++i) {
        workers_.emplace_back([this, i, worker_nice] {
            set_current_thread_name("specd.compute");
            if (worker_nice != 0) (void)set_current_thread_nice(worker_nice);
            // Only a worker that did get its core spins long between jobs.
            const bool pinned = !cpus_.empty() && pin_current_thread(cpus_[static_cast<size_t>(i) % cpus_.size()]);
            worker_loop(i, pinned);
        });
    }
}

bool ThreadPool::set_current_thread_nice(int nice) {
#if defined(__linux__)
    return setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice) == 0;
#else
    (void)nice;
    return false;
#endif
}

void ThreadPool::set_current_thread_name(const char* name) {
#if defined(__linux__)
    char cut[16] = {};
    std::snprintf(cut, sizeof(cut), "%s", name);
    (void)pthread_setname_np(pthread_self(), cut);
#else
    (void)name;
#endif
}

ThreadPool::~ThreadPool() {
    stopping_.store(true, std::memory_order_release);
    job_generation_.fetch_add(1, std::memory_order_acq_rel);
    job_generation_.notify_all();
    for (auto& t : workers_) t.join();
}

namespace {

std::vector<int> read_allowed_cpus() {
    std::vector<int> out;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &set)) out.push_back(c);
        }
    }
#endif
    if (out.empty()) {
        const unsigned n = std::thread::hardware_concurrency();
        for (unsigned c = 0; c < std::max(1u, n); ++c) out.push_back(static_cast<int>(c));
    }
    return out;
}

}  // namespace

const std::vector<int>& ThreadPool::allowed_cpus() {
    static const std::vector<int> at_start = read_allowed_cpus();
    return at_start;
}

namespace {
// Reads the mask while the process starts, before any of its threads is
// pinned (the mask is per thread, and a pinned caller would see one CPU).
[[maybe_unused]] const bool g_allowed_cpus_read = !ThreadPool::allowed_cpus().empty();
}  // namespace

bool ThreadPool::pin_current_thread(int cpu) {
#if defined(__linux__)
    if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set) == 0;
#else
    (void)cpu;
    return false;
#endif
}

bool ThreadPool::cpu_quota_limited() {
#if defined(__linux__)
    // cgroup v2: "max 100000" is no limit, "150000 100000" one and a half CPUs.
    std::FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) return false;
    char quota[32] = {0};
    const bool read = std::fscanf(f, "%31s", quota) == 1;
    std::fclose(f);
    return read && std::string(quota) != "max";
#else
    return false;
#endif
}

std::vector<int> ThreadPool::affinity_cpus(const std::string& policy, int compute_threads, int first, int n) {
    const std::vector<int>& allowed = allowed_cpus();
    const bool pin = policy == "on" ||
                     (policy == "auto" && compute_threads == static_cast<int>(allowed.size()) && !cpu_quota_limited());
    std::vector<int> cpus;
    if (!pin) return cpus;
    for (int i = 0; i < n; ++i) cpus.push_back(allowed[static_cast<size_t>(first + i) % allowed.size()]);
    return cpus;
}

int ThreadPool::hardware_threads() { return static_cast<int>(allowed_cpus().size()); }

void ThreadPool::run_impl(JobFn fn, void* ctx) {
    if (!cpus_.empty()) {
        thread_local uint64_t pinned_for = 0;  // the pool this thread was last pinned for
        if (pinned_for != id_) {
            (void)pin_current_thread(cpus_[0]);
            pinned_for = id_;
        }
    }
    if (n_threads_ == 1) {
        fn(ctx, 0, 1);  // no shared state: the caller is the pool
        return;
    }
    std::lock_guard<std::mutex> lock(run_mu_);
    job_fn_ = fn;
    job_ctx_ = ctx;
    jobs_pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    // seq_cst pairs with the worker's sleeping_workers_ increment: either it
    // sees the new generation before it waits, or this sees it asleep.
    job_generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) job_generation_.notify_all();
    fn(ctx, 0, n_threads_);
    for (int spin = 0; jobs_pending_.load(std::memory_order_acquire) != 0; ++spin) {
        if (spin < kSpinRounds) SPECD_CPU_RELAX(); else std::this_thread::yield();
    }
}

void ThreadPool::worker_loop(int ith, bool pinned) {
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = job_generation_.load(std::memory_order_acquire);
        std::chrono::steady_clock::time_point idle_since;
        for (int spin = 0; gen == seen; ++spin) {
            if (spin < kSpinRounds) {
                SPECD_CPU_RELAX();
            } else if (pinned && (spin == kSpinRounds || (spin & 255) != 0 ||
                                          std::chrono::steady_clock::now() - idle_since < kPinnedIdleSpin)) {
                // A pinned worker has its core to itself: it stays awake for
                // the next job, which follows the last one after a message
                // round trip through the actors (~0.1 ms), instead of paying
                // a wake-up at every step.
                if (spin == kSpinRounds) idle_since = std::chrono::steady_clock::now();
                SPECD_CPU_RELAX();
            } else {
                sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
                job_generation_.wait(gen, std::memory_order_seq_cst);
                sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
            }
            gen = job_generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stopping_.load(std::memory_order_acquire)) return;
        job_fn_(job_ctx_, ith, n_threads_);
        jobs_pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::barrier() {
    if (n_threads_ == 1) return;
    const uint32_t sense = barrier_sense_.load(std::memory_order_acquire);
    if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
        barrier_count_.store(0, std::memory_order_relaxed);
        barrier_sense_.store(sense + 1, std::memory_order_release);
        return;
    }
    for (int spin = 0; barrier_sense_.load(std::memory_order_acquire) == sense; ++spin) {
        if (spin < kSpinRounds) SPECD_CPU_RELAX(); else std::this_thread::yield();
    }
}

Range split_range(int64_t n, int ith, int nth, int64_t align) {
    if (align < 1) align = 1;
    const int64_t units = (n + align - 1) / align;
    const int64_t per = units / nth, extra = units % nth;
    const int64_t ubegin = ith * per + std::min<int64_t>(ith, extra);
    const int64_t uend = ubegin + per + (ith < extra ? 1 : 0);
    return {std::min(n, ubegin * align), std::min(n, uend * align)};
}

RangeShare::RangeShare(int n_threads) : n_threads_(std::max(1, n_threads)), slots_(2 * static_cast<size_t>(n_threads_)) {}

RangeShare::Slot* RangeShare::begin_phase(int ith, int nth, int64_t n, int64_t align) {
    if (nth > n_threads_ || n > int64_t{UINT32_MAX}) throw std::logic_error("RangeShare: more threads or items than built for");
    Slot& own = slots_[static_cast<size_t>(ith)];
    const int parity = own.phase++ & 1;
    Slot* set = &slots_[static_cast<size_t>(parity * n_threads_)];
    // A thread that reads this slot before the store sees the slot as the
    // phase two back left it: all taken (lo >= hi), so it takes nothing.
    const Range r = split_range(n, ith, nth, align);
    set[ith].lohi.store(static_cast<uint64_t>(r.begin) | static_cast<uint64_t>(r.end) << 32, std::memory_order_release);
    return set;
}

bool RangeShare::claim_front(Slot& s, int64_t chunk, Range& r) {
    uint64_t v = s.lohi.load(std::memory_order_acquire);
    for (;;) {
        const int64_t lo = static_cast<int64_t>(v & UINT32_MAX), hi = static_cast<int64_t>(v >> 32);
        if (lo >= hi) return false;
        const int64_t to = std::min(hi, lo + chunk);
        if (s.lohi.compare_exchange_weak(v, static_cast<uint64_t>(to) | static_cast<uint64_t>(hi) << 32,
                                         std::memory_order_acq_rel, std::memory_order_acquire)) {
            r = {lo, to};
            return true;
        }
    }
}

bool RangeShare::claim_back(Slot& s, int64_t chunk, int64_t align, Range& r) {
    uint64_t v = s.lohi.load(std::memory_order_acquire);
    for (;;) {
        const int64_t lo = static_cast<int64_t>(v & UINT32_MAX), hi = static_cast<int64_t>(v >> 32);
        if (lo >= hi) return false;
        // Chunk starts stay multiples of align (whole register tiles).
        const int64_t from = std::max(lo, (hi - chunk) / align * align);
        if (s.lohi.compare_exchange_weak(v, static_cast<uint64_t>(lo) | static_cast<uint64_t>(from) << 32,
                                         std::memory_order_acq_rel, std::memory_order_acquire)) {
            r = {from, hi};
            return true;
        }
    }
}

}  // namespace specd
