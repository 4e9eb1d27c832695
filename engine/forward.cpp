#include "engine/forward.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "engine/batch_check.h"

namespace specd {

namespace {

// out = x * rsqrt(mean(x^2) + eps) * weight, one row of n.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// Rotates pair i < rope_half of each head in place: elements (2i, 2i+1)
// (Adjacent) or (i, i + rope_half) (Neox).
void apply_rope(RopePairing pairing, float* vec, int32_t n_heads, int32_t head_dim, int32_t rope_half,
                const float* cos_row, const float* sin_row) {
    for (int32_t h = 0; h < n_heads; ++h) {
        float* v = vec + static_cast<size_t>(h) * head_dim;
        if (pairing == RopePairing::Neox) {
            float* w = v + rope_half;
            for (int32_t i = 0; i < rope_half; ++i) {
                const float x0 = v[i], x1 = w[i];
                v[i] = x0 * cos_row[i] - x1 * sin_row[i];
                w[i] = x0 * sin_row[i] + x1 * cos_row[i];
            }
        } else {
            for (int32_t i = 0; i < rope_half; ++i) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * cos_row[i] - x1 * sin_row[i];
                v[2 * i + 1] = x0 * sin_row[i] + x1 * cos_row[i];
            }
        }
    }
}

// g[i] = gelu(g[i]) * u[i], GELU's tanh approximation (Gemma's GeGLU).
void gelu_tanh_mul(float* g, const float* u, int64_t n) {
    constexpr float kSqrt2OverPi = 0.7978845608f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x))) * u[i];
    }
}

// RMSNorm of each head_dim slice of vec in place, one weight for all heads.
void norm_heads(float* vec, int32_t n_heads, int32_t head_dim, const float* weight, float eps) {
    for (int32_t h = 0; h < n_heads; ++h) {
        float* v = vec + static_cast<size_t>(h) * head_dim;
        rms_norm(v, weight, v, head_dim, eps);
    }
}

// Calls fn(segment, local_begin, local_end) for the parts of [begin, end)
// that fall into each of the consecutive segments of the given sizes.
template <class Fn>
void for_segments(int64_t begin, int64_t end, std::initializer_list<int64_t> sizes, Fn&& fn) {
    int64_t base = 0;
    int segment = 0;
    for (int64_t size : sizes) {
        const int64_t b = std::max(begin, base), e = std::min(end, base + size);
        if (b < e) fn(segment, b - base, e - base);
        base += size;
        ++segment;
    }
}

}  // namespace

