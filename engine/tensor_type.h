// Tensor element types in ggml's numbering and block layouts, so that GGUF
// files interoperate with llama.cpp. Quantized types store blocks of 32
// elements: q8_0 = {fp16 scale d; int8 q[32]} (x = d*q), q4_0 = {fp16 d;
// uint8 qs[16]} with element j in the low nibble of qs[j] and element j+16 in
// the high nibble (x = d*(nibble-8)).
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
    Q8_0 = 8,
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

// True for the types this project reads and writes.
bool tensor_type_supported(uint32_t raw_type);
const char* tensor_type_name(TensorType type);                 // "f32", "f16", "q4_0", "q8_0", "bf16"
std::optional<TensorType> tensor_type_from_name(std::string_view name);
int64_t tensor_type_block_elements(TensorType type);           // 1 for f32/f16/bf16, 32 for q8_0/q4_0
size_t tensor_type_block_bytes(TensorType type);               // 4, 2, 2, 34, 18
// Bytes of one row of n elements; throws specd::Error when n is not a
// multiple of the block size.
size_t tensor_row_bytes(TensorType type, int64_t n_elements);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   // round to nearest even

// Convert n floats into `type`'s row layout (n a multiple of the block size
// for quantized types) and back. Quantization follows ggml's reference
// (q8_0: d = amax/127; q4_0: d = max/-8 with the signed max-magnitude value).
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace specd
