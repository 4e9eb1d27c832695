#include "engine/batch_verifier.h"

#include <algorithm>
#include <bit>

#include "engine/coupled_sampling.h"
#include "engine/generate.h"
#include "engine/grammar_decode.h"
#include "engine/verify_draft.h"

namespace specd {

BatchVerifier::BatchVerifier(ForwardBackend& target, PagedKvCache& kv, BatchVerifierOptions options)
    : fwd_(target), kv_(kv), options_(options), verifier_(target.n_vocab()), sampler_(SamplingParams{}, target.n_vocab()),
      logprob_reader_(target.n_vocab()) {
    if (options_.max_step_tokens < 1) throw Error("verifier: max_step_tokens must be >= 1");
    if (options_.prefill_chunk_tokens < 1) throw Error("verifier: prefill_chunk_tokens must be >= 1");
    options_.max_step_tokens = std::min(options_.max_step_tokens, fwd_.options().max_batch_tokens);
    items_.reserve(static_cast<size_t>(kv_.shape().max_sequences));
}

void BatchVerifier::open(uint64_t request) {
    if (requests_.count(request)) throw Error("verifier: request " + std::to_string(request) + " is already open");
    Request r;
    r.seq = kv_.create_sequence();
    r.history.reserve(static_cast<size_t>(kv_.shape().max_seq_len) + 1);
    requests_.emplace(request, std::move(r));
}

void BatchVerifier::enable_prefix_cache(BlockHasher hasher) {
    if (!cache_) cache_ = std::make_unique<PrefixCache>(kv_, hasher);
}

void BatchVerifier::close(uint64_t request) {
    auto it = requests_.find(request);
    if (it == requests_.end()) return;
    // Its keys and values stay for requests that start the same way (the
    // next turn of a chat starts with this one's prompt and reply).
    if (cache_) cache_->insert(it->second.seq, it->second.history);
    kv_.free_sequence(it->second.seq);
    requests_.erase(it);
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.job.request == request; }),
                 queue_.end());
}

VerifyOutcome BatchVerifier::fail(const VerifyJob& job, std::string why, bool kv_full) const {
    VerifyOutcome o;
    o.request = job.request;
    o.tag = job.tag;
    o.ok = false;
    o.kv_full = kv_full;
    o.error = std::move(why);
    o.rng = job.rng;
    return o;
}

void BatchVerifier::submit(VerifyJob job) {
    const int32_t n_vocab = fwd_.n_vocab();
    const int32_t n_ctx = kv_.shape().max_seq_len;
    const size_t n = job.tokens.size();
    if (n == 0) return rejected_.push_back(fail(job, "verifier: a job needs at least one token"));
    for (int32_t t : job.tokens) {
        if (t < 0 || t >= n_vocab)
            return rejected_.push_back(fail(job, "verifier: token id " + std::to_string(t) + " is outside the vocabulary (" +
                                                     std::to_string(n_vocab) + ")"));
    }
    try {
        job.sampling.validate();
    } catch (const Error& e) {
        return rejected_.push_back(fail(job, e.what()));
    }
    if (job.prefill) {
        std::shared_ptr<const Grammar> grammar;
        if (!job.sampling.grammar.empty()) {
            try {
                grammar = compile_request_grammar(job.sampling.grammar);
            } catch (const Error& e) {
                return rejected_.push_back(fail(job, e.what()));
            }
        }
        if (n > static_cast<size_t>(n_ctx - 1))
            return rejected_.push_back(fail(job, "prompt has " + std::to_string(n) + " tokens; the context holds " +
                                                     std::to_string(n_ctx) + " (at most " + std::to_string(n_ctx - 1) +
                                                     " for the prompt)"));
        if (requests_.count(job.request))
            return rejected_.push_back(fail(job, "verifier: request " + std::to_string(job.request) + " is already open"));
        try {
            open(job.request);
        } catch (const Error& e) {
            return rejected_.push_back(fail(job, std::string("KV cache: ") + e.what(), true));
        }
        Request& r = requests_[job.request];
        r.busy = true;
        if (grammar) r.grammar = std::make_unique<GrammarMatcher>(std::move(grammar));
        int32_t cached = 0;
        if (cache_ && job.cache_prompt) {
            // (Never the last prompt token: its row gives the first token.)
            const std::vector<int32_t> blocks = cache_->match(job.tokens);
            kv_.adopt_blocks(r.seq, blocks);
            cached = kv_.length(r.seq);
        }
        queue_.push_back(Queued{std::move(job), cached, cached});
        return;
    }
    auto it = requests_.find(job.request);
    if (it == requests_.end())
        return rejected_.push_back(fail(job, "verifier: request " + std::to_string(job.request) + " is not open"));
    Request& r = it->second;
    if (r.busy) return rejected_.push_back(fail(job, "verifier: request " + std::to_string(job.request) + " already has a job queued"));
    if (job.n_draft != static_cast<int32_t>(n) - 1)
        return rejected_.push_back(fail(job, "verifier: n_draft must be tokens - 1 (pending token + drafts)"));
    if (job.draft_has_probs && job.draft_probs.size() != static_cast<size_t>(job.n_draft))
        return rejected_.push_back(fail(job, "verifier: draft_probs must have one distribution per drafted token"));
    if (r.history.empty() || job.tokens[0] != r.history.back())
        return rejected_.push_back(fail(job, "verifier: the job's first token is not the request's pending token"));
    if (n > static_cast<size_t>(options_.max_step_tokens))
        return rejected_.push_back(fail(job, "verifier: " + std::to_string(n) + " tokens exceed the step budget of " +
                                                 std::to_string(options_.max_step_tokens)));
    if (static_cast<int32_t>(r.history.size()) - 1 + static_cast<int32_t>(n) > n_ctx)
        return rejected_.push_back(fail(job, "verifier: the verification does not fit the context of " + std::to_string(n_ctx)));
    r.busy = true;
    queue_.push_back(Queued{std::move(job), 0, 0});
}

