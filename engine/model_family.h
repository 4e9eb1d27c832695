// What each supported model family (GGUF `general.architecture`) changes
// from Llama 2, as one table that the loader, the reference forward and the
// fast CPU forward all read — one forward pass, switched by these traits,
// rather than a copy per family. Keys and tensor names are llama.cpp's
// (src/llama-arch.cpp); the per-family notes say which of its models use them.
#pragma once

#include <string>
#include <string_view>

namespace specd {

// How RoPE pairs a head's first rope_dim elements (llama.cpp's rope types).
enum class RopePairing {
    Adjacent,  // LLAMA_ROPE_TYPE_NORM: (2i, 2i+1), i < rope_dim/2 (Llama, Mistral)
    Neox,      // LLAMA_ROPE_TYPE_NEOX: (i, i + rope_dim/2) (Qwen, Phi-3, Gemma)
};

// The gate's activation in the gated FFN: act(gate) * up.
enum class FfnActivation {
    Silu,      // SwiGLU (Llama, Qwen)
    GeluTanh,  // GeGLU, GELU's tanh approximation (Gemma)
};

struct ModelFamily {
    std::string_view arch;                 // general.architecture, and the prefix of its keys
    RopePairing rope_pairing = RopePairing::Adjacent;
    FfnActivation ffn_activation = FfnActivation::Silu;
    bool qk_norm = false;                  // blk.N.attn_q_norm / attn_k_norm (head_dim): RMSNorm per head before RoPE
    bool rope_dim_is_head_dim = true;      // rope.dimension_count must equal the head size (llama.cpp's loader or graph insists)
    bool rope_freqs_tensor = false;        // rope_freqs.weight (rope_dim/2) divides each pair's frequency (Llama 3.1+)
    bool post_norms = false;               // blk.N.post_attention_norm / post_ffw_norm (dim): RMSNorm of each block's output before its residual add
    bool embedding_scaled = false;         // the embedding row times sqrt(dim) on entry
    bool sliding_window = false;           // ARCH.attention.sliding_window on the layers ARCH.attention.sliding_window_pattern
                                           // names (default 5 of every 6), RoPE base ARCH.rope.freq_base_swa (default 10000) there
    bool final_logit_softcapping = false;  // ARCH.final_logit_softcapping c, when present: logits = c * tanh(logits / c)
    bool fused_gate_up = false;            // no ffn_gate: blk.N.ffn_up (dim, 2*ffn) holds gate rows then up rows (Phi-3)
    bool long_rope = false;                // rope_factors_short/long.weight (rope_dim/2), LongRoPE (Phi-3): see LlamaHparams
};

// Every family specd runs. All of them: optional Q/K/V biases
// (blk.N.attn_{q,k,v}.bias, loaded when present, as llama.cpp does), Q/K/V
// fused in blk.N.attn_qkv.weight (q rows, k rows, v rows) when present, GQA
// (attention.head_count_kv), head size from attention.key_length when
// present (else dim / heads), rope.freq_base, linear rope.scaling.factor,
// rope.scaling.attn_factor (cos and sin times it), and a classifier tied to
// token_embd when output.weight is absent.
inline constexpr ModelFamily kModelFamilies[] = {
    // Llama 2/3/3.1/3.2/3.3, Mistral 7B, SmolLM2, TinyLlama.
    {.arch = "llama", .rope_freqs_tensor = true},
    // Qwen2, Qwen2.5, Qwen2.5-Coder: Q/K/V biases.
    {.arch = "qwen2", .rope_pairing = RopePairing::Neox},
    // Qwen3 dense: head size from attention.key_length (0.6B: dim 1024, 16 heads of 128).
    {.arch = "qwen3", .rope_pairing = RopePairing::Neox, .qk_norm = true},
    // Gemma 3 (text): its norm weights already hold the 1 + w the converter adds.
    {.arch = "gemma3",
     .rope_pairing = RopePairing::Neox,
     .ffn_activation = FfnActivation::GeluTanh,
     .qk_norm = true,
     .rope_dim_is_head_dim = true,
     .post_norms = true,
     .embedding_scaled = true,
     .sliding_window = true,
     .final_logit_softcapping = true},
    // Phi-3/3.5, Phi-4-mini: fused QKV and gate|up, partial rotary
    // (rope.dimension_count < head size, Phi-4-mini).
    {.arch = "phi3",
     .rope_pairing = RopePairing::Neox,
     .rope_dim_is_head_dim = false,
     .fused_gate_up = true,
     .long_rope = true},
};

// The family of `arch`, or nullptr.
const ModelFamily* find_model_family(std::string_view arch);

// "llama, qwen2, qwen3, gemma3, phi3": for the error that refuses any other architecture.
std::string supported_architectures();

}  // namespace specd
