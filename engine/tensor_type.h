// Tensor element types in ggml's numbering and block layouts, so that GGUF
// files interoperate with llama.cpp. Quantized types store blocks of 32
// elements: q8_0 = {fp16 scale d; int8 q[32]} (x = d*q), q4_0 = {fp16 d;
// uint8 qs[16]} with element j in the low nibble of qs[j] and element j+16 in
// the high nibble (x = d*(nibble-8)). The K-quants (256-element
// super-blocks) and q5_0/q5_1/IQ4_NL are in quant_k.h (Q4_K, Q5_K, Q6_K,
// q5_0 and q5_1 are also written; Q2_K, Q3_K and the IQ4 types only read).
//
// Every type is described once, in one table (tensor_type.cpp): its name,
// block size and bytes, dequantisation, the scale check a loader runs, and
// whether specd can write it. The functions below read that table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace specd {

enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
};

constexpr int kQuantBlock = 32;  // elements per q8_0 / q4_0 block

struct BlockQ8_0 {
    uint16_t d;       // fp16 scale
    int8_t qs[32];    // x[j] = d * qs[j]
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
    uint16_t d;       // fp16 scale
    uint8_t qs[16];   // x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
};
static_assert(sizeof(BlockQ4_0) == 18);

// One type's block format.
struct TensorTypeTraits {
    TensorType type;
    const char* name;          // ggml's: "f32", "q4_0", "q4_K", "iq4_xs", ...
    int64_t block_elements;    // 1 (f32/f16/bf16), 32, or 256 (K-quants)
    size_t block_bytes;
    // y (n_blocks * block_elements) = the blocks at x as f32.
    void (*dequantize)(const void* x, float* y, int64_t n_blocks);
    // Index of the first block with a NaN or infinite scale, or -1; null
    // for the float types (their NaNs are data, not a corrupt block).
    int64_t (*first_nonfinite_block)(const void* x, int64_t n_blocks);
    bool writable;             // quantize_row() can produce it
};

// The table entry of a type this project reads, or nullptr.
const TensorTypeTraits* tensor_type_traits(uint32_t raw_type);

// True for the types this project reads (all of the enum).
bool tensor_type_supported(uint32_t raw_type);
// True for the types quantize_row() writes: f32, f16, bf16, q8_0, q4_0,
// q5_0, q5_1, Q4_K, Q5_K, Q6_K.
bool tensor_type_writable(TensorType type);
const char* tensor_type_name(TensorType type);                 // ggml's name: "f32", "q4_0", "q6_K", "iq4_nl", ...
std::optional<TensorType> tensor_type_from_name(std::string_view name);  // any case
int64_t tensor_type_block_elements(TensorType type);           // 1 for f32/f16/bf16, 32 for q8_0/q4_0/q5_*/iq4_nl, 256 for K-quants
size_t tensor_type_block_bytes(TensorType type);               // 4, 2, 2, 34, 18, ...
// Index of the first block of `data` (n_blocks blocks of `type`) whose scale
// is NaN or infinite, -1 when all are finite or the type has no scales.
int64_t tensor_first_nonfinite_block(TensorType type, const void* data, int64_t n_blocks);
// Bytes of one row of n elements; throws specd::Error when n is not a
// multiple of the block size.
size_t tensor_row_bytes(TensorType type, int64_t n_elements);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   // round to nearest even

// Convert n floats into `type`'s row layout (n a multiple of the block size
// for quantized types) and back. Quantization follows ggml's reference
// (q8_0: d = amax/127; q4_0: d = max/-8 with the signed max-magnitude value;
// the K-quants: quant_k.h)
// and throws specd::Error for a type that is not writable; dequantisation
// reads every type, bit-identically to ggml's to_float.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace specd