ForwardPass::ForwardPass(const LlamaModel& model, ThreadPool& pool, ForwardOptions options)
    : model_(model), pool_(pool), share_(pool.size()), options_(options), isa_(best_isa()) {
    const LlamaHparams& hp = model.hparams();
    if (options_.max_batch_tokens <= 0 || options_.max_logit_rows <= 0) {
        throw Error("forward: max_batch_tokens and max_logit_rows must be positive");
    }
    options_.max_logit_rows = std::min(options_.max_logit_rows, options_.max_batch_tokens);
    n_ctx_max_ = hp.n_ctx_train;
    if (packed_tile_rows(isa_) > 0 && repack_enabled()) {
        packed_ = &model.packed_weights(isa_, pool);
        packed_rows_ = packed_tile_rows(isa_);
    }
    const size_t M = static_cast<size_t>(options_.max_batch_tokens);
    const size_t R = static_cast<size_t>(options_.max_logit_rows);
    const size_t dim = static_cast<size_t>(hp.dim), kv = static_cast<size_t>(hp.kv_dim());
    const size_t qd = static_cast<size_t>(hp.q_dim()), ffn = static_cast<size_t>(hp.ffn_dim);
    row_token_.resize(M);
    row_seq_.resize(M);
    row_pos_.resize(M);
    out_row_.resize(R);
    x_.resize(M * dim);
    xb_.resize(M * std::max(dim, qd));
    qkv_.resize(M * (qd + 2 * kv));
    proj_.resize(M * dim);
    ffn_.resize(M * 2 * ffn);
    xout_.resize(R * dim);
    logits_.resize(R * static_cast<size_t>(hp.n_vocab));
    argmax_parts_.resize(static_cast<size_t>(pool.size()) * R);
    scores_.resize(static_cast<size_t>(pool.size()) * kAttentionGroupRows * static_cast<size_t>(n_ctx_max_));
    attention_groups_.reserve(M);

    const int32_t half = hp.rope_dim / 2;
    auto rope_table = [&](bool windowed, std::vector<float>& cos_out, std::vector<float>& sin_out) {
        cos_out.resize(static_cast<size_t>(n_ctx_max_) * half);
        sin_out.resize(static_cast<size_t>(n_ctx_max_) * half);
        for (int32_t p = 0; p < n_ctx_max_; ++p) {
            for (int32_t i = 0; i < half; ++i) {
                const double theta = p * hp.rope_frequency(i, windowed);
                cos_out[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(theta) * hp.rope_attn_factor);
                sin_out[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(theta) * hp.rope_attn_factor);
            }
        }
    };
    rope_table(false, rope_cos_, rope_sin_);
    if (hp.sliding_window > 0) rope_table(true, rope_cos_swa_, rope_sin_swa_);
    const int rows = options_.max_batch_tokens;
    std::vector<TensorType> attn, wo, ffn_in, down;  // each role's weight types over the layers
    for (const LlamaLayer& L : model_.layers()) {
        attn.insert(attn.end(), {L.wq.type, L.wk.type, L.wv.type});
        wo.push_back(L.wo.type);
        ffn_in.insert(ffn_in.end(), {L.w_gate.type, L.w_up.type});
        down.push_back(L.w_down.type);
    }
    const TensorType cls_type = model_.classifier().type;
    in_attn_.init(attn, rows, hp.dim);
    in_wo_.init(wo, rows, hp.q_dim());
    in_ffn_.init(ffn_in, rows, hp.dim);
    in_down_.init(down, rows, hp.ffn_dim);
    in_cls_.init(std::span<const TensorType>(&cls_type, 1), options_.max_logit_rows, hp.dim);
    if (options_.draft_head_tokens < 0) throw Error("forward: draft_head_tokens must be 0 (full head) or positive");
    if (options_.draft_head_tokens > 0 && options_.draft_head_tokens < hp.n_vocab) {
        token_fed_count_.assign(static_cast<size_t>(hp.n_vocab), 0);
        in_head_.assign(static_cast<size_t>(hp.n_vocab), 0);
    }
}

void ForwardPass::observe_tokens() {
    if (token_fed_count_.empty()) return;
    for (int32_t m = 0; m < n_rows_; ++m) {
        const size_t id = static_cast<size_t>(row_token_[static_cast<size_t>(m)]);
        ++token_fed_count_[id];
        missed_since_rebuild_ += in_head_[id] == 0;
    }
    tokens_fed_ += n_rows_;
    fed_since_rebuild_ += n_rows_;
    const bool due = draft_head_active()
                         ? missed_since_rebuild_ >= kDraftHeadMissBurst ||
                               (missed_since_rebuild_ > 0 && fed_since_rebuild_ >= kDraftHeadRebuildEvery)
                         : tokens_fed_ >= kDraftHeadWarmupTokens;
    if (due) rebuild_draft_head();
}

