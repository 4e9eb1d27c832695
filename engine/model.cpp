#include "engine/model.h"

#include <cmath>
#include <filesystem>

#include "engine/error.h"
#include "engine/packed_weights.h"

namespace specd {

namespace {

std::string shape_string(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

const gguf::TensorInfo& require_tensor(const gguf::File& f, std::string_view name) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t) throw Error(f.path() + ": missing tensor '" + std::string(name) + "'");
    return *t;
}

WeightMatrix matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows) {
    const gguf::TensorInfo& t = require_tensor(f, name);
    if (t.ne.size() != 2 || t.ne[0] != cols || t.ne[1] != rows) {
        throw Error(f.path() + ": tensor '" + name + "' has shape " + shape_string(t.ne) +
                    ", the metadata implies [" + std::to_string(cols) + ", " + std::to_string(rows) + "]");
    }
    // A NaN or infinite block scale would poison every logit without a
    // trace: refuse the file as llama.cpp's validation does.
    const int64_t n_blocks = t.n_elements() / tensor_type_block_elements(t.type);
    if (const int64_t bad = tensor_first_nonfinite_block(t.type, t.data, n_blocks); bad >= 0) {
        throw Error(f.path() + ": tensor '" + name + "' (" + tensor_type_name(t.type) + ") block " + std::to_string(bad) +
                    " has a NaN or infinite scale: the file is corrupt");
    }
    WeightMatrix w;
    w.type = t.type;
    w.data = t.data;
    w.rows = rows;
    w.cols = cols;
    return w;
}

// Rows [first, first + n) of w, a view (fused tensors: attn_qkv, Phi-3's ffn_up).
WeightMatrix row_slice(const WeightMatrix& w, int64_t first, int64_t n) {
    WeightMatrix out = w;
    out.data = w.row(first);
    out.rows = n;
    return out;
}

std::vector<float> vector_f32(const gguf::File& f, const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = require_tensor(f, name);
    if (t.ne.size() != 1 || t.ne[0] != n) {
        throw Error(f.path() + ": tensor '" + name + "' has shape " + shape_string(t.ne) +
                    ", the metadata implies [" + std::to_string(n) + "]");
    }
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(t.type, t.data, out.data(), n);
    return out;
}

int32_t positive_key(const gguf::File& f, const std::string& key, int32_t max_value) {
    const uint32_t v = f.get_u32(key);
    if (v == 0 || v > static_cast<uint32_t>(max_value)) {
        throw Error(f.path() + ": metadata '" + key + "' = " + std::to_string(v) + " is out of range (1.." +
                    std::to_string(max_value) + ")");
    }
    return static_cast<int32_t>(v);
}

}  // namespace

double LlamaHparams::rope_frequency(int32_t i, bool windowed) const {
    if (windowed) return std::pow(static_cast<double>(rope_freq_base_swa), -2.0 * i / rope_dim);
    double f = std::pow(static_cast<double>(rope_freq_base), -2.0 * i / rope_dim) * rope_freq_scale;
    if (!rope_freq_factors.empty()) f /= rope_freq_factors[static_cast<size_t>(i)];
    return f;
}

