// A decoder-only transformer of one of the families in model_family.h (Llama,
// Qwen2, Qwen3, Gemma 3, Phi-3) loaded from GGUF: hyper-parameters, weight views into the
// memory-mapped file (nothing copied but the small norm and bias vectors) and
// its tokenizer. Every shape is checked against the metadata at load time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model_family.h"
#include "engine/tensor_type.h"
#include "engine/tokenizer.h"

namespace specd {

class PackedWeights;
class ThreadPool;
enum class Isa;

// Keys are ARCH.* with ARCH = general.architecture ("llama.context_length").
struct LlamaHparams {
    // The family's traits; the default (Llama 2 semantics) serves hparams
    // built by hand (tests, synthetic GPU models).
    const ModelFamily* family = &kModelFamilies[0];
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;    // ARCH.context_length
    int32_t dim = 0;            // ARCH.embedding_length
    int32_t n_layers = 0;       // ARCH.block_count
    int32_t n_heads = 0;        // ARCH.attention.head_count
    int32_t n_kv_heads = 0;     // ARCH.attention.head_count_kv (default n_heads)
    int32_t head_dim = 0;       // ARCH.attention.key_length (default dim / n_heads); value_length must match
    int32_t ffn_dim = 0;        // ARCH.feed_forward_length
    int32_t rope_dim = 0;       // ARCH.rope.dimension_count (default head_dim)
    float rope_freq_base = 10000.0f;  // ARCH.rope.freq_base
    float rope_freq_scale = 1.0f;     // 1 / ARCH.rope.scaling.factor (linear scaling; default 1)
    // rope_freqs.weight (rope_dim/2): pair i turns at base^(-2i/rope_dim) *
    // rope_freq_scale / rope_freq_factors[i] per position (the llama3 scaling
    // the converter bakes in). Empty: all 1.
    // Family long_rope (Phi-3 LongRoPE): rope_factors_short.weight, and the
    // context capped to ARCH.rope.scaling.original_context_length, as
    // llama.cpp runs such a file within that context (beyond it llama.cpp
    // switches to rope_factors_long, which specd does not).
    std::vector<float> rope_freq_factors;
    float rope_attn_factor = 1.0f;    // ARCH.rope.scaling.attn_factor: RoPE's cos and sin times this
    float rms_eps = 1e-5f;            // ARCH.attention.layer_norm_rms_epsilon
    // Family sliding_window (Gemma 3): ARCH.attention.sliding_window, the
    // positions a windowed layer attends to (its own included); 0 = none.
    int32_t sliding_window = 0;
    float rope_freq_base_swa = 10000.0f;  // ARCH.rope.freq_base_swa: windowed layers' RoPE base (no scaling there)
    // Attention scores are q.k times this; 0 means 1/sqrt(head_dim) (Gemma 3
    // 27B uses 1/sqrt(dim/heads), as llama.cpp does).
    float attention_scale = 0.0f;
    float final_logit_softcap = 0.0f;     // ARCH.final_logit_softcapping (0 = none): logits = c * tanh(logits / c)
    float embedding_scale = 1.0f;         // sqrt(dim) for family embedding_scaled, else 1