void ForwardPass::rebuild_draft_head() {
    const LlamaHparams& hp = model_.hparams();
    const int32_t V = hp.n_vocab;
    const int32_t H = std::min(V, options_.draft_head_tokens);  // a multiple of 16 fills the kernels' tiles
    // Rank keys: the count, then the lower id; the H largest keys are the head.
    std::vector<uint64_t> keys(static_cast<size_t>(V));
    for (int32_t v = 0; v < V; ++v) {
        keys[static_cast<size_t>(v)] = uint64_t{token_fed_count_[static_cast<size_t>(v)]} << 32 | (0xffffffffu - static_cast<uint32_t>(v));
    }
    std::nth_element(keys.begin(), keys.begin() + (H - 1), keys.end(), std::greater<>());
    std::vector<int32_t> ids(static_cast<size_t>(H));
    for (int32_t h = 0; h < H; ++h) ids[static_cast<size_t>(h)] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(keys[static_cast<size_t>(h)]));
    std::sort(ids.begin(), ids.end());  // ascending, so that ties in the argmax keep the lowest id
    std::fill(in_head_.begin(), in_head_.end(), 0);
    for (int32_t id : ids) in_head_[static_cast<size_t>(id)] = 1;
    fed_since_rebuild_ = 0;
    missed_since_rebuild_ = 0;
    const WeightMatrix& cls = model_.classifier();
    const size_t row_bytes = cls.row_bytes();
    head_rows_.resize(static_cast<size_t>(H) * row_bytes);
    for (int32_t h = 0; h < H; ++h) {
        std::memcpy(&head_rows_[static_cast<size_t>(h) * row_bytes], cls.row(ids[static_cast<size_t>(h)]), row_bytes);
    }
    head_rows_packed_ = packed_ != nullptr && packed_->find(cls.data) != nullptr && packable(isa_, cls.type, H, cls.cols);
    if (head_rows_packed_) {
        std::vector<unsigned char> packed(head_rows_.size());
        pack_weights(isa_, cls.type, head_rows_.data(), H, cls.cols, packed.data());
        head_rows_.swap(packed);
    }
    head_logits_.resize(static_cast<size_t>(options_.max_logit_rows) * static_cast<size_t>(H));
    head_ids_ = std::move(ids);
}

void ForwardPass::matmul_weight(const WeightMatrix& w, const PreparedInput& x, float* y, int64_t ldy, int64_t b,
                                int64_t e) const {
    if (packed_ != nullptr && b % packed_rows_ == 0 && e % packed_rows_ == 0) {
        if (const void* p = packed_->find(w.data)) return matmul_packed(isa_, w.type, p, x, y, ldy, b, e);
    }
    matmul(isa_, w.type, w.data, x, y, ldy, b, e);
}

std::unique_ptr<PagedKvCache> ForwardPass::make_kv_cache(const KvCacheShape& shape) {
    return std::make_unique<PagedKvCache>(shape);
}

std::span<const float> ForwardPass::forward(PagedKvCache& kv, std::span<const BatchItem> items) {
    want_argmax_ = false;
    const int32_t r = run(kv, items);
    if (draft_head_active()) {
        // The head's logits into their columns; every other id -inf.
        const size_t V = static_cast<size_t>(model_.hparams().n_vocab), H = head_ids_.size();
        for (size_t o = 0; o < static_cast<size_t>(r); ++o) {
            float* row = &logits_[o * V];
            std::fill(row, row + V, -INFINITY);
            for (size_t h = 0; h < H; ++h) row[static_cast<size_t>(head_ids_[h])] = head_logits_[o * H + h];
        }
    }
    return {logits_.data(), static_cast<size_t>(r) * static_cast<size_t>(model_.hparams().n_vocab)};
}

bool ForwardPass::forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) {
    check_argmax_slots(items, argmax_out.size());
    want_argmax_ = true;
    const int32_t r = run(kv, items);
    want_argmax_ = false;
    // Thread ranges ascend, so a strictly greater later part keeps the
    // lowest id on ties, as the sampler's greedy pick does.
    const int nth = pool_.size();
    const size_t R = static_cast<size_t>(options_.max_logit_rows);
    for (int32_t o = 0; o < r; ++o) {
        ArgmaxPart best{-INFINITY, -1};
        for (int t = 0; t < nth; ++t) {
            const ArgmaxPart& part = argmax_parts_[static_cast<size_t>(t) * R + static_cast<size_t>(o)];
            if (part.id >= 0 && (best.id < 0 || part.logit > best.logit)) best = part;
        }
        argmax_out[static_cast<size_t>(o)] = best.id;
    }
    return true;
}