float LlamaHparams::score_scale() const {
    return attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

LlamaModel::LlamaModel(gguf::File file) : file_(std::move(file)) {}
LlamaModel::~LlamaModel() = default;

const PackedWeights& LlamaModel::packed_weights(Isa isa, ThreadPool& pool) const {
    const size_t i = static_cast<size_t>(isa);
    std::call_once(packed_once_[i], [&] { packed_[i] = PackedWeights::build(*this, isa, pool); });
    return *packed_[i];
}

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path) {
    std::unique_ptr<LlamaModel> m(new LlamaModel(gguf::File::open(path)));
    const gguf::File& f = m->file_;

    const std::string arch = f.get_string("general.architecture");
    const ModelFamily* family = find_model_family(arch);
    if (!family) {
        throw Error(path + ": unsupported architecture '" + arch + "' (specd runs " + supported_architectures() + ")");
    }
    const std::string k = arch + ".";
    LlamaHparams& hp = m->hparams_;
    hp.family = family;
    hp.n_ctx_train = positive_key(f, k + "context_length", 1 << 24);
    hp.dim = positive_key(f, k + "embedding_length", 1 << 16);
    hp.n_layers = positive_key(f, k + "block_count", 1024);
    hp.ffn_dim = positive_key(f, k + "feed_forward_length", 1 << 18);
    hp.n_heads = positive_key(f, k + "attention.head_count", 1024);
    hp.n_kv_heads = f.has(k + "attention.head_count_kv") ? positive_key(f, k + "attention.head_count_kv", 1024)
                                                         : hp.n_heads;
    if (hp.n_heads % hp.n_kv_heads != 0) {
        throw Error(path + ": head_count " + std::to_string(hp.n_heads) + " is not a multiple of head_count_kv " +
                    std::to_string(hp.n_kv_heads));
    }
    if (f.has(k + "attention.key_length")) {
        hp.head_dim = positive_key(f, k + "attention.key_length", 1 << 12);
    } else if (hp.dim % hp.n_heads != 0) {
        throw Error(path + ": embedding_length " + std::to_string(hp.dim) + " is not a multiple of head_count " +
                    std::to_string(hp.n_heads) + " and " + k + "attention.key_length is absent");
    } else {
        hp.head_dim = hp.dim / hp.n_heads;
    }
    if (f.has(k + "attention.value_length") && positive_key(f, k + "attention.value_length", 1 << 12) != hp.head_dim) {
        throw Error(path + ": " + k + "attention.value_length differs from the key length " + std::to_string(hp.head_dim) +
                    "; specd needs one head size");
    }
    hp.rope_dim = f.has(k + "rope.dimension_count") ? positive_key(f, k + "rope.dimension_count", hp.head_dim)
                                                     : hp.head_dim;
    if (hp.rope_dim % 2 != 0) throw Error(path + ": " + k + "rope.dimension_count must be even");
    if (family->rope_dim_is_head_dim && hp.rope_dim != hp.head_dim) {
        throw Error(path + ": " + k + "rope.dimension_count " + std::to_string(hp.rope_dim) + " differs from the head size " +
                    std::to_string(hp.head_dim) + " (" + arch + " rotates whole heads)");
    }
    hp.rope_freq_base = f.get_f32_opt(k + "rope.freq_base").value_or(10000.0f);
    // Linear scaling (positions divided by the factor) is the only kind
    // without extra terms; YaRN and LongRoPE change the attention too.
    const std::string scaling = f.get_string_opt(k + "rope.scaling.type").value_or("linear");
    if (scaling != "linear" && scaling != "none") {
        throw Error(path + ": " + k + "rope.scaling.type '" + scaling + "' is not supported (none, linear)");
    }
    if (const auto factor = f.get_f32_opt(k + "rope.scaling.factor"); factor && scaling == "linear" && *factor != 0.0f) {
        if (!(*factor > 0.0f)) throw Error(path + ": " + k + "rope.scaling.factor must be positive");
        hp.rope_freq_scale = 1.0f / *factor;
    }
    hp.rms_eps = f.get_f32_opt(k + "attention.layer_norm_rms_epsilon").value_or(1e-5f);
    if (!(hp.rope_freq_base > 0.0f) || !(hp.rms_eps > 0.0f) || hp.rms_eps > 1.0f) {
        throw Error(path + ": rope.freq_base and layer_norm_rms_epsilon must be positive");
    }
    if (family->rope_freqs_tensor && f.find_tensor("rope_freqs.weight")) {
        hp.rope_freq_factors = vector_f32(f, "rope_freqs.weight", hp.rope_dim / 2);
        for (float x : hp.rope_freq_factors) {
            if (!(x > 0.0f) || !std::isfinite(x)) throw Error(path + ": tensor 'rope_freqs.weight' holds a factor that is not positive");
        }
    }
    hp.rope_attn_factor = f.get_f32_opt(k + "rope.scaling.attn_factor").value_or(1.0f);
    if (!(hp.rope_attn_factor > 0.0f)) throw Error(path + ": " + k + "rope.scaling.attn_factor must be positive");
    if (family->long_rope && f.find_tensor("rope_factors_short.weight")) {
        hp.rope_freq_factors = vector_f32(f, "rope_factors_short.weight", hp.rope_dim / 2);
        for (float x : hp.rope_freq_factors) {
            if (!(x > 0.0f) || !std::isfinite(x)) throw Error(path + ": tensor 'rope_factors_short.weight' holds a factor that is not positive");
        }
        if (const auto original = f.get_u32_opt(k + "rope.scaling.original_context_length"); original && *original > 0) {
            hp.n_ctx_train = std::min(hp.n_ctx_train, static_cast<int32_t>(std::min<uint32_t>(*original, 1u << 24)));
        }
    }
    if (family->embedding_scaled) hp.embedding_scale = std::sqrt(static_cast<float>(hp.dim));
    if (family->final_logit_softcapping) {
        hp.final_logit_softcap = f.get_f32_opt(k + "final_logit_softcapping").value_or(0.0f);
        if (hp.final_logit_softcap < 0.0f) throw Error(path + ": " + k + "final_logit_softcapping must not be negative");
    }
    // Gemma 3 27B (62 layers) scales queries by 1/sqrt(dim/heads), the
    // others by 1/sqrt(head_dim): llama.cpp's rule from gemma_pytorch.
    if (arch == "gemma3" && hp.n_layers == 62) hp.attention_scale = 1.0f / std::sqrt(static_cast<float>(hp.dim / hp.n_heads));
    std::vector<bool> windowed(static_cast<size_t>(hp.n_layers), false);
    if (family->sliding_window && f.get_u32_opt(k + "attention.sliding_window").value_or(0) > 0) {
        hp.sliding_window = positive_key(f, k + "attention.sliding_window", 1 << 24);
        hp.rope_freq_base_swa = f.get_f32_opt(k + "rope.freq_base_swa").value_or(10000.0f);
        if (!(hp.rope_freq_base_swa > 0.0f)) throw Error(path + ": " + k + "rope.freq_base_swa must be positive");
        // The pattern: one flag per layer, or n (the last of every n layers
        // attends fully; 0 = all windowed), default 6.
        const std::string pattern_key = k + "attention.sliding_window_pattern";
        const gguf::Value* pattern = f.find(pattern_key);
        if (pattern && pattern->type == gguf::ValueType::ARRAY) {
            if (pattern->array.size() != windowed.size() || pattern->array_type != gguf::ValueType::BOOL) {
                throw Error(path + ": " + pattern_key + " must hold one bool per layer");
            }
            for (size_t l = 0; l < windowed.size(); ++l) windowed[l] = pattern->array[l].b;
        } else {
            const uint32_t n = pattern ? f.get_u32(pattern_key) : 6;
            for (size_t l = 0; l < windowed.size(); ++l) windowed[l] = n == 0 || l % n < n - 1;
        }
    }
    // Tensors that llama.cpp would apply but specd would silently skip.
    for (const char* name : {"output.bias", "blk.0.attn_qkv.bias", "blk.0.attn_output.bias", "blk.0.ffn_gate.bias",
                             "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"}) {
        if (f.find_tensor(name)) throw Error(path + ": tensor '" + std::string(name) + "' is not supported for " + arch);
    }

    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
    const gguf::TensorInfo& embd = require_tensor(f, "token_embd.weight");
    if (embd.ne.size() != 2) throw Error(path + ": tensor 'token_embd.weight' is not 2-D");
    hp.n_vocab = static_cast<int32_t>(embd.ne[1]);
    if (hp.n_vocab != m->tokenizer_->n_vocab()) {
        throw Error(path + ": token_embd.weight has " + std::to_string(hp.n_vocab) + " rows but the vocabulary has " +
                    std::to_string(m->tokenizer_->n_vocab()) + " tokens");
    }

    const int64_t dim = hp.dim, qd = hp.q_dim(), kv = hp.kv_dim(), ffn = hp.ffn_dim;
    m->token_embd_ = matrix(f, "token_embd.weight", dim, hp.n_vocab);
    m->layers_.resize(static_cast<size_t>(hp.n_layers));
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LlamaLayer& L = m->layers_[static_cast<size_t>(l)];
        L.attn_norm = vector_f32(f, p + "attn_norm.weight", dim);
        if (f.find_tensor(p + "attn_qkv.weight")) {
            const WeightMatrix qkv = matrix(f, p + "attn_qkv.weight", dim, qd + 2 * kv);
            L.wq = row_slice(qkv, 0, qd);
            L.wk = row_slice(qkv, qd, kv);
            L.wv = row_slice(qkv, qd + kv, kv);
        } else {
            L.wq = matrix(f, p + "attn_q.weight", dim, qd);
            L.wk = matrix(f, p + "attn_k.weight", dim, kv);
            L.wv = matrix(f, p + "attn_v.weight", dim, kv);
        }
        // Biases come as a set (Qwen2) or not at all.
        const bool has_bq = f.find_tensor(p + "attn_q.bias"), has_bk = f.find_tensor(p + "attn_k.bias"),
                   has_bv = f.find_tensor(p + "attn_v.bias");
        if (has_bq || has_bk || has_bv) {
            L.bq = vector_f32(f, p + "attn_q.bias", qd);
            L.bk = vector_f32(f, p + "attn_k.bias", kv);
            L.bv = vector_f32(f, p + "attn_v.bias", kv);
        }
        if (family->qk_norm) {
            L.q_norm = vector_f32(f, p + "attn_q_norm.weight", hp.head_dim);
            L.k_norm = vector_f32(f, p + "attn_k_norm.weight", hp.head_dim);
        }
        L.wo = matrix(f, p + "attn_output.weight", qd, dim);
        L.windowed = windowed[static_cast<size_t>(l)];
        if (family->post_norms) {
            L.post_attn_norm = vector_f32(f, p + "post_attention_norm.weight", dim);
            L.post_ffn_norm = vector_f32(f, p + "post_ffw_norm.weight", dim);
        }
        L.ffn_norm = vector_f32(f, p + "ffn_norm.weight", dim);
        if (family->fused_gate_up) {
            const WeightMatrix gate_up = matrix(f, p + "ffn_up.weight", dim, 2 * ffn);
            L.w_gate = row_slice(gate_up, 0, ffn);
            L.w_up = row_slice(gate_up, ffn, ffn);
        } else {
            L.w_gate = matrix(f, p + "ffn_gate.weight", dim, ffn);
            L.w_up = matrix(f, p + "ffn_up.weight", dim, ffn);
        }
        L.w_down = matrix(f, p + "ffn_down.weight", ffn, dim);
    }
    m->output_norm_ = vector_f32(f, "output_norm.weight", dim);
    if (f.find_tensor("output.weight")) {
        m->output_ = matrix(f, "output.weight", dim, hp.n_vocab);
    } else {
        m->output_ = m->token_embd_;
        m->classifier_tied_ = true;
    }
    return m;
}

