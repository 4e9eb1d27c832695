#include "engine/coupled_sampling.h"

#include <cmath>
#include <limits>

#include "engine/error.h"

namespace specd {

namespace {
// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace

uint64_t coupled_position_key(uint64_t seed, int64_t position) {
    return mix(mix(seed ^ 0x2545f4914f6cdd1dull) ^ static_cast<uint64_t>(position));
}

double coupled_uniform(uint64_t position_key, int32_t token) {
    const uint64_t bits = mix(position_key ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) * 0xd1b54a32d192ed03ull));
    return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;  // (0, 1): the half keeps 0 out
}

int32_t coupled_pick(std::span<const TokenProb> dist, uint64_t seed, int64_t position) {
    if (dist.empty()) throw Error("coupled sampling: the distribution is empty");
    const uint64_t key = coupled_position_key(seed, position);
    int32_t best = dist[0].id;
    double best_time = std::numeric_limits<double>::infinity();
    for (const TokenProb& tp : dist) {
        if (!(tp.p > 0.0f)) continue;
        // Arrival time of token tp.id's exponential clock of rate p.
        const double time = -std::log(coupled_uniform(key, tp.id)) / static_cast<double>(tp.p);
        if (time < best_time || (time == best_time && tp.id < best)) {
            best_time = time;
            best = tp.id;
        }
    }
    return best;
}

int32_t coupled_sample(Sampler& sampler, const float* logits, std::span<const int32_t> history, std::vector<TokenProb>& scratch) {
    sampler.distribution(logits, history, scratch);
    return coupled_pick(scratch, sampler.params().seed, static_cast<int64_t>(history.size()));
}

}  // namespace specd
