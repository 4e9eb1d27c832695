#include "engine/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace specd {

ReferenceForward::ReferenceForward(const LlamaModel& model, int32_t n_ctx, TensorType kv_type)
    : model_(model), n_ctx_(n_ctx), kv_type_(kv_type) {
    const LlamaHparams& hp = model.hparams();
    const size_t dim = static_cast<size_t>(hp.dim), kv = static_cast<size_t>(hp.kv_dim());
    x_.resize(dim);
    xb_.resize(dim);
    q_.resize(static_cast<size_t>(hp.q_dim()));
    att_out_.resize(static_cast<size_t>(hp.q_dim()));
    tmp_.resize(dim);
    hb_.resize(static_cast<size_t>(hp.ffn_dim));
    hb2_.resize(static_cast<size_t>(hp.ffn_dim));
    scores_.resize(static_cast<size_t>(n_ctx));
    row_.resize(static_cast<size_t>(std::max({hp.dim, hp.ffn_dim, hp.q_dim()})));
    key_cache_.resize(static_cast<size_t>(hp.n_layers) * n_ctx * kv);
    value_cache_.resize(static_cast<size_t>(hp.n_layers) * n_ctx * kv);
    logits_.resize(static_cast<size_t>(hp.n_vocab));
}

void ReferenceForward::matvec(const WeightMatrix& w, const float* x, float* out) {
    for (int64_t n = 0; n < w.rows; ++n) {
        dequantize_row(w.type, w.row(n), row_.data(), w.cols);
        double acc = 0.0;
        for (int64_t k = 0; k < w.cols; ++k) acc += static_cast<double>(row_[k]) * x[k];
        out[n] = static_cast<float>(acc);
    }
}

