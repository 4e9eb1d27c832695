#include "engine/tensor_type.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/quant_k.h"

namespace specd {

namespace {

uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

[[noreturn]] void bad_type(TensorType type) {
    throw Error("unsupported tensor type " + std::to_string(static_cast<uint32_t>(type)));
}

void require_blocks(TensorType type, int64_t n) {
    const int64_t be = tensor_type_block_elements(type);
    if (n < 0 || n % be != 0) {
        throw Error(std::string("tensor row of ") + std::to_string(n) + " elements is not a multiple of " +
                    std::to_string(be) + " (type " + tensor_type_name(type) + ")");
    }
}

// float -> int8 for values the callers have already bounded; the clamp only
// keeps NaN/inf inputs (garbage in) from being undefined behaviour.
int clamp_to_int(float v, int lo, int hi) {
    if (!(v >= static_cast<float>(lo))) return lo;
    if (v > static_cast<float>(hi)) return hi;
    return static_cast<int>(v);
}

// ggml's quantize_row_q8_0_ref, block by block.
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float* xb = x + i * kQuantBlock;
        float amax = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < kQuantBlock; ++j) {
            // roundf: half away from zero, as ggml's reference.
            y[i].qs[j] = static_cast<int8_t>(clamp_to_int(std::round(xb[j] * id), -128, 127));
        }
    }
}

// ggml's quantize_row_q4_0_ref: d = max / -8 with the signed value of
// largest magnitude (first one on ties), q = min(15, (int8)(x/d + 8.5)).
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float* xb = x + i * kQuantBlock;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < kQuantBlock; ++j) {
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
            // The cast truncates toward zero like ggml's (int8_t) cast.
            const int q0 = std::min(15, clamp_to_int(xb[j] * id + 8.5f, 0, 127));
            const int q1 = std::min(15, clamp_to_int(xb[j + 16] * id + 8.5f, 0, 127));
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

// Whole blocks of the float and 32-element types, for the table.
void dequantize_f32(const void* x, float* y, int64_t n) {
    if (n > 0) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const void* x, float* y, int64_t n) {
    const uint16_t* s = static_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(s[i]);
}

void dequantize_bf16(const void* x, float* y, int64_t n) {
    const uint16_t* s = static_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(s[i]);
}

void dequantize_q8_0(const void* x, float* y, int64_t n_blocks) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQuantBlock; ++j) y[i * kQuantBlock + j] = static_cast<float>(b[i].qs[j]) * d;
    }
}

