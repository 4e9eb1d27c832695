// llama.cpp's K-quant file types as tensor mixes (its llama_tensor_get_type
// in src/llama-quant.cpp, for llama-style models without experts): which
// type each tensor of a model gets when quantised as Q4_K_M, Q5_K_M or
// Q6_K, and the quantisation that writes such a file.
//
//   default        Q4_K (Q4_K_M), Q5_K (Q5_K_M), Q6_K (Q6_K)
//   output.weight  Q6_K (token_embd.weight instead when there is no output
//                  tensor: tied embeddings); q8_0 if its rows are not a
//                  multiple of 256
//   attn_v, ffn_down  Q6_K in the layers where use_more_bits(i, n): the
//                  first and last eighth and every third layer between
//                  (Q4_K_M, Q5_K_M)
//   fallbacks      rows not a multiple of 256: Q4_K -> q5_0, Q5_K -> q5_1,
//                  Q6_K -> q8_0; not a multiple of 32 either: f16
//   not quantised  1-D tensors and *_norm.weight (written as f32)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf.h"
#include "engine/model_convert.h"
#include "engine/tensor_type.h"

namespace specd {

enum class QuantMix { Q4_K_M, Q5_K_M, Q6_K };

// "Q4_K_M", "Q5_K_M", "Q6_K" in any case; nullopt otherwise.
std::optional<QuantMix> quant_mix_from_name(std::string_view name);
const char* quant_mix_name(QuantMix mix);
uint32_t quant_mix_file_type(QuantMix mix);  // llama.cpp's LLAMA_FTYPE: 15, 17, 18

// The type of each tensor of `file` (file order) under `mix`; tensors left
// unquantised keep their type, except 1-D ones, which become f32.
std::vector<TensorType> quant_mix_types(const gguf::File& file, QuantMix mix);

struct QuantizeProgress {
    size_t tensor = 0;         // tensors done (1..n_tensors)
    size_t n_tensors = 0;
    uint64_t bytes_done = 0;   // input tensor bytes processed so far
    uint64_t bytes_total = 0;  // input tensor bytes in all
};

// Writes in_gguf quantised with `mix` to out_gguf (metadata copied,
// general.file_type set); progress, if set, after each tensor. Throws
// specd::Error for unreadable input.
QuantizeStats quantize_model_mix(const std::string& in_gguf, const std::string& out_gguf, QuantMix mix,
                                 const std::function<void(const QuantizeProgress&)>& progress = {});

}  // namespace specd