const std::vector<float>& ReferenceForward::step(int32_t token) {
    const LlamaHparams& hp = model_.hparams();
    if (pos_ >= n_ctx_) throw Error("reference forward: context of " + std::to_string(n_ctx_) + " is full");
    if (token < 0 || token >= hp.n_vocab) throw Error("reference forward: token out of range");
    const int32_t dim = hp.dim, kvd = hp.kv_dim(), hd = hp.head_dim, ffn = hp.ffn_dim;
    const int32_t group = hp.n_heads / hp.n_kv_heads;

    auto rmsnorm = [&](const float* x, const std::vector<float>& w, float* out) {
        double ss = 0.0;
        for (int32_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
        const double scale = 1.0 / std::sqrt(ss / dim + hp.rms_eps);
        for (int32_t i = 0; i < dim; ++i) out[i] = static_cast<float>(x[i] * scale * w[static_cast<size_t>(i)]);
    };
    // Pair i of each head turns by pos * base^(-2i/rope_dim) * scale / factor[i];
    // the pair is (2i, 2i+1) or, NEOX, (i, i + rope_dim/2).
    // A windowed layer turns by base_swa^(-2i/rope_dim), unscaled.
    const bool neox = hp.family->rope_pairing == RopePairing::Neox;
    auto rope = [&](float* v, int32_t n_heads, bool windowed) {
        const int32_t half = hp.rope_dim / 2;
        for (int32_t h = 0; h < n_heads; ++h) {
            for (int32_t i = 0; i < half; ++i) {
                double theta;
                if (windowed) {
                    theta = pos_ * std::pow(static_cast<double>(hp.rope_freq_base_swa), -2.0 * i / hp.rope_dim);
                } else {
                    theta = pos_ * std::pow(static_cast<double>(hp.rope_freq_base), -2.0 * i / hp.rope_dim) * hp.rope_freq_scale;
                    if (!hp.rope_freq_factors.empty()) theta /= hp.rope_freq_factors[static_cast<size_t>(i)];
                }
                const double c = std::cos(theta) * hp.rope_attn_factor, s = std::sin(theta) * hp.rope_attn_factor;
                float* p0 = v + h * hd + (neox ? i : 2 * i);
                float* p1 = neox ? p0 + half : p0 + 1;
                const double x0 = *p0, x1 = *p1;
                *p0 = static_cast<float>(x0 * c - x1 * s);
                *p1 = static_cast<float>(x0 * s + x1 * c);
            }
        }
    };
    // RMSNorm of each head of v in place (Qwen3's Q/K norms).
    auto head_norm = [&](float* v, int32_t n_heads, const std::vector<float>& w) {
        for (int32_t h = 0; h < n_heads; ++h) {
            float* p = v + h * hd;
            double ss = 0.0;
            for (int32_t i = 0; i < hd; ++i) ss += static_cast<double>(p[i]) * p[i];
            const double scale = 1.0 / std::sqrt(ss / hd + hp.rms_eps);
            for (int32_t i = 0; i < hd; ++i) p[i] = static_cast<float>(p[i] * scale * w[static_cast<size_t>(i)]);
        }
    };
    auto add_bias = [](float* v, const std::vector<float>& b) {
        for (size_t i = 0; i < b.size(); ++i) v[i] += b[i];
    };

    const WeightMatrix& embd = model_.token_embedding();
    dequantize_row(embd.type, embd.row(token), x_.data(), dim);
    for (int32_t i = 0; i < dim; ++i) x_[static_cast<size_t>(i)] *= hp.embedding_scale;
    const double score_scale = hp.attention_scale > 0.0f ? hp.attention_scale : 1.0 / std::sqrt(static_cast<double>(hd));

    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const LlamaLayer& L = model_.layers()[static_cast<size_t>(l)];
        float* kc = &key_cache_[(static_cast<size_t>(l) * n_ctx_ + pos_) * kvd];
        float* vc = &value_cache_[(static_cast<size_t>(l) * n_ctx_ + pos_) * kvd];
        rmsnorm(x_.data(), L.attn_norm, xb_.data());
        matvec(L.wq, xb_.data(), q_.data());
        matvec(L.wk, xb_.data(), kc);
        matvec(L.wv, xb_.data(), vc);
        add_bias(q_.data(), L.bq);
        add_bias(kc, L.bk);
        add_bias(vc, L.bv);
        if (!L.q_norm.empty()) {
            head_norm(q_.data(), hp.n_heads, L.q_norm);
            head_norm(kc, hp.n_kv_heads, L.k_norm);
        }
        rope(q_.data(), hp.n_heads, L.windowed);
        rope(kc, hp.n_kv_heads, L.windowed);
        // A windowed layer sees positions pos - window + 1 .. pos.
        const int32_t first = L.windowed ? std::max(0, pos_ - hp.sliding_window + 1) : 0;
        if (kv_type_ == TensorType::F16) {
            for (int32_t i = 0; i < kvd; ++i) {
                kc[i] = fp16_to_fp32(fp32_to_fp16(kc[i]));
                vc[i] = fp16_to_fp32(fp32_to_fp16(vc[i]));
            }
        }
        for (int32_t h = 0; h < hp.n_heads; ++h) {
            const float* q = &q_[static_cast<size_t>(h) * hd];
            const size_t kv_off = static_cast<size_t>(h / group) * hd;
            double max_score = -INFINITY;
            for (int32_t t = first; t <= pos_; ++t) {
                const float* k = &key_cache_[(static_cast<size_t>(l) * n_ctx_ + t) * kvd + kv_off];
                double s = 0.0;
                for (int32_t i = 0; i < hd; ++i) s += static_cast<double>(q[i]) * k[i];
                scores_[static_cast<size_t>(t)] = static_cast<float>(s * score_scale);
                max_score = std::max(max_score, static_cast<double>(scores_[static_cast<size_t>(t)]));
            }
            double sum = 0.0;
            for (int32_t t = first; t <= pos_; ++t) {
                scores_[static_cast<size_t>(t)] = static_cast<float>(std::exp(scores_[static_cast<size_t>(t)] - max_score));
                sum += scores_[static_cast<size_t>(t)];
            }
            for (int32_t i = 0; i < hd; ++i) {
                double acc = 0.0;
                for (int32_t t = first; t <= pos_; ++t) {
                    acc += scores_[static_cast<size_t>(t)] / sum *
                           value_cache_[(static_cast<size_t>(l) * n_ctx_ + t) * kvd + kv_off + i];
                }
                att_out_[static_cast<size_t>(h) * hd + i] = static_cast<float>(acc);
            }
        }
        matvec(L.wo, att_out_.data(), tmp_.data());
        if (!L.post_attn_norm.empty()) rmsnorm(tmp_.data(), L.post_attn_norm, tmp_.data());
        for (int32_t i = 0; i < dim; ++i) x_[static_cast<size_t>(i)] += tmp_[static_cast<size_t>(i)];
        rmsnorm(x_.data(), L.ffn_norm, xb_.data());
        matvec(L.w_gate, xb_.data(), hb_.data());
        matvec(L.w_up, xb_.data(), hb2_.data());
        const bool gelu = hp.family->ffn_activation == FfnActivation::GeluTanh;
        for (int32_t i = 0; i < ffn; ++i) {
            const double g = hb_[static_cast<size_t>(i)];
            const double act = gelu ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)))
                                    : g / (1.0 + std::exp(-g));
            hb_[static_cast<size_t>(i)] = static_cast<float>(act) * hb2_[static_cast<size_t>(i)];
        }
        matvec(L.w_down, hb_.data(), tmp_.data());
        if (!L.post_ffn_norm.empty()) rmsnorm(tmp_.data(), L.post_ffn_norm, tmp_.data());
        for (int32_t i = 0; i < dim; ++i) x_[static_cast<size_t>(i)] += tmp_[static_cast<size_t>(i)];
    }
    rmsnorm(x_.data(), model_.output_norm(), xb_.data());
    matvec(model_.classifier(), xb_.data(), logits_.data());
    if (const double cap = hp.final_logit_softcap; cap > 0.0) {
        for (float& z : logits_) z = static_cast<float>(cap * std::tanh(z / cap));
    }
    ++pos_;
    return logits_;
}

}  // namespace specd
