#include "engine/batch_drafter.h"

#include <algorithm>
#include <cmath>

#include "engine/coupled_sampling.h"
#include "engine/generate.h"

namespace specd {

ContextUpdate make_context_update(std::vector<int32_t>& sent, std::span<const int32_t> context) {
    ContextUpdate u;
    size_t common = 0;
    const size_t limit = std::min(sent.size(), context.size());
    while (common < limit && sent[common] == context[common]) ++common;
    u.keep = static_cast<int32_t>(common);
    u.tail.assign(context.begin() + static_cast<std::ptrdiff_t>(common), context.end());
    sent.assign(context.begin(), context.end());
    return u;
}

const std::vector<int32_t>* ContextMirror::apply(uint64_t request, int32_t keep, std::span<const int32_t> tail) {
    if (keep < 0) return nullptr;
    auto it = held_.find(request);
    if (it == held_.end()) {
        if (keep > 0) return nullptr;
        it = held_.emplace(request, std::vector<int32_t>{}).first;
    }
    std::vector<int32_t>& ctx = it->second;
    if (static_cast<size_t>(keep) > ctx.size()) {
        held_.erase(it);
        return nullptr;
    }
    ctx.resize(static_cast<size_t>(keep));
    ctx.insert(ctx.end(), tail.begin(), tail.end());
    return &ctx;
}

namespace {

// A row without any ordered logit (all NaN) has no argmax: the device then
// reports an id outside the vocabulary; fail as the host sampler does.
void check_argmax(std::span<const int32_t> argmax, int32_t n_vocab) {
    for (const int32_t t : argmax) {
        if (t < 0 || t >= n_vocab) throw Error("forward_greedy: a logit row has no argmax (every logit NaN?): got " + std::to_string(t));
    }
}

}  // namespace

BatchDrafter::BatchDrafter(ForwardBackend* draft_fwd, PagedKvCache* draft_kv, int32_t ngram_min, int32_t ngram_max,
                           int32_t target_vocab)
    : fwd_(draft_fwd), kv_(draft_kv), vocab_(draft_fwd ? DraftVocabMap(draft_fwd->model(), target_vocab) : DraftVocabMap()),
      ngram_(ngram_min, ngram_max), sampler_(SamplingParams{}, draft_fwd ? vocab_.limit : 1) {
    if ((fwd_ == nullptr) != (kv_ == nullptr)) throw Error("drafter: a draft model needs both its forward pass and its cache");
}

void BatchDrafter::enable_prefix_cache(BlockHasher hasher) {
    if (kv_ && !cache_) cache_ = std::make_unique<PrefixCache>(*kv_, hasher);
}

void BatchDrafter::close(uint64_t request) {
    auto it = requests_.find(request);
    if (it == requests_.end()) return;
    if (kv_ && it->second.seq >= 0) {
        if (cache_) cache_->insert(it->second.seq, it->second.cached);
        kv_->free_sequence(it->second.seq);
    }
    requests_.erase(it);
}

void BatchDrafter::draft(std::span<const DraftJob> jobs, std::vector<DraftOutcome>& out) {
    const size_t first_out = out.size();
    const double t0 = now_ms();
    for (const DraftJob& job : jobs) {
        DraftOutcome o;
        o.request = job.request;
        o.tag = job.tag;
        o.rng = job.rng;
        o.batch_requests = static_cast<int32_t>(jobs.size());
        if (!fwd_ && job.k > 0 && !job.context.empty()) {
            ProposeRequest req;
            req.context = job.context;
            req.k = job.k;
            ngram_.propose(req, o.draft);
        }
        out.push_back(std::move(o));
    }
    if (fwd_) model_draft(jobs, out, first_out);
    const double ms = now_ms() - t0;
    for (size_t i = first_out; i < out.size(); ++i) out[i].step_ms = ms;
}

void BatchDrafter::model_draft(std::span<const DraftJob> jobs, std::vector<DraftOutcome>& out, size_t first_out) {
    const int32_t n_ctx = kv_->shape().max_seq_len;
    const size_t V = static_cast<size_t>(fwd_->n_vocab());      // logit row stride
    const size_t limit = static_cast<size_t>(vocab_.limit);     // ids the draft may propose (sampler_ reads these)
    const int32_t budget = fwd_->options().max_batch_tokens;
    active_.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
        const DraftJob& job = jobs[j];
        const int32_t room = n_ctx - static_cast<int32_t>(job.context.size());
        const int32_t k = std::min(job.k, room);
        if (k <= 0 || job.context.empty()) continue;
        auto it = requests_.find(job.request);
        if (it == requests_.end()) {
            Request r;
            try {
                r.seq = kv_->create_sequence();
            } catch (const Error&) {
                continue;  // no sequence slot: this request goes without a draft this step
            }
            if (cache_ && job.cache_prompt) {
                // Keyed by the context's own ids, as `cached` holds them.
                kv_->adopt_blocks(r.seq, cache_->match(job.context));
                r.cached.assign(job.context.begin(), job.context.begin() + kv_->length(r.seq));
            }
            it = requests_.emplace(job.request, std::move(r)).first;
        }
        Request& r = it->second;
        // Roll back to the longest prefix still valid; the last context
        // token is always fed again to get the next distribution.
        size_t common = 0;
        const size_t limit = std::min(r.cached.size(), job.context.size());
        while (common < limit && r.cached[common] == job.context[common]) ++common;
        if (common == job.context.size()) --common;
        r.cached.resize(common);
        kv_->truncate(r.seq, static_cast<int32_t>(common));
        if (!reserve_evicting(*kv_, cache_.get(), r.seq, static_cast<int32_t>(job.context.size()) + k - 1)) continue;  // draft pool full
        Active a{j, first_out + j, &r, {}, Rng(job.rng), k, true, nullptr, nullptr};
        if (!job.sampling.grammar.empty() && !vocab_.masks()) {
            // (A draft of another vocabulary proposes unmasked.)
            const Tokenizer& tok = fwd_->model().tokenizer();
            if (!r.grammar) r.grammar = std::make_unique<GrammarTracker>();
            if (r.grammar->sync(job.sampling.grammar, job.context, job.sampling.n_prompt, tok)) {
                if (!trie_) trie_ = std::make_unique<TokenTrie>(tok);
                a.grammar = &r.grammar->matcher();
                a.grammar_start = std::make_unique<GrammarMatcher::Position>(a.grammar->position());
            }
        }
        a.history.reserve(job.context.size() + static_cast<size_t>(k));
        vocab_.map_inputs(job.context, a.history);
        active_.push_back(std::move(a));
    }

