// A Llama-architecture model loaded from GGUF: hyper-parameters, weight views
// into the memory-mapped file (nothing copied but the small norm vectors) and
// its tokenizer. Every shape is checked against the metadata at load time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/tensor_type.h"
#include "engine/tokenizer.h"

namespace specd {

struct LlamaHparams {
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;    // llama.context_length
    int32_t dim = 0;            // llama.embedding_length
    int32_t n_layers = 0;       // llama.block_count
    int32_t n_heads = 0;        // llama.attention.head_count
    int32_t n_kv_heads = 0;     // llama.attention.head_count_kv (default n_heads)
    int32_t head_dim = 0;       // dim / n_heads
    int32_t ffn_dim = 0;        // llama.feed_forward_length
    int32_t rope_dim = 0;       // llama.rope.dimension_count (default head_dim)
    float rope_freq_base = 10000.0f;  // llama.rope.freq_base
    float rms_eps = 1e-5f;            // llama.attention.layer_norm_rms_epsilon

    int32_t kv_dim() const { return n_kv_heads * head_dim; }
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
    WeightMatrix wq;               // (dim, dim)
    WeightMatrix wk;               // (kv_dim, dim)
    WeightMatrix wv;               // (kv_dim, dim)
    WeightMatrix wo;               // (dim, dim)
    std::vector<float> ffn_norm;   // (dim)
    WeightMatrix w_gate;           // (ffn_dim, dim)
    WeightMatrix w_up;             // (ffn_dim, dim)
    WeightMatrix w_down;           // (dim, ffn_dim)
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
    // The type holding most of the layers' weight bytes (a label: files from
    // llama.cpp's quantizer mix types per tensor, e.g. Q4_K_M's q4_K + q6_K).
    TensorType weight_type() const;
    size_t weight_bytes() const;         // bytes of all weights a token reads
    bool classifier_tied() const { return classifier_tied_; }

    const WeightMatrix& token_embedding() const { return token_embd_; }  // (n_vocab, dim)
    const std::vector<LlamaLayer>& layers() const { return layers_; }
    const std::vector<float>& output_norm() const { return output_norm_; }  // (dim)
    const WeightMatrix& classifier() const { return output_; }             // (n_vocab, dim)

private:
    explicit LlamaModel(gguf::File file) : file_(std::move(file)) {}
    gguf::File file_;
    LlamaHparams hparams_;
    std::unique_ptr<Tokenizer> tokenizer_;
    WeightMatrix token_embd_;
    std::vector<LlamaLayer> layers_;
    std::vector<float> output_norm_;
    WeightMatrix output_;
    bool classifier_tied_ = false;
};

}  // namespace specd
