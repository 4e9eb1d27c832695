#include "engine/proposer.h"

#include <algorithm>
#include <cmath>

#include "engine/forward.h"

namespace specd {

// ------------------------------------------------------------------ n-gram ---

NgramProposer::NgramProposer(int32_t ngram_min, int32_t ngram_max) : ngram_min_(ngram_min), ngram_max_(ngram_max) {
    if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64) {
        throw Error("n-gram sizes must satisfy 1 <= ngram-min <= ngram-max <= 64, got " + std::to_string(ngram_min) +
                    ".." + std::to_string(ngram_max));
    }
}

void NgramProposer::propose(const ProposeRequest& request, Draft& out) {
    out.clear();
    const std::span<const int32_t> ctx = request.context;
    const int64_t len = static_cast<int64_t>(ctx.size());
    for (int64_t n = std::min<int64_t>(ngram_max_, len - 1); n >= ngram_min_; --n) {
        const int32_t* suffix = ctx.data() + len - n;
        // Most recent earlier occurrence first: the nearest context repeats best.
        for (int64_t start = len - n - 1; start >= 0; --start) {
            if (!std::equal(suffix, suffix + n, ctx.data() + start)) continue;
            const int64_t follow = start + n;  // first token after the match (< len)
            const int64_t count = std::min<int64_t>(request.k, len - follow);
            out.tokens.assign(ctx.begin() + follow, ctx.begin() + follow + count);
            return;
        }
    }
}

// ------------------------------------------------------------- draft model ---

void check_vocab_compatible(const LlamaModel& target, const LlamaModel& draft) {
    const Tokenizer& t = target.tokenizer();
    const Tokenizer& d = draft.tokenizer();
    const std::string where = "draft model " + draft.path() + " cannot draft for " + target.path() + ": ";
    if (t.n_vocab() != d.n_vocab()) {
        throw Error(where + "vocabulary sizes differ (" + std::to_string(d.n_vocab()) + " vs " +
                    std::to_string(t.n_vocab()) + ")");
    }
    if (t.bos_id() != d.bos_id() || t.eos_id() != d.eos_id()) {
        throw Error(where + "BOS/EOS ids differ (" + std::to_string(d.bos_id()) + "/" + std::to_string(d.eos_id()) +
                    " vs " + std::to_string(t.bos_id()) + "/" + std::to_string(t.eos_id()) + ")");
    }
    for (int32_t id = 0; id < t.n_vocab(); ++id) {
        if (t.token_text(id) != d.token_text(id) || t.token_type(id) != d.token_type(id)) {
            throw Error(where + "token " + std::to_string(id) + " is '" + d.token_text(id) + "' in the draft but '" +
                        t.token_text(id) + "' in the target");
        }
    }
}

namespace {
ForwardOptions draft_options(int32_t draft_head_tokens) {
    ForwardOptions o;
    o.draft_head_tokens = draft_head_tokens;
    return o;
}
}  // namespace

DraftModelProposer::DraftModelProposer(const LlamaModel& target, const LlamaModel& draft, ThreadPool& pool,
                                       int32_t n_ctx, int32_t draft_head_tokens)
    : DraftModelProposer(target, std::make_unique<ForwardPass>(draft, pool, draft_options(draft_head_tokens)), n_ctx) {}

DraftModelProposer::DraftModelProposer(const LlamaModel& target, std::unique_ptr<ForwardBackend> draft_backend,
                                       int32_t n_ctx)
    : draft_(draft_backend->model()), fwd_(std::move(draft_backend)) {
    kv_ = fwd_->make_kv_cache(fwd_->kv_shape(std::min(n_ctx, draft_.hparams().n_ctx_train), 1));
    check_vocab_compatible(target, draft_);
    cached_.reserve(static_cast<size_t>(n_ctx));
    history_.reserve(static_cast<size_t>(n_ctx));
}

std::string DraftModelProposer::name() const {
    return "draft:" + draft_.name() + "-" + tensor_type_name(draft_.weight_type());
}

void DraftModelProposer::begin(std::span<const int32_t> prompt) {
    end();
    seq_ = kv_->create_sequence();
    prefill(*fwd_, *kv_, seq_, prompt);
    cached_.assign(prompt.begin(), prompt.end());
    sampler_.reset();
}

