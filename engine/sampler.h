// Token sampling as llama.cpp's default chain: repetition penalty → top-k →
// top-p → min-p → temperature → softmax → draw. distribution() exposes the
// exact distribution sample() draws from, for the speculative verifier.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specd {

struct SamplingParams {              // defaults as llama.cpp's
    float temperature = 0.8f;        // <= 0: greedy (argmax of the penalised logits)
    int32_t top_k = 40;              // <= 0: off
    float top_p = 0.95f;             // in [0, 1]; 1: off
    float min_p = 0.05f;             // in [0, 1]; 0: off
    float repeat_penalty = 1.0f;     // > 0; 1: off. A repeated token's logit l becomes l / penalty if l > 0, else l * penalty
    int32_t repeat_last_n = 64;      // tokens of history penalised; 0: off, -1: all of it
    uint64_t seed = 0xFFFFFFFF;      // LLAMA_DEFAULT_SEED: a random seed from std::random_device
    // specd::Error naming the field, the value and the allowed range.
    void validate() const;
    bool greedy() const { return temperature <= 0.0f; }
    // Greedy with nothing that changes the logits first (no repetition
    // penalty): the token is the plain argmax of the logits, so a backend
    // may return only that (ForwardBackend::forward_greedy).
    bool plain_argmax() const { return greedy() && (repeat_penalty == 1.0f || repeat_last_n == 0); }
};

// The seed that asks for a random seed (LLAMA_DEFAULT_SEED).
inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

// The whole state of an Rng, so a request's random stream can travel in
// messages between the actors that draw from it in turn.
struct RngState {
    uint64_t s[4] = {0, 0, 0, 0};
};

// xoshiro256** seeded through splitmix64: small, fast, one per request.
class Rng {
public:
    explicit Rng(uint64_t seed);     // kRandomSeed: seeded from std::random_device
    explicit Rng(const RngState& state);
    uint64_t next_u64();
    double uniform();                // in [0, 1), 53 random bits
    RngState state() const;

private:
    uint64_t state_[4];
};

// The distribution a request samples from, as a sparse list after filtering:
// (token, prob) with probs summing to 1.
struct TokenProb {
    int32_t id;
    float p;
};

class Sampler {
public:
    // Validates params; allocates its scratch (n_vocab) once.
    Sampler(const SamplingParams& params, int32_t n_vocab);
    const SamplingParams& params() const { return params_; }
    int32_t n_vocab() const { return n_vocab_; }
    // Switches to other parameters (validated) and keeps the scratch, so one
    // sampler can serve many requests in turn.
    void set_params(const SamplingParams& params);

    // logits: (n_vocab); history: tokens so far (prompt + generated) for the
    // penalty. No allocation. Exactly draw(distribution(logits, history), rng):
    // the same token, and the same use of rng.
    int32_t sample(const float* logits, std::span<const int32_t> history, Rng& rng);
    // The final distribution the sampler would draw from; for greedy: a point
    // mass on the argmax (lowest id on ties). Writes into `out` (cleared,
    // capacity reused), sorted by decreasing p (lower id first on ties); no
    // entry has p = 0.
    void distribution(const float* logits, std::span<const int32_t> history, std::vector<TokenProb>& out);
    // Inverse CDF on one rng.uniform() over dist in its order; a single-entry
    // dist is returned without drawing. Throws specd::Error if dist is empty.
    static int32_t draw(std::span<const TokenProb> dist, Rng& rng);

private:
    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    // Penalty and filters into candidates_[0, n); returns n (>= 1). Greedy:
    // the argmax alone. Otherwise p is the final probability, in an order
    // that depends only on the inputs.
    size_t prepare(const float* logits, std::span<const int32_t> history);
    bool apply_penalty(const float* logits, std::span<const int32_t> history);
    size_t top_p_filter(size_t n);

    SamplingParams params_;
    int32_t n_vocab_;
    std::vector<Candidate> candidates_;  // (n_vocab) scratch
    std::vector<float> penalised_;       // (n_vocab) the logits after the repetition penalty
    std::vector<uint32_t> seen_mark_;    // (n_vocab) == mark_: token already penalised this call
    uint32_t mark_ = 0;
};

}  // namespace specd