const TokenTrie& BatchVerifier::trie() {
    if (!trie_) trie_ = std::make_unique<TokenTrie>(fwd_.model().tokenizer());
    return *trie_;
}

void BatchVerifier::finish_verify(Queued& q, Request& r, const TargetRows& target_rows, VerifyOutcome& o) {
    const VerifyJob& job = q.job;
    const int32_t cached_before = static_cast<int32_t>(r.history.size()) - 1;  // the pending token is not cached yet
    DraftToVerify draft{std::span<const int32_t>(job.tokens).subspan(1), {}};
    if (job.draft_has_probs) draft.probs = job.draft_probs;
    TargetRows rows = target_rows;
    const Tokenizer& tok = fwd_.model().tokenizer();
    if (r.grammar && rows.logits) {
        // A constrained request never takes the argmax path (plain_argmax()
        // is false), so its rows are here to mask.
        if (!mask_rows(*r.grammar, tok, trie(), draft.tokens, rows.logits, fwd_.n_vocab(), masked_, allowed_)) {
            o.ok = false;
            o.error = "grammar: no token of the vocabulary can continue the text";
            o.rng = job.rng;
            return;
        }
        rows.logits = masked_.data();
    }
    // The argmax path draws nothing: the request's random state comes back unchanged.
    if (rows.logits) sampler_.set_params(job.sampling);
    Rng rng(job.rng);
    const DraftVerdict verdict = verifier_.verify(rows, draft, sampler_, rng, r.history);
    kv_.truncate(r.seq, cached_before + 1 + verdict.n_accepted);
    if (rows.logits && job.sampling.logprobs >= 0) {
        // Row i chose token i of accepted + next, after the history up to it.
        const size_t V = static_cast<size_t>(fwd_.n_vocab());
        for (int32_t i = 0; i <= verdict.n_accepted; ++i) {
            const int32_t token = i < verdict.n_accepted ? job.tokens[static_cast<size_t>(i) + 1] : verdict.next;
            const auto seen = std::span<const int32_t>(r.history).first(static_cast<size_t>(cached_before + 1 + i));
            logprob_reader_.read(sampler_, rows.logits + static_cast<size_t>(i) * V, seen, token, o.logprobs);
        }
    }
    r.history.push_back(verdict.next);
    if (r.grammar) {
        // Every token here was drawn from a masked row: the grammar takes it.
        for (int32_t i = 0; i < verdict.n_accepted; ++i) r.grammar->accept_token(tok, draft.tokens[static_cast<size_t>(i)]);
        r.grammar->accept_token(tok, verdict.next);
    }
    o.n_accepted = verdict.n_accepted;
    o.next = verdict.next;
    o.rng = rng.state();
}

