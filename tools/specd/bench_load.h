// What the runtime benchmarks share: `specd bench --concurrency`
// (cmd_serve.cpp) and `specd bench --url` (cmd_bench_net.cpp, whose
// in-process path is the same load and whose network requests use the same
// prompts): the prompts, the in-process load, and percentiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "actors/runtime.h"

namespace specd::cli {

// The prompts the benchmark requests rotate over (request i gets i % 6).
inline constexpr const char* kBenchPrompts[] = {
    "Once upon a time", "Lily and Ben went to the park.", "One day, a little girl named Sue found a shiny rock.",
    "The sun was hot", "Max the dog liked to run", "Anna saw a big bird in the tree. She"};
inline constexpr int kBenchPromptCount = 6;

struct LoadResult {
    double tokens_per_s = 0.0;
    std::vector<double> ttft_ms, itl_ms;  // per request; per token (a multi-token event's gap divided by its tokens)
    double acceptance = 0.0;
    int64_t load_capped = 0;
    int64_t tokens = 0, steps = 0, drafted = 0;  // over the requests: generated tokens, target steps, drafted tokens
    double draft_ms = 0.0, verify_ms = 0.0;       // over the requests: time of the draft and verifier steps they were in
    double wall_ms = 0.0;                         // first submit → last done
    int errors = 0;                               // requests that failed (each also printed on stderr)
};

// The p-th percentile (0..1) of v, nearest rank; 0 for none.
inline double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}
inline double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

// `concurrency` requests submitted at once, greedy, up to n tokens each;
// `ignore_eos` (default true) keeps generating past EOS so every request
// yields n tokens. Returns when all are done.
LoadResult run_load(Runtime& rt, int concurrency, int n, bool spec, bool ignore_eos = true);

}  // namespace specd::cli