std::string LlamaModel::name() const {
    if (auto n = file_.get_string_opt("general.name"); n && !n->empty()) return *n;
    return std::filesystem::path(file_.path()).filename().string();
}

std::string LlamaModel::graph_beyond_llama2() const {
    const LlamaHparams& hp = hparams_;
    const LlamaLayer& L = layers_.front();
    std::string out;
    auto add = [&](bool used, const char* what) {
        if (used) out += (out.empty() ? "" : ", ") + std::string(what);
    };
    add(hp.family->rope_pairing != RopePairing::Adjacent, "NEOX RoPE");
    add(hp.rope_dim != hp.head_dim, "partial rotary");
    add(!L.bq.empty(), "Q/K/V biases");
    add(!L.q_norm.empty(), "Q/K norms");
    add(hp.q_dim() != hp.dim, "a head size other than dim/heads");
    add(hp.family->ffn_activation != FfnActivation::Silu, "GeGLU");
    add(!L.post_attn_norm.empty(), "post-norms");
    add(hp.sliding_window > 0, "sliding-window layers");
    add(hp.embedding_scale != 1.0f, "a scaled embedding");
    add(hp.final_logit_softcap > 0.0f, "logit soft-capping");
    add(hp.attention_scale > 0.0f, "a query scale other than 1/sqrt(head_dim)");
    return out;
}

