#include "engine/proposer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine/coupled_sampling.h"
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

namespace {

// A token text on one line: control bytes escaped (added tokens may hold newlines).
std::string one_line(const std::string& text) {
    std::string out;
    for (const char c : text) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20 || u == 0x7f) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
    return out;
}

const char* kind_name(VocabKind k) { return k == VocabKind::Spm ? "SPM" : "BPE"; }

}  // namespace

void check_vocab_compatible(const LlamaModel& target, const LlamaModel& draft) {
    const Tokenizer& t = target.tokenizer();
    const Tokenizer& d = draft.tokenizer();
    const std::string where = "draft model " + draft.path() + " cannot draft for " + target.path() + ": ";
    if (t.kind() != d.kind()) {
        throw Error(where + "vocabulary types differ (draft " + kind_name(d.kind()) + ", target " + kind_name(t.kind()) + ")");
    }
    if (t.add_bos() != d.add_bos() || (t.add_bos() && t.bos_id() != d.bos_id())) {
        throw Error(where + "BOS differs (draft add_bos " + (d.add_bos() ? "true" : "false") + ", id " + std::to_string(d.bos_id()) +
                    "; target add_bos " + (t.add_bos() ? "true" : "false") + ", id " + std::to_string(t.bos_id()) + ")");
    }
    if (t.add_eos() != d.add_eos() || (t.add_eos() && t.eos_id() != d.eos_id())) {
        throw Error(where + "EOS differs (draft add_eos " + (d.add_eos() ? "true" : "false") + ", id " + std::to_string(d.eos_id()) +
                    "; target add_eos " + (t.add_eos() ? "true" : "false") + ", id " + std::to_string(t.eos_id()) + ")");
    }
    const int32_t diff = std::abs(t.n_vocab() - d.n_vocab());
    if (diff > kDraftVocabMaxSizeDifference) {
        throw Error(where + "vocabulary sizes differ by " + std::to_string(diff) + " (draft " + std::to_string(d.n_vocab()) +
                    ", target " + std::to_string(t.n_vocab()) + "; at most " + std::to_string(kDraftVocabMaxSizeDifference) +
                    " allowed)");
    }
    const int32_t n = std::min(t.n_vocab(), d.n_vocab());
    for (int32_t id = kDraftVocabCheckStartId; id < n; ++id) {
        if (t.token_text(id) != d.token_text(id)) {
            throw Error(where + "token " + std::to_string(id) + " is '" + one_line(d.token_text(id)) + "' in the draft but '" +
                        one_line(t.token_text(id)) + "' in the target");
        }
    }
}

DraftVocabMap::DraftVocabMap(const LlamaModel& draft, int32_t target_vocab)
    : draft_vocab(draft.hparams().n_vocab),
      limit(target_vocab > 0 ? std::min(target_vocab, draft.hparams().n_vocab) : draft.hparams().n_vocab) {
    const int32_t unk = draft.tokenizer().unk_id();
    substitute = unk >= 0 && unk < draft_vocab ? unk : 0;
}

void DraftVocabMap::map_inputs(std::span<const int32_t> ids, std::vector<int32_t>& out) const {
    out.clear();
    for (const int32_t id : ids) out.push_back(input(id));
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
    : draft_(draft_backend->model()), vocab_(draft_backend->model(), target.hparams().n_vocab), fwd_(std::move(draft_backend)) {
    check_vocab_compatible(target, draft_);
    kv_ = fwd_->make_kv_cache(fwd_->kv_shape(std::min(n_ctx, draft_.hparams().n_ctx_train), 1));
    cached_.reserve(static_cast<size_t>(n_ctx));
    history_.reserve(static_cast<size_t>(n_ctx));
}

std::string DraftModelProposer::name() const {
    return "draft:" + draft_.name() + "-" + tensor_type_name(draft_.weight_type());
}

void DraftModelProposer::begin(std::span<const int32_t> prompt) {
    end();
    seq_ = kv_->create_sequence();
    vocab_.map_inputs(prompt, history_);
    prefill(*fwd_, *kv_, seq_, history_);
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
    // The request's own transforms (penalties over the drafted tokens too,
    // logit_bias), so the draft proposes what the target will keep.
    if (!sampler_) sampler_ = std::make_unique<Sampler>(sp, vocab_.limit);  // reads only the ids the target has
    else sampler_->set_params(sp);
    rollback_to(request.context);
    const int32_t room = kv_->shape().max_seq_len - static_cast<int32_t>(request.context.size());
    const int32_t k = std::min(request.k, room);
    if (k <= 0) return;

    vocab_.map_inputs(request.context, history_);
    BatchItem item;
    item.seq = seq_;
    item.tokens = std::span<const int32_t>(history_).subspan(cached_.size());
    // Greedy without a logit transform or p_min needs only the argmax: a backend with
    // forward_greedy (a GPU) then returns one int instead of the logits; not
    // when the draft has ids the target lacks (its argmax may be one).
    const bool argmax_only = sp.plain_argmax() && !(request.p_min > 0.0f) && !vocab_.masks();
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
    // cached_ holds the context's own ids (rollback compares them), the draft was fed history_'s.
    cached_.insert(cached_.end(), request.context.begin() + static_cast<std::ptrdiff_t>(cached_.size()), request.context.end());
    const bool greedy = sp.greedy();
    const int32_t V = vocab_.limit;  // the masked distribution: ids the target has
    for (int32_t i = 0; i < k; ++i) {
        int32_t token;
        if (have_argmax) {
            token = argmax;  // greedy, p_min 0: nothing else to check
        } else if (greedy) {
            token = sampler_->sample(logits.data(), history_, *request.rng);
            if (request.p_min > 0.0f) {
                // Softmax probability of the greedy pick.
                const float top = *std::max_element(logits.begin(), logits.begin() + V);
                double sum = 0.0;
                for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[static_cast<size_t>(v)] - top));
                if (1.0 / sum < request.p_min) break;
            }
        } else {
            sampler_->distribution(logits.data(), history_, dist_);
            if (dist_.empty() || dist_.front().p < request.p_min) break;
            if (sp.coupled) {
                // The target's noise at this position (engine/coupled_sampling.h):
                // the verifier needs no distribution.
                token = coupled_pick(dist_, sp.seed, static_cast<int64_t>(history_.size()));
            } else {
                token = Sampler::draw(dist_, *request.rng);
                if (out.probs.size() <= static_cast<size_t>(i)) out.probs.emplace_back();
                out.probs[static_cast<size_t>(i)].assign(dist_.begin(), dist_.end());
                out.has_probs = true;
            }
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
