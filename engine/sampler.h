// Token sampling as llama.cpp's default chain: logit bias → penalties
// (repetition, then frequency and presence) → top-k → top-p → min-p →
// temperature → softmax → draw. distribution() exposes the
// exact distribution sample() draws from, for the speculative verifier.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace specd {

// One logit_bias entry: `bias` is added to the logit of `token` before any
// other transform; -inf (llama-server's `false`) means never this token.
struct LogitBias {
    int32_t token = 0;
    float bias = 0.0f;
};

// The most alternatives a request may ask for per token (OpenAI's
// top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

// The most logit_bias entries a request may give (OpenAI documents none;
// its API refuses more than 300).
inline constexpr size_t kMaxLogitBias = 300;

// Which tokens presence_penalty and frequency_penalty count. The two APIs
// disagree: OpenAI counts "how often the token was sampled prior to the
// current position" (the output only, all of it); llama.cpp's penalties
// sampler counts the last repeat_last_n tokens of prompt + output, the same
// window as its repetition penalty.
enum class PenaltyWindow : int8_t {
    Output = 0,  // OpenAI: every generated token, none of the prompt
    LastN = 1,   // llama-server: the last repeat_last_n tokens of prompt + output (0: off, -1: all)
};

struct SamplingParams {              // defaults as llama.cpp's
    float temperature = 0.8f;        // <= 0: greedy (argmax of the transformed logits)
    int32_t top_k = 40;              // <= 0: off
    float top_p = 0.95f;             // in [0, 1]; 1: off
    float min_p = 0.05f;             // in [0, 1]; 0: off
    float repeat_penalty = 1.0f;     // > 0; 1: off. A repeated token's logit l becomes l / penalty if l > 0, else l * penalty
    int32_t repeat_last_n = 64;      // tokens of history penalised; 0: off, -1: all of it
    uint64_t seed = 0xFFFFFFFF;      // LLAMA_DEFAULT_SEED: a random seed from std::random_device
    // Fields after the seed, so that positional initialisers keep their meaning.
    float presence_penalty = 0.0f;   // finite; 0: off. Subtracted once from the logit of every counted token
    float frequency_penalty = 0.0f;  // finite; 0: off. Subtracted once per occurrence of a counted token
    PenaltyWindow penalty_window = PenaltyWindow::Output;  // which tokens those two count
    // history[0, n_prompt) is the prompt, which PenaltyWindow::Output does
    // not count. Not a client's setting: the decoders (PlainDecoder,
    // SpeculativeDecoder, SessionCore) set it from the prompt they start
    // with, so it travels with the parameters to every sampler of the
    // request (target rows, draft rows) without a second channel.
    int32_t n_prompt = 0;
    std::vector<LogitBias> logit_bias;  // <= kMaxLogitBias entries, added in order (repeated ids add up)
    // Coupled noise (engine/coupled_sampling.h): each position's token is
    // coupled_pick(distribution, seed, position) instead of a draw from the
    // request's random stream, and a drafted token is accepted iff it is
    // that pick. The text then depends on (seed, prompt) only, not on the
    // speculation (issue 35, item 9). false: the stream and the rejection
    // rule. Honoured by the batch path (SessionCore, BatchVerifier,
    // BatchDrafter, DraftVerifier).
    bool coupled = false;
    // Log-probabilities to report per emitted token (engine/token_logprobs.h):
    // -1 none; 0..kMaxTopLogprobs the chosen token's and that many most
    // likely alternatives. Not a transform: it only makes the verifier keep
    // the logits (no argmax-only forward) and read them.
    int32_t logprobs = -1;
    // GBNF text (engine/grammar.h) the output must match; empty: none (the
    // default). Not applied by the Sampler: the decoders that support it
    // (BatchVerifier with SessionCore, PlainDecoder) mask each row's logits
    // with it before these transforms (engine/grammar_decode.h), as
    // llama.cpp applies its grammar first. Text rather than a parsed
    // grammar, so it travels in messages like every other field.
    std::string grammar;
    // specd::Error naming the field, the value and the allowed range.
    void validate() const;
    // validate(), and every logit_bias id inside a vocabulary of n_vocab
    // (where a request starts; a draft's sampler skips ids past its own,
    // narrower, vocabulary instead).
    void validate_for(int32_t n_vocab) const;
    bool greedy() const { return temperature <= 0.0f; }
    // Something changes the logits before the filters: a penalty or a bias.
    bool transforms_logits() const {
        return (repeat_penalty != 1.0f && repeat_last_n != 0) || presence_penalty != 0.0f || frequency_penalty != 0.0f ||
               !logit_bias.empty();
    }
    // Greedy with nothing that changes the logits first: the token is the
    // plain argmax of the logits, so a backend may return only that
    // (ForwardBackend::forward_greedy).
    // A grammar masks the row first, so it rules the shortcut out too.
    bool plain_argmax() const { return greedy() && !transforms_logits() && grammar.empty(); }
};

// The longest grammar a request may carry (bytes of GBNF).
inline constexpr size_t kMaxGrammarBytes = 256 * 1024;

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
    // penalties; history[0, params.n_prompt) is the prompt. No allocation. Exactly draw(distribution(logits, history), rng):
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
    // The logits after logit_bias and the penalties, before the filters and
    // the temperature: `logits` itself when nothing applies, else the
    // sampler's scratch (n_vocab; valid until the next call). NaN and +inf
    // are left as they are (readers sanitise).
    const float* transformed_logits(const float* logits, std::span<const int32_t> history) {
        return apply_transforms(logits, history) ? transformed_.data() : logits;
    }

private:
    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    // Transforms and filters into candidates_[0, n); returns n (>= 1).
    // Greedy: the argmax alone. Otherwise p is the final probability, in an
    // order that depends only on the inputs.
    size_t prepare(const float* logits, std::span<const int32_t> history);
    // logit_bias, then the penalties, into transformed_ (a copy of logits);
    // false when nothing applies (the logits are read as they are).
    bool apply_transforms(const float* logits, std::span<const int32_t> history);
    void check_history_token(int32_t token) const;
    size_t top_p_filter(size_t n);

    SamplingParams params_;
    int32_t n_vocab_;
    std::vector<Candidate> candidates_;  // (n_vocab) scratch
    std::vector<float> transformed_;     // (n_vocab) the logits after logit_bias and the penalties
    std::vector<uint32_t> seen_mark_;    // (n_vocab) == mark_: token already repeat-penalised this call
    uint32_t mark_ = 0;
    std::vector<uint32_t> counts_;       // (n_vocab) occurrences in the counted window; all zero between calls
    std::vector<int32_t> counted_;       // (<= n_vocab) the distinct tokens whose counts_ are non-zero
};

}  // namespace specd