void DraftModelProposer::end() {
    if (seq_ >= 0) kv_->free_sequence(seq_);
    seq_ = -1;
    cached_.clear();
}

void DraftModelProposer::rollback_to(std::span<const int32_t> context) {
    size_t common = 0;
    const size_t limit = std::min(cached_.size(), context.size());
    while (common < limit && cached_[common] == context[common]) ++common;
    // The last context token must be fed to get the next distribution.
    if (common == context.size() && common > 0) --common;
    cached_.resize(common);
    kv_->truncate(seq_, static_cast<int32_t>(common));
}

void DraftModelProposer::accept(std::span<const int32_t> context) {
    if (seq_ >= 0) rollback_to(context);
}

void DraftModelProposer::propose(const ProposeRequest& request, Draft& out) {
    out.clear();
    if (seq_ < 0) throw Error("draft proposer: propose() before begin()");
    const SamplingParams& sp = *request.sampling;
    if (!sampler_ || sampler_params_.temperature != sp.temperature || sampler_params_.top_k != sp.top_k ||
        sampler_params_.top_p != sp.top_p || sampler_params_.min_p != sp.min_p ||
        sampler_params_.repeat_penalty != sp.repeat_penalty || sampler_params_.repeat_last_n != sp.repeat_last_n) {
        sampler_ = std::make_unique<Sampler>(sp, fwd_->n_vocab());
        sampler_params_ = sp;
    }
    rollback_to(request.context);
    const int32_t room = kv_->shape().max_seq_len - static_cast<int32_t>(request.context.size());
    const int32_t k = std::min(request.k, room);
    if (k <= 0) return;

    BatchItem item;
    item.seq = seq_;
    item.tokens = request.context.subspan(cached_.size());
    // Greedy without penalty or p_min needs only the argmax: a backend with
    // forward_greedy (a GPU) then returns one int instead of the logits.
    const bool argmax_only = sp.plain_argmax() && !(request.p_min > 0.0f);
    int32_t argmax = -1;
    bool have_argmax = false;
    std::span<const float> logits;
    auto run = [&] {
        have_argmax = argmax_only && fwd_->forward_greedy(*kv_, std::span<const BatchItem>(&item, 1), std::span<int32_t>(&argmax, 1));
        if (have_argmax && (argmax < 0 || argmax >= fwd_->n_vocab())) {
            // An all-NaN row has no argmax (the device reports an id outside the vocabulary).
            throw Error("forward_greedy: a logit row has no argmax (every logit NaN?): got " + std::to_string(argmax));
        }
        if (!have_argmax) logits = fwd_->forward(*kv_, std::span<const BatchItem>(&item, 1));
    };
    run();
    cached_.insert(cached_.end(), item.tokens.begin(), item.tokens.end());
    history_.assign(request.context.begin(), request.context.end());
    const bool greedy = sp.greedy();
    const int32_t V = fwd_->n_vocab();
    for (int32_t i = 0; i < k; ++i) {
        int32_t token;
        if (have_argmax) {
            token = argmax;  // greedy, p_min 0: nothing else to check
        } else if (greedy) {
            token = sampler_->sample(logits.data(), history_, *request.rng);
            if (request.p_min > 0.0f) {
                // Softmax probability of the greedy pick.
                const float top = logits[static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())];
                double sum = 0.0;
                for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[static_cast<size_t>(v)] - top));
                if (1.0 / sum < request.p_min) break;
            }
        } else {
            sampler_->distribution(logits.data(), history_, dist_);
            if (dist_.empty() || dist_.front().p < request.p_min) break;
            token = Sampler::draw(dist_, *request.rng);
            if (out.probs.size() <= static_cast<size_t>(i)) out.probs.emplace_back();
            out.probs[static_cast<size_t>(i)].assign(dist_.begin(), dist_.end());
            out.has_probs = true;
        }
        out.tokens.push_back(token);
        history_.push_back(token);
        if (i + 1 == k) break;
        item.tokens = std::span<const int32_t>(&history_.back(), 1);
        run();
        cached_.push_back(token);
    }
}

}  // namespace specd