int32_t ForwardPass::run(PagedKvCache& kv, std::span<const BatchItem> items) {
    const LlamaHparams& hp = model_.hparams();
    if (kv.shape().n_layers != hp.n_layers || kv.shape().kv_dim != hp.kv_dim()) {
        throw Error("forward: the KV cache was made for another model shape");
    }
    if (!kv.has_storage()) throw Error("forward: the CPU backend needs a KV cache with host storage");
    check_and_reserve_batch(kv, items, BatchLimits{hp.n_vocab, n_ctx_max_, options_.max_batch_tokens, options_.max_logit_rows});
    int32_t m = 0, r = 0;
    attention_groups_.clear();
    for (const BatchItem& item : items) {
        const int32_t start = kv.length(item.seq), n = static_cast<int32_t>(item.tokens.size());
        // The item's rows in groups as even as possible (9 rows: 5 + 4), so
        // that the threads' shares of a verification stay balanced.
        const int32_t n_groups = (n + kAttentionGroupRows - 1) / kAttentionGroupRows;
        for (int32_t g = 0, first = 0; g < n_groups; ++g) {
            const int32_t rows = (n - first) / (n_groups - g);
            attention_groups_.push_back({m + first, rows});
            first += rows;
        }
        for (int32_t t = 0; t < n; ++t, ++m) {
            row_token_[static_cast<size_t>(m)] = item.tokens[static_cast<size_t>(t)];
            row_seq_[static_cast<size_t>(m)] = item.seq;
            row_pos_[static_cast<size_t>(m)] = start + t;
            if (item.all_logits || t == n - 1) out_row_[static_cast<size_t>(r++)] = m;
        }
    }
    n_rows_ = m;
    n_out_ = r;
    if (m == 0) return 0;
    observe_tokens();

    in_attn_.set_rows(m);
    in_wo_.set_rows(m);
    in_ffn_.set_rows(m);
    in_down_.set_rows(m);
    in_cls_.set_rows(r);

    pool_.run([&](int ith, int nth) { run_layers(ith, nth, kv); });

    for (const BatchItem& item : items) {
        kv.set_length(item.seq, kv.length(item.seq) + static_cast<int32_t>(item.tokens.size()));
    }
    return r;
}

// Rows per chunk of a shared matmul phase (RangeShare): small enough that
// the thread that finishes first takes over a fair part of the other's rows,
// as long as a batch is small (a weight stream); a larger batch keeps the
// static halves (one chunk), its kernels' setup being per call.
int64_t ForwardPass::share_chunk(int64_t n) const { return n_rows_ <= kShareMaxRows ? kShareChunkRows : n; }