void StepCostProbe::record(int32_t rows, double ms) {
    if (rows < 1 || !(ms > 0.0)) return;
    auto ema = [](double old, double sample) { return old < 0.0 ? sample : old + kDecay * (sample - old); };
    const int range = std::min(kRanges - 1, static_cast<int>(std::bit_width(static_cast<uint32_t>(rows))) - 1);
    range_rows_[range].store(ema(range_rows_[range].load(std::memory_order_relaxed), rows), std::memory_order_relaxed);
    range_ms_[range].store(ema(range_ms_[range].load(std::memory_order_relaxed), ms), std::memory_order_relaxed);
    const double t1 = t1_ms_.load(std::memory_order_relaxed);
    if (rows == 1) {
        t1_ms_.store(ema(t1, ms), std::memory_order_relaxed);
    } else if (rows >= kMinRows && t1 > 0.0) {
        const double per_row = std::max(0.0, (ms - t1) / static_cast<double>(rows - 1));
        per_row_ms_.store(ema(per_row_ms_.load(std::memory_order_relaxed), per_row), std::memory_order_relaxed);
    }
}

double StepCostProbe::step_ms(double rows) const {
    const double t1 = t1_ms_.load(std::memory_order_relaxed);
    const double per_row = per_row_ms_.load(std::memory_order_relaxed);
    if (t1 <= 0.0 || per_row < 0.0) return -1.0;
    // The measured points in row order (the ranges are), starting at (1, T(1)).
    double px[kRanges], py[kRanges];
    int n = 0;
    px[n] = 1.0;
    py[n++] = t1;
    for (int b = 1; b < kRanges; ++b) {
        const double r = range_rows_[b].load(std::memory_order_relaxed), m = range_ms_[b].load(std::memory_order_relaxed);
        if (r > px[n - 1] && m > 0.0) {
            px[n] = r;
            py[n] = std::max(m, py[n - 1]);  // a step never costs less for more rows
            ++n;
        }
    }
    if (n == 1) return t1 + per_row * (rows - 1.0);
    int i = 1;
    while (i < n - 1 && rows > px[i]) ++i;  // the segment [px[i-1], px[i]] holding rows, or the last
    const double slope = (py[i] - py[i - 1]) / (px[i] - px[i - 1]);
    return std::max(t1, py[i - 1] + slope * (rows - px[i - 1]));
}

int32_t StepCostProbe::doubling_rows() const {
    const double t1 = t1_ms_.load(std::memory_order_relaxed);
    const double per_row = per_row_ms_.load(std::memory_order_relaxed);
    if (t1 <= 0.0 || per_row < 0.0) return 0;
    // T(r) = T(1) + (r - 1) * per_row = 2 * T(1)  =>  r = 1 + T(1) / per_row
    if (per_row * kMaxRows <= t1) return kMaxRows;
    return std::min(kMaxRows, 1 + static_cast<int32_t>(t1 / per_row));
}

