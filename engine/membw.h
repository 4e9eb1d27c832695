// Measures sustained DRAM read bandwidth with the thread pool: every thread
// streams its share of a buffer much larger than the last-level cache. The
// generation speed bound of a memory-bound model is bandwidth / bytes read
// per token (its weights).
#pragma once

#include <cstddef>

#include "engine/thread_pool.h"

namespace specd {

// Bytes per second, the median of `repetitions` passes over `buffer_bytes`.
double measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes = size_t{1} << 30, int repetitions = 5);

}  // namespace specd