    int32_t q_dim() const { return n_heads * head_dim; }  // attention width (dim unless key_length says otherwise)
    int32_t kv_dim() const { return n_kv_heads * head_dim; }
    // The angle per position of rotated pair i < rope_dim/2, in double, as
    // the fast forward and the GPU's tables use it; `windowed`: a sliding-
    // window layer's (base rope_freq_base_swa, no scaling or factors).
    double rope_frequency(int32_t i, bool windowed = false) const;
    float score_scale() const;  // attention_scale, or 1/sqrt(head_dim) when it is 0
};

// A 2-D weight: N rows (outputs) of K elements (inputs) in `type`'s layout,
// i.e. GGUF ne = {K, N}.
struct WeightMatrix {
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;   // N
    int64_t cols = 0;   // K
    size_t row_bytes() const { return tensor_row_bytes(type, cols); }
    const void* row(int64_t n) const {
        return static_cast<const uint8_t*>(data) + static_cast<size_t>(n) * row_bytes();
    }
};

struct LlamaLayer {
    std::vector<float> attn_norm;  // (dim)
    WeightMatrix wq;               // (q_dim, dim)
    WeightMatrix wk;               // (kv_dim, dim)
    WeightMatrix wv;               // (kv_dim, dim)
    std::vector<float> bq;         // (q_dim) attn_q.bias, empty when the file has none
    std::vector<float> bk;         // (kv_dim) attn_k.bias, empty when absent
    std::vector<float> bv;         // (kv_dim) attn_v.bias, empty when absent
    std::vector<float> q_norm;     // (head_dim) attn_q_norm, family qk_norm only, else empty
    std::vector<float> k_norm;     // (head_dim) attn_k_norm, family qk_norm only, else empty
    WeightMatrix wo;               // (dim, q_dim)
    std::vector<float> post_attn_norm;  // (dim) post_attention_norm, family post_norms only, else empty
    bool windowed = false;         // attends to the last hparams.sliding_window positions only
    std::vector<float> ffn_norm;   // (dim)
    WeightMatrix w_gate;           // (ffn_dim, dim)
    WeightMatrix w_up;             // (ffn_dim, dim)
    WeightMatrix w_down;           // (dim, ffn_dim)
    std::vector<float> post_ffn_norm;   // (dim) post_ffw_norm, family post_norms only, else empty
};

class LlamaModel {
public:
    // Opens, validates and maps a GGUF model. Throws specd::Error naming the
    // file and the problem (unknown architecture, missing or mis-shaped
    // tensor, missing tokenizer keys, ...).
    static std::unique_ptr<LlamaModel> load(const std::string& path);

    const LlamaHparams& hparams() const { return hparams_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const gguf::File& file() const { return file_; }
    const std::string& path() const { return file_.path(); }
    std::string name() const;            // general.name, else the file name
    const ModelFamily& family() const { return *hparams_.family; }
    // What this model's graph does beyond Llama 2's, comma-separated ("NEOX
    // RoPE, Q/K/V biases"), "" for none; RoPE frequency changes (base,
    // scaling, factors, attention factor) are not counted. A backend that
    // runs only Llama 2's graph refuses a model with any.
    std::string graph_beyond_llama2() const;
    // The type holding most of the layers' weight bytes (a label: files from
    // llama.cpp's quantizer mix types per tensor, e.g. Q4_K_M's q4_K + q6_K).
    TensorType weight_type() const;
    size_t weight_bytes() const;         // bytes of all weights a token reads
    bool classifier_tied() const { return classifier_tied_; }

    const WeightMatrix& token_embedding() const { return token_embd_; }  // (n_vocab, dim)
    const std::vector<LlamaLayer>& layers() const { return layers_; }
    const std::vector<float>& output_norm() const { return output_norm_; }  // (dim)
    const WeightMatrix& classifier() const { return output_; }             // (n_vocab, dim)

    // The packed copies of the q8_0/q4_0 matrices for `isa`
    // (engine/packed_weights.h), made on the first call for that ISA (with
    // `pool`'s threads) and shared by every later caller; thread-safe. A
    // cache of derived data, hence const.
    const PackedWeights& packed_weights(Isa isa, ThreadPool& pool) const;

    ~LlamaModel();

private:
    explicit LlamaModel(gguf::File file);
    gguf::File file_;
    LlamaHparams hparams_;
    std::unique_ptr<Tokenizer> tokenizer_;
    WeightMatrix token_embd_;
    std::vector<LlamaLayer> layers_;
    std::vector<float> output_norm_;
    WeightMatrix output_;
    bool classifier_tied_ = false;
    mutable std::once_flag packed_once_[3];                // per Isa value
    mutable std::unique_ptr<PackedWeights> packed_[3];     // per Isa value
};

}  // namespace specd
