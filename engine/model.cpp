#include "engine/model.h"

#include <filesystem>

#include "engine/error.h"

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

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path) {
    std::unique_ptr<LlamaModel> m(new LlamaModel(gguf::File::open(path)));
    const gguf::File& f = m->file_;

    const std::string arch = f.get_string("general.architecture");
    if (arch != "llama") {
        throw Error(path + ": unsupported architecture '" + arch + "' (specd runs 'llama')");
    }
    LlamaHparams& hp = m->hparams_;
    hp.n_ctx_train = positive_key(f, "llama.context_length", 1 << 24);
    hp.dim = positive_key(f, "llama.embedding_length", 1 << 16);
    hp.n_layers = positive_key(f, "llama.block_count", 1024);
    hp.ffn_dim = positive_key(f, "llama.feed_forward_length", 1 << 18);
    hp.n_heads = positive_key(f, "llama.attention.head_count", 1024);
    hp.n_kv_heads = f.has("llama.attention.head_count_kv")
                        ? positive_key(f, "llama.attention.head_count_kv", 1024)
                        : hp.n_heads;
    if (hp.dim % hp.n_heads != 0) {
        throw Error(path + ": embedding_length " + std::to_string(hp.dim) + " is not a multiple of head_count " +
                    std::to_string(hp.n_heads));
    }
    if (hp.n_heads % hp.n_kv_heads != 0) {
        throw Error(path + ": head_count " + std::to_string(hp.n_heads) + " is not a multiple of head_count_kv " +
                    std::to_string(hp.n_kv_heads));
    }
    hp.head_dim = hp.dim / hp.n_heads;
    hp.rope_dim = f.has("llama.rope.dimension_count") ? positive_key(f, "llama.rope.dimension_count", hp.head_dim)
                                                      : hp.head_dim;
    if (hp.rope_dim % 2 != 0) throw Error(path + ": llama.rope.dimension_count must be even");
    hp.rope_freq_base = f.get_f32_opt("llama.rope.freq_base").value_or(10000.0f);
    hp.rms_eps = f.get_f32_opt("llama.attention.layer_norm_rms_epsilon").value_or(1e-5f);
    if (!(hp.rope_freq_base > 0.0f) || !(hp.rms_eps > 0.0f) || hp.rms_eps > 1.0f) {
        throw Error(path + ": rope.freq_base and layer_norm_rms_epsilon must be positive");
    }

    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
    const gguf::TensorInfo& embd = require_tensor(f, "token_embd.weight");
    if (embd.ne.size() != 2) throw Error(path + ": tensor 'token_embd.weight' is not 2-D");
    hp.n_vocab = static_cast<int32_t>(embd.ne[1]);
    if (hp.n_vocab != m->tokenizer_->n_vocab()) {
        throw Error(path + ": token_embd.weight has " + std::to_string(hp.n_vocab) + " rows but the vocabulary has " +
                    std::to_string(m->tokenizer_->n_vocab()) + " tokens");
    }

    const int64_t dim = hp.dim, kv = hp.kv_dim(), ffn = hp.ffn_dim;
    m->token_embd_ = matrix(f, "token_embd.weight", dim, hp.n_vocab);
    m->layers_.resize(static_cast<size_t>(hp.n_layers));
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        LlamaLayer& L = m->layers_[static_cast<size_t>(l)];
        L.attn_norm = vector_f32(f, p + "attn_norm.weight", dim);
        L.wq = matrix(f, p + "attn_q.weight", dim, dim);
        L.wk = matrix(f, p + "attn_k.weight", dim, kv);
        L.wv = matrix(f, p + "attn_v.weight", dim, kv);
        L.wo = matrix(f, p + "attn_output.weight", dim, dim);
        L.ffn_norm = vector_f32(f, p + "ffn_norm.weight", dim);
        L.w_gate = matrix(f, p + "ffn_gate.weight", dim, ffn);
        L.w_up = matrix(f, p + "ffn_up.weight", dim, ffn);
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
                 bytes(L.w_down) + (L.attn_norm.size() + L.ffn_norm.size()) * sizeof(float);
    }
    return total + output_norm_.size() * sizeof(float);
}

}  // namespace specd