    // Position 0 feeds each request's missing context (catch-up, chunked to
    // the batch budget); positions 1.. feed one drafted token each.
    while (true) {
        items_.clear();
        item_active_.clear();
        int32_t tokens = 0;
        for (size_t i = 0; i < active_.size(); ++i) {
            Active& a = active_[i];
            if (!a.live) continue;
            const size_t from = a.request->cached.size();
            const size_t n = a.history.size() - from;
            if (n == 0) continue;
            // Long catch-ups (a new request's prompt) go in pieces across
            // iterations; the piece holding the last token brings the logits.
            const int32_t take = std::min(static_cast<int32_t>(n), budget - tokens);
            if (take <= 0) break;
            BatchItem item;
            item.seq = a.request->seq;
            item.tokens = std::span<const int32_t>(a.history).subspan(from, static_cast<size_t>(take));
            items_.push_back(item);
            item_active_.push_back(i);
            tokens += take;
        }
        if (items_.empty()) break;
        // All greedy, no logit transform, no p_min (which needs the top probability):
        // only the argmax per row is needed; a backend with the capability
        // (a GPU) then copies items_.size() ints instead of the logits.
        bool all_greedy = true;
        for (const size_t i : item_active_) {
            const DraftJob& job = jobs[active_[i].job];
            all_greedy = all_greedy && job.sampling.plain_argmax() && !(job.p_min > 0.0f);
        }
        all_greedy = all_greedy && !vocab_.masks();  // the draft's own argmax may be an id the target lacks
        bool greedy = false;
        std::span<const float> logits;
        if (all_greedy) {
            argmax_.resize(items_.size());
            greedy = fwd_->forward_greedy(*kv_, items_, argmax_);
            if (greedy) check_argmax(argmax_, fwd_->n_vocab());
        }
        if (greedy) {
            ++greedy_forwards_;
        } else {
            logits = fwd_->forward(*kv_, items_);
        }
        for (size_t it = 0; it < items_.size(); ++it) {
            Active& a = active_[item_active_[it]];
            const DraftJob& job = jobs[a.job];
            // The context's own ids (rollback compares them with the next
            // context), drafted ones as fed (they are the same).
            for (size_t pos = a.request->cached.size(), end = pos + items_[it].tokens.size(); pos < end; ++pos) {
                a.request->cached.push_back(pos < job.context.size() ? job.context[pos] : a.history[pos]);
            }
            if (a.request->cached.size() < a.history.size()) continue;  // catch-up not finished
            DraftOutcome& o = out[a.outcome];
            const float* row = greedy ? nullptr : logits.data() + it * V;  // greedy: only argmax_ is read
            if (a.grammar) {  // (never greedy: a grammar rules out plain_argmax)
                masked_.assign(row, row + V);
                if (mask_row(*a.grammar, *trie_, masked_.data(), fwd_->n_vocab(), allowed_) == 0) {
                    a.live = false;
                    continue;
                }
                row = masked_.data();
            }
            sampler_.set_params(job.sampling);
            int32_t token;
            if (greedy) {
                token = argmax_[it];  // p_min is 0 for every job here: nothing else to check
            } else if (job.sampling.greedy()) {
                token = sampler_.sample(row, a.history, a.rng);
                if (job.p_min > 0.0f) {
                    const float top = *std::max_element(row, row + limit);
                    double sum = 0.0;
                    for (size_t v = 0; v < limit; ++v) sum += std::exp(static_cast<double>(row[v] - top));
                    if (1.0 / sum < job.p_min) {
                        a.live = false;
                        continue;
                    }
                }
            } else {
                sampler_.distribution(row, a.history, dist_);
                if (dist_.empty() || dist_.front().p < job.p_min) {
                    a.live = false;
                    continue;
                }
                if (job.sampling.coupled) {
                    // The target's noise at this position: the verifier
                    // accepts the token iff its own race picks it too, so
                    // it needs no draft distribution.
                    token = coupled_pick(dist_, job.sampling.seed, static_cast<int64_t>(a.history.size()));
                } else {
                    token = Sampler::draw(dist_, a.rng);
                    o.draft.probs.emplace_back(dist_.begin(), dist_.end());
                    o.draft.has_probs = true;
                }
            }
            if (a.grammar && !a.grammar->accept_token(fwd_->model().tokenizer(), token)) {
                a.live = false;  // (a masked row gave a token the grammar refuses: not proposed)
                continue;
            }
            o.draft.tokens.push_back(token);
            a.history.push_back(token);
            if (static_cast<int32_t>(o.draft.tokens.size()) >= a.k) a.live = false;  // the last draft is not fed
        }
    }
    for (Active& a : active_) {
        out[a.outcome].rng = a.rng.state();
        if (a.grammar) a.grammar->restore(*a.grammar_start);  // the next job's context says what was accepted
    }
}

}  // namespace specd