void BatchVerifier::step(std::vector<VerifyOutcome>& out) {
    for (VerifyOutcome& o : rejected_) out.push_back(std::move(o));
    rejected_.clear();
    if (queue_.empty()) return;

    const double t0 = now_ms();
    items_.clear();
    item_job_.clear();
    item_row_.clear();
    item_len_.clear();
    int32_t tokens_left = options_.max_step_tokens;
    int32_t rows_left = fwd_.options().max_logit_rows;
    int32_t prefill_left = options_.prefill_chunk_tokens;
    int32_t rows = 0;
    std::vector<size_t>& failed = failed_;  // queue indices that failed before the forward
    failed.clear();
    // Verifications first (they are short and someone is waiting on each
    // token), then prompt chunks with what is left of the budget.
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t i = 0; i < queue_.size(); ++i) {
            Queued& q = queue_[i];
            if (q.job.prefill != (pass == 1)) continue;
            Request& r = requests_.at(q.job.request);
            int32_t n;
            int32_t n_rows;
            if (!q.job.prefill) {
                n = static_cast<int32_t>(q.job.tokens.size());
                n_rows = n;
            } else {
                n = std::min({static_cast<int32_t>(q.job.tokens.size()) - q.prefilled, prefill_left, tokens_left});
                n_rows = 1;
            }
            if (n <= 0 || n > tokens_left || n_rows > rows_left) continue;
            if (!reserve_evicting(kv_, cache_.get(), r.seq, kv_.length(r.seq) + n)) {
                failed.push_back(i);
                continue;
            }
            BatchItem item;
            item.seq = r.seq;
            item.tokens = q.job.prefill ? std::span<const int32_t>(q.job.tokens).subspan(static_cast<size_t>(q.prefilled), static_cast<size_t>(n))
                                        : std::span<const int32_t>(q.job.tokens);
            item.all_logits = !q.job.prefill;
            items_.push_back(item);
            item_job_.push_back(i);
            item_row_.push_back(rows);
            item_len_.push_back(n);
            rows += n_rows;
            tokens_left -= n;
            rows_left -= n_rows;
            if (q.job.prefill) prefill_left -= n;
        }
    }

    std::vector<char>& done = done_;  // (queue) 1: finished this step
    done.assign(queue_.size(), 0);
    for (size_t i : failed) {
        const Queued& q = queue_[i];
        out.push_back(fail(q.job, "KV cache full: no free block for request " + std::to_string(q.job.request), true));
        requests_.at(q.job.request).busy = false;
        done[i] = 1;
    }
    if (!items_.empty()) {
        // Every job greedy: ask the backend for the argmax per row only (a
        // GPU backend then copies `rows` ints instead of rows * n_vocab
        // floats); a backend without the capability runs nothing and says so.
        bool all_greedy = true;
        for (size_t j : item_job_) all_greedy = all_greedy && argmax_suffices(queue_[j].job.sampling);
        bool greedy = false;
        std::span<const float> logits;
        if (all_greedy) {
            argmax_.resize(static_cast<size_t>(rows));
            greedy = fwd_.forward_greedy(kv_, items_, argmax_);
            if (greedy) check_argmax(argmax_, fwd_.n_vocab());
        }
        if (greedy) {
            ++greedy_steps_;
        } else {
            logits = fwd_.forward(kv_, items_);
        }
        const size_t first_out = out.size();
        const size_t V = static_cast<size_t>(fwd_.n_vocab());
        int32_t step_tokens = 0;
        for (int32_t n : item_len_) step_tokens += n;
        for (size_t it = 0; it < items_.size(); ++it) {
            Queued& q = queue_[item_job_[it]];
            Request& r = requests_.at(q.job.request);
            // (greedy: logits is empty and only argmax_ is read)
            const float* row = greedy ? nullptr : logits.data() + static_cast<size_t>(item_row_[it]) * V;
            const int32_t* row_argmax = greedy ? argmax_.data() + item_row_[it] : nullptr;
            VerifyOutcome o;
            o.request = q.job.request;
            o.tag = q.job.tag;
            o.batch_requests = static_cast<int32_t>(items_.size());
            o.open_requests = static_cast<int32_t>(requests_.size());
            o.batch_tokens = step_tokens;
            if (q.job.prefill) {
                q.prefilled += item_len_[it];
                if (q.prefilled < static_cast<int32_t>(q.job.tokens.size())) continue;
                r.history.assign(q.job.tokens.begin(), q.job.tokens.end());
                if (cache_) cache_->insert(r.seq, r.history);
                o.cached_tokens = q.from_prefix_cache;
                if (greedy) {
                    const int32_t next = *row_argmax;
                    r.history.push_back(next);
                    o.next = next;
                    o.rng = q.job.rng;
                } else {
                    if (r.grammar) {
                        if (!mask_rows(*r.grammar, model().tokenizer(), trie(), {}, row, fwd_.n_vocab(), masked_, allowed_)) {
                            out.push_back(fail(q.job, "grammar: no token of the vocabulary can start the text"));
                            r.busy = false;
                            done[item_job_[it]] = 1;
                            continue;
                        }
                        row = masked_.data();
                    }
                    sampler_.set_params(q.job.sampling);
                    Rng rng(q.job.rng);
                    const int32_t next = q.job.sampling.coupled ? coupled_sample(sampler_, row, r.history, dist_)
                                                                : sampler_.sample(row, r.history, rng);
                    if (q.job.sampling.logprobs >= 0) logprob_reader_.read(sampler_, row, r.history, next, o.logprobs);
                    if (r.grammar) r.grammar->accept_token(model().tokenizer(), next);
                    r.history.push_back(next);
                    o.next = next;
                    o.rng = rng.state();
                }
            } else {
                finish_verify(q, r, TargetRows{row, row_argmax}, o);
            }
            r.busy = false;
            done[item_job_[it]] = 1;
            out.push_back(std::move(o));
        }
        // The step's time covers the acceptance rule too, as a step of the
        // single-sequence decoder does (the draft-length controller weighs it).
        const double ms = now_ms() - t0;
        for (size_t i = first_out; i < out.size(); ++i) out[i].step_ms = ms;
        if (probe_) {
            bool any_prefill = false;
            for (size_t it = 0; it < items_.size(); ++it) any_prefill = any_prefill || queue_[item_job_[it]].job.prefill;
            if (!any_prefill) probe_->record(rows, ms);
        }
    }
    size_t w = 0;
    for (size_t i = 0; i < queue_.size(); ++i) {
        if (!done[i]) {
            if (w != i) queue_[w] = std::move(queue_[i]);
            ++w;
        }
    }
    queue_.resize(w);
}

}  // namespace specd