TensorType LlamaModel::weight_type() const {
    std::vector<std::pair<TensorType, size_t>> bytes;  // per type, in order of first use
    auto add = [&](const WeightMatrix& w) {
        const size_t n = static_cast<size_t>(w.rows) * w.row_bytes();
        for (auto& [type, total] : bytes) {
            if (type == w.type) {
                total += n;
                return;
            }
        }
        bytes.emplace_back(w.type, n);
    };
    for (const LlamaLayer& L : layers_) {
        for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) add(*w);
    }
    std::pair<TensorType, size_t> best = bytes.at(0);
    for (const auto& b : bytes) {
        if (b.second > best.second) best = b;
    }
    return best.first;
}

size_t LlamaModel::weight_bytes() const {
    auto bytes = [](const WeightMatrix& w) { return static_cast<size_t>(w.rows) * w.row_bytes(); };
    size_t total = bytes(output_);
    for (const LlamaLayer& L : layers_) {
        total += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.w_gate) + bytes(L.w_up) +
                 bytes(L.w_down) +
                 (L.attn_norm.size() + L.ffn_norm.size() + L.bq.size() + L.bk.size() + L.bv.size() + L.q_norm.size() +
                  L.k_norm.size() + L.post_attn_norm.size() + L.post_ffn_norm.size()) * sizeof(float);
    }
    return total + output_norm_.size() * sizeof(float);
}

}  // namespace specd
