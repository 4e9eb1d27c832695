#include "engine/membw.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/generate.h"

namespace specd {

double measure_read_bandwidth(ThreadPool& pool, size_t buffer_bytes, int repetitions) {
    const size_t words = buffer_bytes / sizeof(uint64_t);
    std::vector<uint64_t> buffer(words);  // (words) touched once so the pages exist
    for (size_t i = 0; i < words; ++i) buffer[i] = i;
    std::vector<uint64_t> sinks(static_cast<size_t>(pool.size()) * 8, 0);  // one cache line per thread
    std::vector<double> rates;
    for (int r = 0; r < std::max(1, repetitions); ++r) {
        const double t0 = now_ms();
        pool.run([&](int ith, int nth) {
            const Range range = split_range(static_cast<int64_t>(words), ith, nth, 64);
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
            const uint64_t* p = buffer.data();
            int64_t i = range.begin;
            for (; i + 8 <= range.end; i += 8) {
                a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];
                a4 += p[i + 4]; a5 += p[i + 5]; a6 += p[i + 6]; a7 += p[i + 7];
            }
            for (; i < range.end; ++i) a0 += p[i];
            sinks[static_cast<size_t>(ith) * 8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
        });
        const double ms = now_ms() - t0;
        rates.push_back(static_cast<double>(words * sizeof(uint64_t)) / (ms / 1000.0));
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

}  // namespace specd