void ForwardPass::run_layers(int ith, int nth, PagedKvCache& kv) {
    const LlamaHparams& hp = model_.hparams();
    const int64_t dim = hp.dim, qd = hp.q_dim(), kvd = hp.kv_dim(), ffn = hp.ffn_dim, vocab = hp.n_vocab;
    const int64_t qkv_ld = qd + 2 * kvd;
    const Range rows = split_range(n_rows_, ith, nth);

    // Embedding lookup.
    const WeightMatrix& embd = model_.token_embedding();
    for (int64_t t = rows.begin; t < rows.end; ++t) {
        dequantize_row_isa(isa_, embd.type, embd.row(row_token_[static_cast<size_t>(t)]), &x_[t * dim], dim);
        if (hp.embedding_scale != 1.0f) {
            for (int64_t i = 0; i < dim; ++i) x_[t * dim + i] *= hp.embedding_scale;
        }
    }

    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const LlamaLayer& L = model_.layers()[static_cast<size_t>(l)];
        // Attention input: norm + activation prep, by rows.
        for (int64_t t = rows.begin; t < rows.end; ++t) rms_norm(&x_[t * dim], L.attn_norm.data(), &xb_[t * dim], dim, hp.rms_eps);
        in_attn_.prepare_rows(isa_, xb_.data(), dim, static_cast<int>(rows.begin), static_cast<int>(rows.end));
        pool_.barrier();

        // q | k | v projections (plus their biases), split over the
        // concatenated output rows.
        share_.share(ith, nth, qkv_ld, kMatmulRowAlign, share_chunk(qkv_ld), [&](int64_t cb, int64_t ce) {
        for_segments(cb, ce, {qd, kvd, kvd}, [&](int seg, int64_t b, int64_t e) {
            const WeightMatrix& w = seg == 0 ? L.wq : seg == 1 ? L.wk : L.wv;
            const std::vector<float>& bias = seg == 0 ? L.bq : seg == 1 ? L.bk : L.bv;
            const int64_t col0 = seg == 0 ? 0 : seg == 1 ? qd : qd + kvd;
            matmul_weight(w, in_attn_.for_type(w.type), &qkv_[col0], qkv_ld, b, e);
            if (!bias.empty()) {
                for (int64_t t = 0; t < n_rows_; ++t) {
                    float* out = &qkv_[t * qkv_ld + col0];
                    for (int64_t n = b; n < e; ++n) out[n] += bias[static_cast<size_t>(n)];
                }
            }
        });
        });
        pool_.barrier();

        // Q/K norms (Qwen3) and RoPE on q and k, then k and v into the
        // cache, by rows.
        const int32_t half = hp.rope_dim / 2;
        const RopePairing pairing = hp.family->rope_pairing;
        for (int64_t t = rows.begin; t < rows.end; ++t) {
            const int32_t pos = row_pos_[static_cast<size_t>(t)], seq = row_seq_[static_cast<size_t>(t)];
            float* q = &qkv_[t * qkv_ld];
            float* k = q + qd;
            const float* v = k + kvd;
            if (!L.q_norm.empty()) {
                norm_heads(q, hp.n_heads, hp.head_dim, L.q_norm.data(), hp.rms_eps);
                norm_heads(k, hp.n_kv_heads, hp.head_dim, L.k_norm.data(), hp.rms_eps);
            }
            const float* c = &(L.windowed ? rope_cos_swa_ : rope_cos_)[static_cast<size_t>(pos) * half];
            const float* s = &(L.windowed ? rope_sin_swa_ : rope_sin_)[static_cast<size_t>(pos) * half];
            apply_rope(pairing, q, hp.n_heads, hp.head_dim, half, c, s);
            apply_rope(pairing, k, hp.n_kv_heads, hp.head_dim, half, c, s);
            store_kv_row(isa_, kv.shape().type, k, kv.key(seq, l, pos), kvd);
            store_kv_row(isa_, kv.shape().type, v, kv.value(seq, l, pos), kvd);
        }
        pool_.barrier();

        attention(ith, nth, kv, l);  // writes xb_ rows
        pool_.barrier();
        in_wo_.prepare_rows(isa_, xb_.data(), qd, static_cast<int>(rows.begin), static_cast<int>(rows.end));
        pool_.barrier();

        // Output projection and residual add, by output columns; with a
        // post-norm (Gemma) the add waits for whole rows.
        share_.share(ith, nth, dim, kMatmulRowAlign, share_chunk(dim), [&](int64_t b, int64_t e) {
            matmul_weight(L.wo, in_wo_.for_type(L.wo.type), proj_.data(), dim, b, e);
            if (L.post_attn_norm.empty()) {
                for (int64_t t = 0; t < n_rows_; ++t) {
                    for (int64_t n = b; n < e; ++n) x_[t * dim + n] += proj_[t * dim + n];
                }
            }
        });
        pool_.barrier();
        if (!L.post_attn_norm.empty()) add_normed_rows(L.post_attn_norm, rows);

        for (int64_t t = rows.begin; t < rows.end; ++t) rms_norm(&x_[t * dim], L.ffn_norm.data(), &xb_[t * dim], dim, hp.rms_eps);
        in_ffn_.prepare_rows(isa_, xb_.data(), dim, static_cast<int>(rows.begin), static_cast<int>(rows.end));
        pool_.barrier();

        // gate and up for the same rows of the hidden layer, then SwiGLU.
        share_.share(ith, nth, ffn, kMatmulRowAlign, share_chunk(ffn), [&](int64_t fb, int64_t fe) {
            const Range ffn_range{fb, fe};
            matmul_weight(L.w_gate, in_ffn_.for_type(L.w_gate.type), ffn_.data(), 2 * ffn, ffn_range.begin, ffn_range.end);
            matmul_weight(L.w_up, in_ffn_.for_type(L.w_up.type), ffn_.data() + ffn, 2 * ffn, ffn_range.begin, ffn_range.end);
            const bool gelu = hp.family->ffn_activation == FfnActivation::GeluTanh;
            for (int64_t t = 0; t < n_rows_; ++t) {
                float* g = &ffn_[t * 2 * ffn];
                const float* u = g + ffn;
                if (gelu) {
                    gelu_tanh_mul(g + ffn_range.begin, u + ffn_range.begin, ffn_range.end - ffn_range.begin);
                } else {
                    silu_mul_f32(isa_, g + ffn_range.begin, u + ffn_range.begin, ffn_range.end - ffn_range.begin);
                }
            }
        });
        pool_.barrier();

        in_down_.prepare_rows(isa_, ffn_.data(), 2 * ffn, static_cast<int>(rows.begin), static_cast<int>(rows.end));
        pool_.barrier();

        share_.share(ith, nth, dim, kMatmulRowAlign, share_chunk(dim), [&](int64_t b, int64_t e) {
            matmul_weight(L.w_down, in_down_.for_type(L.w_down.type), proj_.data(), dim, b, e);
            if (L.post_ffn_norm.empty()) {
                for (int64_t t = 0; t < n_rows_; ++t) {
                    for (int64_t n = b; n < e; ++n) x_[t * dim + n] += proj_[t * dim + n];
                }
            }
        });
        pool_.barrier();
        if (!L.post_ffn_norm.empty()) {
            add_normed_rows(L.post_ffn_norm, rows);
            pool_.barrier();  // the final norm below splits rows differently
        }
    }

    // Final norm of the rows that need logits, then the classifier.
    const Range out_rows = split_range(n_out_, ith, nth);
    for (int64_t o = out_rows.begin; o < out_rows.end; ++o) {
        rms_norm(&x_[out_row_[static_cast<size_t>(o)] * dim], model_.output_norm().data(), &xout_[o * dim], dim, hp.rms_eps);
    }
    in_cls_.prepare_rows(isa_, xout_.data(), dim, static_cast<int>(out_rows.begin), static_cast<int>(out_rows.end));
    pool_.barrier();
    const WeightMatrix& cls = model_.classifier();
    // The draft head, when built, replaces the classifier's rows by its own
    // (ids head_ids_) and writes head_logits_ (R, H) instead of logits_.
    const bool head = draft_head_active();
    const int64_t n_cols = head ? static_cast<int64_t>(head_ids_.size()) : vocab;
    float* out = head ? head_logits_.data() : logits_.data();
    share_.share(ith, nth, n_cols, kMatmulRowAlign, share_chunk(n_cols), [&](int64_t b, int64_t e) {
        const PreparedInput& in = in_cls_.for_type(cls.type);
        if (!head) {
            matmul_weight(cls, in, out, n_cols, b, e);
        } else if (head_rows_packed_) {
            // Whole tiles: RangeShare's bounds are multiples of
            // kMatmulRowAlign (16) or n_cols, and a packed head has H % R == 0
            // with R (16 or 8) dividing 16.
            matmul_packed(isa_, cls.type, head_rows_.data(), in, out, n_cols, b, e);
        } else {
            matmul(isa_, cls.type, head_rows_.data(), in, out, n_cols, b, e);
        }
        if (const float cap = hp.final_logit_softcap; cap > 0.0f) {
            for (int64_t o = 0; o < n_out_; ++o) {
                for (int64_t n = b; n < e; ++n) out[o * n_cols + n] = cap * std::tanh(out[o * n_cols + n] / cap);
            }
        }
    });
    const Range vocab_range = split_range(n_cols, ith, nth, kMatmulRowAlign);
    if (want_argmax_) {
        pool_.barrier();  // another thread may have computed some of this thread's range
        // As the sampler's greedy pick: NaN never compares greater and -inf
        // never beats the start, so both are skipped; +inf counts as
        // FLT_MAX; ties keep the lowest id (head_ids_ ascend).
        for (int64_t o = 0; o < n_out_; ++o) {
            const float* row = &out[o * n_cols];
            ArgmaxPart best{-INFINITY, -1};
            for (int64_t n = vocab_range.begin; n < vocab_range.end; ++n) {
                const float logit = std::min(row[n], FLT_MAX);  // NaN stays NaN
                if (logit > best.logit) best = {logit, head ? head_ids_[static_cast<size_t>(n)] : static_cast<int32_t>(n)};
            }
            argmax_parts_[static_cast<size_t>(ith) * static_cast<size_t>(options_.max_logit_rows) + static_cast<size_t>(o)] = best;
        }
    }
}