void dequantize_q4_0(const void* x, float* y, int64_t n_blocks) {
    const BlockQ4_0* b = static_cast<const BlockQ4_0*>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        const float d = fp16_to_fp32(b[i].d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
            y[i * kQuantBlock + j] = static_cast<float>((b[i].qs[j] & 0x0f) - 8) * d;
            y[i * kQuantBlock + j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

template <class Block>
int64_t first_nonfinite_d(const void* x, int64_t n_blocks) {
    const Block* b = static_cast<const Block*>(x);
    for (int64_t i = 0; i < n_blocks; ++i) {
        if ((b[i].d & 0x7c00u) == 0x7c00u) return i;
    }
    return -1;
}

// The one description of every type, in ggml's numbering.
constexpr TensorTypeTraits kTypes[] = {
    {TensorType::F32, "f32", 1, 4, dequantize_f32, nullptr, true},
    {TensorType::F16, "f16", 1, 2, dequantize_f16, nullptr, true},
    {TensorType::Q4_0, "q4_0", kQuantBlock, sizeof(BlockQ4_0), dequantize_q4_0, first_nonfinite_d<BlockQ4_0>, true},
    {TensorType::Q5_0, "q5_0", kQuantBlock, sizeof(BlockQ5_0), dequantize_q5_0, first_nonfinite_q5_0, true},
    {TensorType::Q5_1, "q5_1", kQuantBlock, sizeof(BlockQ5_1), dequantize_q5_1, first_nonfinite_q5_1, true},
    {TensorType::Q8_0, "q8_0", kQuantBlock, sizeof(BlockQ8_0), dequantize_q8_0, first_nonfinite_d<BlockQ8_0>, true},
    {TensorType::Q2_K, "q2_K", kSuperBlock, sizeof(BlockQ2_K), dequantize_q2_k, first_nonfinite_q2_k, false},
    {TensorType::Q3_K, "q3_K", kSuperBlock, sizeof(BlockQ3_K), dequantize_q3_k, first_nonfinite_q3_k, false},
    {TensorType::Q4_K, "q4_K", kSuperBlock, sizeof(BlockQ4_K), dequantize_q4_k, first_nonfinite_q4_k, true},
    {TensorType::Q5_K, "q5_K", kSuperBlock, sizeof(BlockQ5_K), dequantize_q5_k, first_nonfinite_q5_k, true},
    {TensorType::Q6_K, "q6_K", kSuperBlock, sizeof(BlockQ6_K), dequantize_q6_k, first_nonfinite_q6_k, true},
    {TensorType::IQ4_NL, "iq4_nl", kQuantBlock, sizeof(BlockIQ4_NL), dequantize_iq4_nl, first_nonfinite_iq4_nl, false},
    {TensorType::IQ4_XS, "iq4_xs", kSuperBlock, sizeof(BlockIQ4_XS), dequantize_iq4_xs, first_nonfinite_iq4_xs, false},
    {TensorType::BF16, "bf16", 1, 2, dequantize_bf16, nullptr, true},
};

const TensorTypeTraits& traits_of(TensorType type) {
    const TensorTypeTraits* t = tensor_type_traits(static_cast<uint32_t>(type));
    if (t == nullptr) bad_type(type);
    return *t;
}

}  // namespace

const TensorTypeTraits* tensor_type_traits(uint32_t raw_type) {
    for (const TensorTypeTraits& t : kTypes) {
        if (static_cast<uint32_t>(t.type) == raw_type) return &t;
    }
    return nullptr;
}

bool tensor_type_supported(uint32_t raw_type) { return tensor_type_traits(raw_type) != nullptr; }

bool tensor_type_writable(TensorType type) {
    const TensorTypeTraits* t = tensor_type_traits(static_cast<uint32_t>(type));
    return t != nullptr && t->writable;
}

const char* tensor_type_name(TensorType type) {
    const TensorTypeTraits* t = tensor_type_traits(static_cast<uint32_t>(type));
    return t != nullptr ? t->name : "unknown";
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
    auto lower = [](std::string_view v) {
        std::string out(v);
        std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        return out;
    };
    const std::string want = lower(name);
    for (const TensorTypeTraits& t : kTypes) {
        if (want == lower(t.name)) return t.type;
    }
    return std::nullopt;
}

int64_t tensor_type_block_elements(TensorType type) { return traits_of(type).block_elements; }

size_t tensor_type_block_bytes(TensorType type) { return traits_of(type).block_bytes; }

int64_t tensor_first_nonfinite_block(TensorType type, const void* data, int64_t n_blocks) {
    const TensorTypeTraits& t = traits_of(type);
    return t.first_nonfinite_block != nullptr ? t.first_nonfinite_block(data, n_blocks) : -1;
}

size_t tensor_row_bytes(TensorType type, int64_t n_elements) {
    require_blocks(type, n_elements);
    return static_cast<size_t>(n_elements / tensor_type_block_elements(type)) * tensor_type_block_bytes(type);
}

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        // Zero or subnormal: man * 2^-24, exact in float.
        const float v = static_cast<float>(man) * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / nan (payload kept)
    return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t u = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u) return sign | 0x7c00u;
        return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet nan, top payload bits
    }
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds (to even) past 65504
    const int e = static_cast<int>(a >> 23);
    uint32_t m, shift;
    if (e >= 113) {
        // Normal half: keep 10 mantissa bits; the exponent rebias is added
        // below so a mantissa carry rolls into the exponent correctly.
        m = a & 0x7fffffu;
        shift = 13;
        const uint32_t q = m >> shift, rem = m & 0x1fffu;
        uint32_t h = (static_cast<uint32_t>(e - 112) << 10) | q;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    if (e < 102) return sign;  // below 2^-25: rounds to zero
    // Subnormal half: units of 2^-24; value = m * 2^(e-150) with the hidden bit.
    m = (a & 0x7fffffu) | 0x800000u;
    shift = static_cast<uint32_t>(126 - e);  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal, which is right
    return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    const uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet nan
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
    require_blocks(type, n);
    switch (type) {
        case TensorType::F32:
            if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return;
        case TensorType::F16: {
            uint16_t* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
            return;
        }
        case TensorType::BF16: {
            uint16_t* d = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
            return;
        }
        case TensorType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQuantBlock); return;
        case TensorType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQuantBlock); return;
        case TensorType::Q5_0: quantize_q5_0(src, dst, n / kQuantBlock); return;
        case TensorType::Q5_1: quantize_q5_1(src, dst, n / kQuantBlock); return;
        case TensorType::Q4_K: quantize_q4_k(src, dst, n / kSuperBlock); return;
        case TensorType::Q5_K: quantize_q5_k(src, dst, n / kSuperBlock); return;
        case TensorType::Q6_K: quantize_q6_k(src, dst, n / kSuperBlock); return;
        default: break;
    }
    throw Error(std::string("specd cannot write tensor type ") + tensor_type_name(type) +
                " (it writes f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K and q6_K)");
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
    require_blocks(type, n);
    const TensorTypeTraits& t = traits_of(type);
    t.dequantize(src, dst, n / t.block_elements);
}

}  // namespace specd
