// A persistent pool of worker threads that run one SPMD job at a time: every
// thread (the caller is thread 0) runs the same function with its index and
// synchronises with barrier(). The forward pass is one such job per call, so
// a token costs one wake-up plus a few spin barriers, and nothing allocates.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace specd {

class ThreadPool {
public:
    // n_threads: total threads including the caller (>= 1). `worker_nice`
    // (default 0: unchanged) is applied to each worker thread at start.
    // `cpus` (default empty: no pinning): worker i runs only on cpus[i] and
    // a thread that calls run() only on cpus[0] from then on (wrapping
    // around when shorter than n_threads), so that the threads of a job
    // stay on their own cores between jobs instead of waking up on a core
    // where another of them still spins. Pinned workers, having their core
    // to themselves, also spin longer (0.5 ms) before they sleep.
    explicit ThreadPool(int n_threads, int worker_nice = 0, std::vector<int> cpus = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Runs job(thread_index, n_threads) on every thread and returns when all
    // are done. Callers on different threads take turns (two compute actors
    // may share a pool); not reentrant (a job must not run() its own pool).
    template <class Fn>
    void run(Fn&& job) {
        run_impl(&invoke<std::remove_reference_t<Fn>>, &job);
    }

    // Called by every thread of the running job; returns when all arrived.
    void barrier();

    // Threads the hardware offers this process (at least 1): the CPUs of
    // allowed_cpus(), so a container limited to some CPUs (a cpuset) gets
    // that many, not the host's count.
    static int hardware_threads();

    // The CPUs this process may run on, ascending, as its affinity mask was
    // when it started (Linux; elsewhere 0..hardware_concurrency-1).
    static const std::vector<int>& allowed_cpus();

    // Restricts the calling thread to one CPU; false where refused or unsupported.
    static bool pin_current_thread(int cpu);

    // Whether a CPU quota caps this process (cgroup v2 cpu.max, as set by
    // `docker --cpus` or a Kubernetes CPU limit): its affinity mask then
    // overstates what it may use, and pinned threads would spin away quota.
    static bool cpu_quota_limited();

    // The `cpus` argument for a pool of n threads that takes the allowed
    // CPUs from index `first` on, under a cpu_affinity policy: "on" pins;
    // "auto" pins when the process's compute threads number exactly its
    // allowed CPUs and no CPU quota applies; anything else (and "off")
    // returns {} (no pinning).
    static std::vector<int> affinity_cpus(const std::string& policy, int compute_threads, int first, int n);

    // Sets the calling thread's nice value (Linux: per thread). Raising it
    // needs no privilege; returns false where the system refused.
    static bool set_current_thread_nice(int nice);

    // Names the calling thread (Linux: at most 15 characters, longer names
    // are cut), so that `top -H`, perf and `specd bench --url self`'s CPU
    // table can tell compute, network and actor threads apart.
    static void set_current_thread_name(const char* name);

private:
    using JobFn = void (*)(void* ctx, int ith, int nth);
    template <class Fn>
    static void invoke(void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); }

    void run_impl(JobFn fn, void* ctx);
    void worker_loop(int ith, bool pinned);

    int n_threads_;
    std::vector<int> cpus_;  // (empty, or the CPU of each thread index, wrapping)
    uint64_t id_;            // tells the pools apart for a caller's pinning
    std::vector<std::thread> workers_;
    std::mutex run_mu_;  // one job at a time; held for the whole job
    JobFn job_fn_ = nullptr;
    void* job_ctx_ = nullptr;
    // Bumped to start a job. 32 bits: libstdc++ waits on a 4-byte atomic
    // with a futex on its own address, but on an 8-byte one through a
    // proxy shared by every atomic that hashes alike, so a job of one pool
    // woke the sleeping workers of the others (a nice-0 worker of another
    // pool then preempted this pool's compute threads at every job).
    std::atomic<uint32_t> job_generation_{0};
    std::atomic<int> sleeping_workers_{0};      // workers in wait(): a job start without them needs no syscall
    std::atomic<int> jobs_pending_{0};          // workers still running the job
    std::atomic<bool> stopping_{false};
    // Sense-reversing barrier.
    alignas(64) std::atomic<int> barrier_count_{0};
    alignas(64) std::atomic<uint32_t> barrier_sense_{0};
};

// [begin, end) of n items for thread ith of nth, chunk boundaries rounded to
// multiples of `align` (the last chunk takes the remainder).
struct Range {
    int64_t begin;
    int64_t end;
};
Range split_range(int64_t n, int ith, int nth, int64_t align = 1);

// Work sharing of n items (a matmul's output rows) between the threads of a
// job: each thread starts on its split_range share and takes it `chunk`
// items at a time from the front; a thread done with its own share then
// takes chunks from the back of the others'. Every thread streams its own
// share front to back as before, and a thread slowed down (another
// process, a busier memory channel) no longer holds the others at the next
// barrier. Every thread of the job calls share() for the same phases in the
// same order; consecutive calls must be separated by a barrier. Which thread
// computes an item never changes the item's value (kernels compute each
// output row alone).
class RangeShare {
public:
    explicit RangeShare(int n_threads);

    template <class Fn>
    void share(int ith, int nth, int64_t n, int64_t align, int64_t chunk, Fn&& fn) {
        Slot* set = begin_phase(ith, nth, n, align);
        Range r;
        while (claim_front(set[ith], chunk, r)) fn(r.begin, r.end);
        for (int k = 1; k < nth; ++k) {
            Slot& other = set[(ith + k) % nth];
            while (claim_back(other, chunk, align, r)) fn(r.begin, r.end);
        }
    }

private:
    // lo | hi << 32 of the items not yet taken from one thread's share.
    struct alignas(64) Slot {
        std::atomic<uint64_t> lohi{0};
        int phase = 0;  // this thread's count of phases (only it touches it)
    };
    Slot* begin_phase(int ith, int nth, int64_t n, int64_t align);
    static bool claim_front(Slot& s, int64_t chunk, Range& r);
    static bool claim_back(Slot& s, int64_t chunk, int64_t align, Range& r);

    int n_threads_;
    // Two phases' slots, alternating, so that a phase's shares are set up
    // while a late thread may still read the previous phase's (all taken).
    std::vector<Slot> slots_;
};

}  // namespace specd
