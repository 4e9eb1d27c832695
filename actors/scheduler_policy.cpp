// specd's CAF scheduler policy (configure_low_latency in actors/runtime.h).
#include <condition_variable>
#include <list>
#include <mutex>

#include <caf/policy/unprofiled.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "actors/runtime.h"

namespace specd {

namespace {

// CAF's work-sharing policy (one queue, workers sleep on a condition
// variable) with two changes for compute actors that share cores with it:
// - A worker is woken after the queue's lock is released. CAF signals
//   while holding it: the woken worker (on a core a compute thread fills)
//   blocked on the lock and was woken a second time by the unlock
//   (`perf record -e sched:sched_wakeup`, `specd bench --concurrency 1`:
//   2,924 signals and 2,411 unlock wake-ups from the verifier thread).
// - At most one worker is being woken at a time, and a worker that finds
//   more jobs behind the one it takes wakes the next. A verifier step that
//   answers 16 sessions so makes one wake-up call instead of one per
//   session, and no longer blocks inside pthread_cond_signal (glibc waits
//   there for earlier waiters to leave: 597 times in one c=16 run).
class prompt_work_sharing : public caf::policy::unprofiled {
public:
    using queue_type = std::list<caf::resumable*>;

    struct coordinator_data {
        explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}
        queue_type queue;  // guarded by lock
        std::mutex lock;
        std::condition_variable cv;
        int32_t sleeping = 0;  // workers waiting on cv
        bool waking = false;   // a worker was signalled and has not yet looked at the queue
    };

    struct worker_data {
        explicit worker_data(caf::scheduler::abstract_coordinator*) {}
    };

    template <class Coordinator>
    void enqueue(Coordinator* self, caf::resumable* job) {
        queue_type one;
        one.push_back(job);  // allocates outside the lock
        auto& data = d(self);
        bool wake = false;
        {
            std::lock_guard<std::mutex> guard(data.lock);
            data.queue.splice(data.queue.end(), one);
            wake = claim_wake(data);
        }
        if (wake) data.cv.notify_one();
    }
    template <class Coordinator>
    void central_enqueue(Coordinator* self, caf::resumable* job) {
        enqueue(self, job);
    }
    template <class Worker>
    void external_enqueue(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }
    template <class Worker>
    void internal_enqueue(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }
    template <class Worker>
    void resume_job_later(Worker* self, caf::resumable* job) {
        enqueue(self->parent(), job);
    }

    template <class Worker>
    caf::resumable* dequeue(Worker* self) {
        auto& data = d(self->parent());
        caf::resumable* job = nullptr;
        bool wake = false;
        {
            std::unique_lock<std::mutex> guard(data.lock);
            while (data.queue.empty()) {
                ++data.sleeping;
                data.cv.wait(guard);
                --data.sleeping;
                data.waking = false;  // signalled or not, this worker is the one looking now
            }
            job = data.queue.front();
            data.queue.pop_front();
            if (!data.queue.empty()) wake = claim_wake(data);  // more behind it: pass the baton
        }
        if (wake) data.cv.notify_one();
        return job;
    }

    template <class Worker, class UnaryFunction>
    void foreach_resumable(Worker*, UnaryFunction) {}

    template <class Coordinator, class UnaryFunction>
    void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
        auto& data = d(self);
        std::lock_guard<std::mutex> guard(data.lock);
        while (!data.queue.empty()) {
            caf::resumable* job = data.queue.front();
            data.queue.pop_front();
            f(job);
        }
    }

private:
    // Under the lock: whether the caller should signal a sleeping worker.
    static bool claim_wake(coordinator_data& data) {
        if (data.sleeping == 0 || data.waking) return false;
        data.waking = true;
        return true;
    }
};

}  // namespace

void configure_low_latency(caf::actor_system_config& cfg) { cfg.load<caf::scheduler::coordinator<prompt_work_sharing>>(); }

}  // namespace specd
