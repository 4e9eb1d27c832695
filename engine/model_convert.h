// Model file conversions: karpathy/llama2.c checkpoints → GGUF (llama.cpp's
// "llama" architecture names and keys), GGUF → GGUF in another tensor type,
// and the human-readable summary behind `specd info`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/gguf.h"
#include "engine/tensor_type.h"

namespace specd {

// llama.cpp's LLAMA_FTYPE for a file whose weights are `type`
// (general.file_type): f32 0, f16 1, q4_0 2, q8_0 7, q5_0 8, q5_1 9, Q4_K
// 14 (Q4_K_S), Q5_K 16 (Q5_K_S), Q6_K 18, bf16 32.
uint32_t llama_file_type(TensorType type);

// Reads llama2.c's legacy model.bin (7 int32 header + f32 weights) and
// tokenizer.bin, writes an f32 GGUF at out_gguf. Throws specd::Error naming
// the file and the problem for any malformed input.
void convert_llama2c(const std::string& model_bin, const std::string& tokenizer_bin, const std::string& out_gguf,
                     const std::string& model_name);

struct QuantizeStats {
    uint64_t bytes_in = 0;        // size of the input file
    uint64_t bytes_out = 0;       // size of the output file
    size_t n_tensors = 0;         // tensors in the file
    size_t n_converted = 0;       // 2-D tensors now stored as the target type
};

// Copies every metadata key (general.file_type set for `type`) and every
// tensor; each 2-D tensor whose row length is a multiple of the target's
// block size is re-encoded row by row (dequantize_row → quantize_row) as
// `type`, 1-D tensors (norms) become f32, anything else is copied as is. A
// tensor already of the target type is copied byte for byte. `type` is any
// supported type (f32 re-encodes to f32). Prints nothing.
QuantizeStats quantize_model(const std::string& in_gguf, const std::string& out_gguf, TensorType type);

// Text for `specd info`: the header, all metadata (long arrays summarised
// as "[32000 strings: '<unk>', '<s>', ...]") and a table of the tensors
// (name, type, shape, bytes, offset). Ends with a newline.
std::string describe_model(const gguf::File& file);

}  // namespace specd