// x += rms_norm(proj) for this thread's rows (a post-norm, Gemma).
void ForwardPass::add_normed_rows(const std::vector<float>& norm, Range rows) {
    const LlamaHparams& hp = model_.hparams();
    const int64_t dim = hp.dim;
    for (int64_t t = rows.begin; t < rows.end; ++t) {
        float* p = &proj_[t * dim];
        rms_norm(p, norm.data(), p, dim, hp.rms_eps);
        for (int64_t n = 0; n < dim; ++n) x_[t * dim + n] += p[n];
    }
}

namespace {

// Asks for the cache lines of one head's columns (head_bytes from each row
// start, rows apart by row_bytes) ahead of use. A kv head's columns are a
// short piece of every kv_dim row, strided: the hardware prefetcher does not
// follow them, and a block read cold cost 5x one read warm.
void prefetch_head_rows(const unsigned char* first, size_t row_bytes, int32_t rows, size_t head_bytes) {
    for (int32_t j = 0; j < rows; ++j) {
        const unsigned char* row = first + static_cast<size_t>(j) * row_bytes;
        for (size_t o = 0; o < head_bytes; o += 64) __builtin_prefetch(row + o);
        __builtin_prefetch(row + head_bytes - 1);
    }
}

}  // namespace

// Causal attention over the sequences' cached keys and values (the last
// hparams.sliding_window positions in a windowed layer), split over
// (row group, head) pairs so that a single decoding row still uses every thread
// (grouped-query: n_heads / n_kv_heads query heads share one kv head).
// Output rows go to xb_ as (M, q_dim).
void ForwardPass::attention(int ith, int nth, PagedKvCache& kv, int32_t layer) {
    const LlamaHparams& hp = model_.hparams();
    const int64_t qd = hp.q_dim(), kvd = hp.kv_dim(), qkv_ld = qd + 2 * kvd;
    const int32_t hd = hp.head_dim, group = hp.n_heads / hp.n_kv_heads, bs = kv.shape().block_size;
    const TensorType kv_type = kv.shape().type;
    const size_t kv_elem = kv.element_bytes();
    const float scale = hp.score_scale();
    // A windowed layer (Gemma) attends to the last `window` positions only,
    // and reads no block before the first of them.
    const int32_t window = model_.layers()[static_cast<size_t>(layer)].windowed ? hp.sliding_window : 0;
    auto first_visible = [&](int32_t row) {
        return window > 0 ? std::max(0, row_pos_[static_cast<size_t>(row)] + 1 - window) : 0;
    };
    // (kAttentionGroupRows, n_ctx): row i of the group at scores + i * n_ctx.
    float* scores = &scores_[static_cast<size_t>(ith) * kAttentionGroupRows * static_cast<size_t>(n_ctx_max_)];
    const Range units = split_range(static_cast<int64_t>(attention_groups_.size()) * hp.n_heads, ith, nth);
    for (int64_t u = units.begin; u < units.end; ++u) {
        const AttentionGroup& g = attention_groups_[static_cast<size_t>(u / hp.n_heads)];
        const int32_t h = static_cast<int32_t>(u % hp.n_heads);
        const int32_t seq = row_seq_[static_cast<size_t>(g.first_row)];
        const int32_t last_pos = row_pos_[static_cast<size_t>(g.first_row + g.n_rows - 1)];
        const int32_t n_blocks = kv.blocks_for(last_pos + 1);
        const size_t kv_off = static_cast<size_t>(h / group) * hd * kv_elem;  // bytes to this head's columns
        auto row_scores = [&](int32_t i) { return scores + static_cast<size_t>(i) * static_cast<size_t>(n_ctx_max_); };
        auto n_pos = [&](int32_t i) { return row_pos_[static_cast<size_t>(g.first_row + i)] + 1; };
        auto lo_pos = [&](int32_t i) { return first_visible(g.first_row + i); };  // row i sees [lo_pos, n_pos)
        const int32_t first_block = lo_pos(0) / bs;  // row 0 has the group's lowest position
        // Block by block, every row of the group, so that a block's keys and
        // values come from memory once for all of them; each row sees exactly
        // the calls (and bits) it would alone. One kernel call per block and
        // row: a call per position cost more than a 48-wide product.
        const size_t row_bytes = static_cast<size_t>(kvd) * kv_elem, head_bytes = static_cast<size_t>(hd) * kv_elem;
        if (u == units.begin) {
            prefetch_head_rows(static_cast<const unsigned char*>(kv.key_block(seq, layer, first_block)) + kv_off, row_bytes, bs, head_bytes);
        }
        for (int32_t b = first_block; b < n_blocks; ++b) {
            const auto* kb = static_cast<const unsigned char*>(kv.key_block(seq, layer, b));  // (block_size, kv_dim) of kv_type
            // The next block's keys and this block's values, while this block's keys are used.
            if (b + 1 < n_blocks) {
                const auto* next_kb = static_cast<const unsigned char*>(kv.key_block(seq, layer, b + 1));
                prefetch_head_rows(next_kb + kv_off, row_bytes, bs, head_bytes);
            }
            prefetch_head_rows(static_cast<const unsigned char*>(kv.value_block(seq, layer, b)) + kv_off, row_bytes, bs, head_bytes);
            for (int32_t i = 0; i < g.n_rows; ++i) {
                const int32_t lo = std::max(lo_pos(i), b * bs), n = std::min(n_pos(i), (b + 1) * bs) - lo;
                if (n <= 0) continue;
                const float* q = &qkv_[static_cast<int64_t>(g.first_row + i) * qkv_ld + static_cast<int64_t>(h) * hd];
                dot_rows(isa_, kv_type, q, kb + static_cast<size_t>(lo - b * bs) * row_bytes + kv_off, kvd, n, hd, scale,
                         row_scores(i) + lo);
            }
        }
        float inv[kAttentionGroupRows];
        for (int32_t i = 0; i < g.n_rows; ++i) {
            float* sc = row_scores(i) + lo_pos(i);
            const int32_t n = n_pos(i) - lo_pos(i);
            const float max_score = *std::max_element(sc, sc + n);
            inv[i] = 1.0f / exp_shift_sum_f32(isa_, sc, n, max_score);
            float* out = &xb_[static_cast<int64_t>(g.first_row + i) * qd + static_cast<int64_t>(h) * hd];
            std::fill(out, out + hd, 0.0f);
        }
        if (u + 1 < units.end) {  // the next unit's first keys, while this one's values are used
            const AttentionGroup& next = attention_groups_[static_cast<size_t>((u + 1) / hp.n_heads)];
            const size_t next_off = static_cast<size_t>(((u + 1) % hp.n_heads) / group) * head_bytes;
            const auto* next_kb = static_cast<const unsigned char*>(
                kv.key_block(row_seq_[static_cast<size_t>(next.first_row)], layer, first_visible(next.first_row) / bs));
            prefetch_head_rows(next_kb + next_off, row_bytes, bs, head_bytes);
        }
        for (int32_t b = first_block; b < n_blocks; ++b) {
            const auto* vb = static_cast<const unsigned char*>(kv.value_block(seq, layer, b));  // (block_size, kv_dim) of kv_type
            for (int32_t i = 0; i < g.n_rows; ++i) {
                const int32_t lo = std::max(lo_pos(i), b * bs), n = std::min(n_pos(i), (b + 1) * bs) - lo;
                if (n <= 0) continue;
                float* out = &xb_[static_cast<int64_t>(g.first_row + i) * qd + static_cast<int64_t>(h) * hd];
                weighted_rows(isa_, kv_type, row_scores(i) + lo, inv[i], vb + static_cast<size_t>(lo - b * bs) * row_bytes + kv_off,
                              kvd, n, hd, out);
            }
        }
    }
}

}  // namespace specd
