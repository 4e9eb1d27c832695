#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "engine/grammar_decode.h"

#include "engine/coupled_sampling.h"

namespace specd {

const char* stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::Eos: return "eos";
        case StopReason::Length: return "length";
        case StopReason::ContextFull: return "context";
        case StopReason::Cancelled: return "cancelled";
        case StopReason::StopSequence: return "stop_sequence";
    }
    return "unknown";
}

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void check_prompt_fits(size_t n_prompt_tokens, int32_t n_ctx) {
    if (n_prompt_tokens == 0) throw Error("the prompt is empty (no tokens after tokenization)");
    if (n_prompt_tokens >= static_cast<size_t>(n_ctx)) {
        throw ContextError("the prompt has " + std::to_string(n_prompt_tokens) + " tokens, more than the context of " +
                    std::to_string(n_ctx) + " allows (at most " + std::to_string(n_ctx - 1) + ")");
    }
}

std::span<const float> prefill(ForwardBackend& fwd, PagedKvCache& kv, int32_t seq, std::span<const int32_t> prompt) {
    check_prompt_fits(prompt.size(), kv.shape().max_seq_len);
    const size_t chunk = static_cast<size_t>(fwd.options().max_batch_tokens);
    std::span<const float> logits;
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
        BatchItem item;
        item.seq = seq;
        item.tokens = prompt.subspan(begin, std::min(chunk, prompt.size() - begin));
        logits = fwd.forward(kv, std::span<const BatchItem>(&item, 1));
    }
    return logits;
}

PlainDecoder::PlainDecoder(ForwardBackend& fwd, PagedKvCache& kv) : fwd_(fwd), kv_(kv) {
    history_.reserve(static_cast<size_t>(kv.shape().max_seq_len));
}

GenerationResult PlainDecoder::generate(std::span<const int32_t> prompt, const GenerationParams& params,
                                        const TokenCallback& on_token) {
    // The penalties' output window starts after the prompt; logit_bias ids must be the target's.
    SamplingParams sampling = params.sampling;
    sampling.n_prompt = static_cast<int32_t>(prompt.size());
    sampling.validate_for(fwd_.n_vocab());
    if (params.max_tokens < 0) throw Error("max_tokens must be >= 0, got " + std::to_string(params.max_tokens));
    const int32_t n_ctx = kv_.shape().max_seq_len;
    check_prompt_fits(prompt.size(), n_ctx);

    GenerationResult result;
    result.n_prompt = static_cast<int32_t>(prompt.size());
    result.tokens.reserve(static_cast<size_t>(params.max_tokens));
    history_.assign(prompt.begin(), prompt.end());
    const int32_t seq = kv_.create_sequence();
    struct SeqGuard {
        PagedKvCache& kv;
        int32_t seq;
        ~SeqGuard() { kv.free_sequence(seq); }
    } guard{kv_, seq};

    Sampler sampler(sampling, fwd_.n_vocab());
    Rng rng(params.sampling.seed);
    std::vector<TokenProb> dist;  // (<= n_vocab) a coupled pick's distribution
    const Tokenizer& tok = fwd_.model().tokenizer();
    // A grammar masks each row before the sampler's transforms (as the
    // server's verifier does), and ends the text where it is complete.
    std::unique_ptr<GrammarMatcher> grammar;
    std::unique_ptr<TokenTrie> trie;
    std::vector<float> masked;     // (n_vocab) the row after the grammar's mask
    std::vector<uint8_t> allowed;  // (n_vocab) mask scratch
    if (!sampling.grammar.empty()) {
        grammar = std::make_unique<GrammarMatcher>(compile_request_grammar(sampling.grammar));
        trie = std::make_unique<TokenTrie>(tok);
    }

    const double t0 = now_ms();
    std::span<const float> logits = prefill(fwd_, kv_, seq, prompt);
    const double t1 = now_ms();
    result.prompt_ms = t1 - t0;

    while (true) {
        if (static_cast<int32_t>(result.tokens.size()) >= params.max_tokens) {
            result.stop = StopReason::Length;
            break;
        }
        const float* row = logits.data();
        if (grammar) {
            if (!mask_rows(*grammar, tok, *trie, {}, row, fwd_.n_vocab(), masked, allowed))
                throw Error("grammar: no token of the vocabulary can continue the text");
            row = masked.data();
        }
        const int32_t next = sampling.coupled ? coupled_sample(sampler, row, history_, dist) : sampler.sample(row, history_, rng);
        if (grammar) {
            grammar->accept_token(tok, next);
            if (tok.is_end_of_generation(next)) {
                result.stop = StopReason::Eos;
                break;
            }
        }
        if (params.stop_at_eos && tok.is_end_of_generation(next)) {
            result.stop = StopReason::Eos;
            break;
        }
        result.tokens.push_back(next);
        history_.push_back(next);
        if (on_token && !on_token(next)) {
            result.stop = StopReason::Cancelled;
            break;
        }
        if (kv_.length(seq) >= n_ctx) {
            result.stop = StopReason::ContextFull;
            break;
        }
        if (static_cast<int32_t>(result.tokens.size()) >= params.max_tokens) {
            result.stop = StopReason::Length;
            break;
        }
        if (grammar && grammar->must_end()) {  // complete, and nothing more may follow
            result.stop = StopReason::Eos;
            break;
        }
        BatchItem item;
        item.seq = seq;
        item.tokens = std::span<const int32_t>(&history_.back(), 1);
        logits = fwd_.forward(kv_, std::span<const BatchItem>(&item, 1));
    }
    result.gen_ms = now_ms() - t1;
    return result;
}

}  // namespace specd
