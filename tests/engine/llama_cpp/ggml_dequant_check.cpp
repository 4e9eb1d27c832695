// specd's dequantisation against ggml's own, bit for bit, for every tensor
// type specd reads. ggml comes from the libggml-base that node-llama-cpp
// ships (dlopen'ed; nothing of llama.cpp is built or linked here): its
// ggml_get_type_traits(type)->to_float is compared with specd's
// dequantize_row on
//   - random blocks: every byte random, the fp16 scales random finite values
//     (subnormals included), which reach every code path of the decoders;
//   - blocks ggml's own reference quantiser (from_float_ref) writes from
//     Gaussian floats, as in real files.
//
//   ggml_dequant_check LIBGGML_BASE.so
//
// Prints one line per type; exit 0 when all agree, 1 on any difference, 77
// (skipped) when the library cannot be loaded.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor_type.h"

namespace {

// ggml.h's struct ggml_type_traits (stable across releases since 2024).
struct GgmlTypeTraits {
    const char* type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void* x, float* y, int64_t k);
    void (*from_float_ref)(const float* x, void* y, int64_t k);
};
using GetTraitsFn = const GgmlTypeTraits* (*)(int type);

struct TypeCase {
    specd::TensorType type;
    std::vector<size_t> fp16_fields;  // byte offsets of the fp16 scales in a block
};

const TypeCase kCases[] = {
    {specd::TensorType::F16, {}},
    {specd::TensorType::BF16, {}},
    {specd::TensorType::Q8_0, {0}},
    {specd::TensorType::Q4_0, {0}},
    {specd::TensorType::Q5_0, {0}},
    {specd::TensorType::Q5_1, {0, 2}},
    {specd::TensorType::IQ4_NL, {0}},
    {specd::TensorType::Q2_K, {80, 82}},
    {specd::TensorType::Q3_K, {108}},
    {specd::TensorType::Q4_K, {0, 2}},
    {specd::TensorType::Q5_K, {0, 2}},
    {specd::TensorType::Q6_K, {208}},
    {specd::TensorType::IQ4_XS, {0}},
};

constexpr int kRandomBlocks = 4096;
constexpr int kQuantizedRows = 64;
constexpr int64_t kRowElements = 1024;  // a multiple of every block size

uint16_t random_finite_fp16(std::mt19937& rng) {
    for (;;) {
        const auto h = static_cast<uint16_t>(rng());
        if ((h & 0x7c00u) != 0x7c00u) return h;
    }
}

// Elements where the two decodings differ in their bits.
int64_t count_differences(const std::vector<float>& a, const std::vector<float>& b, int64_t& first) {
    int64_t n = 0;
    first = -1;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (first < 0) first = static_cast<int64_t>(i);
            ++n;
        }
    }
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s LIBGGML_BASE.so\n", argv[0]);
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "ggml_dequant_check: cannot load %s: %s (skipped)\n", argv[1], dlerror());
        return 77;
    }
    auto get_traits = reinterpret_cast<GetTraitsFn>(dlsym(lib, "ggml_get_type_traits"));
    if (!get_traits) {
        std::fprintf(stderr, "ggml_dequant_check: %s lacks ggml_get_type_traits\n", argv[1]);
        return 1;
    }
    std::mt19937 rng(20261207);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    int failures = 0;
    for (const TypeCase& c : kCases) {
        const std::string name = specd::tensor_type_name(c.type);
        const GgmlTypeTraits* g = get_traits(static_cast<int>(c.type));
        const int64_t be = specd::tensor_type_block_elements(c.type);
        const size_t bb = specd::tensor_type_block_bytes(c.type);
        if (!g || !g->to_float || g->type_name != name || g->blck_size != be || g->type_size != bb) {
            std::printf("FAIL %-7s ggml describes type %u as %s, %lld elements in %zu bytes (specd: %lld in %zu)\n",
                        name.c_str(), static_cast<unsigned>(c.type), g && g->type_name ? g->type_name : "(none)",
                        g ? static_cast<long long>(g->blck_size) : 0LL, g ? g->type_size : 0, static_cast<long long>(be), bb);
            ++failures;
            continue;
        }
        // Random blocks.
        std::vector<uint8_t> blocks(bb * kRandomBlocks);
        for (uint8_t& byte : blocks) byte = static_cast<uint8_t>(rng());
        for (int b = 0; b < kRandomBlocks; ++b) {
            for (size_t off : c.fp16_fields) {
                const uint16_t h = random_finite_fp16(rng);
                std::memcpy(&blocks[b * bb + off], &h, sizeof h);
            }
        }
        if (c.type == specd::TensorType::F16) {
            for (int64_t i = 0; i < kRandomBlocks; ++i) {
                const uint16_t h = random_finite_fp16(rng);
                std::memcpy(&blocks[static_cast<size_t>(i) * 2], &h, 2);
            }
        }
        const int64_t n_random = kRandomBlocks * be;
        std::vector<float> theirs(static_cast<size_t>(n_random)), ours(static_cast<size_t>(n_random));
        g->to_float(blocks.data(), theirs.data(), n_random);
        specd::dequantize_row(c.type, blocks.data(), ours.data(), n_random);
        int64_t first = -1;
        const int64_t diff_random = count_differences(theirs, ours, first);
        if (diff_random != 0) {
            std::printf("FAIL %-7s random blocks: %lld of %lld elements differ; first at %lld: ggml %a, specd %a\n",
                        name.c_str(), static_cast<long long>(diff_random), static_cast<long long>(n_random),
                        static_cast<long long>(first), theirs[static_cast<size_t>(first)], ours[static_cast<size_t>(first)]);
            ++failures;
            continue;
        }
        // Blocks ggml's reference quantiser writes from Gaussian rows.
        int64_t n_quantized = 0;
        if (g->from_float_ref) {
            const int64_t n = kQuantizedRows * kRowElements;
            std::vector<float> src(static_cast<size_t>(n));
            for (float& v : src) v = gauss(rng);
            std::vector<uint8_t> q(static_cast<size_t>(n / be) * bb);
            for (int r = 0; r < kQuantizedRows; ++r) {
                g->from_float_ref(src.data() + r * kRowElements, q.data() + static_cast<size_t>(r * kRowElements / be) * bb,
                                  kRowElements);
            }
            theirs.assign(static_cast<size_t>(n), 0.0f);
            ours.assign(static_cast<size_t>(n), 0.0f);
            g->to_float(q.data(), theirs.data(), n);
            specd::dequantize_row(c.type, q.data(), ours.data(), n);
            const int64_t diff = count_differences(theirs, ours, first);
            if (diff != 0) {
                std::printf("FAIL %-7s ggml-quantised blocks: %lld of %lld elements differ; first at %lld: ggml %a, specd %a\n",
                            name.c_str(), static_cast<long long>(diff), static_cast<long long>(n), static_cast<long long>(first),
                            theirs[static_cast<size_t>(first)], ours[static_cast<size_t>(first)]);
                ++failures;
                continue;
            }
            n_quantized = n;
        }
        std::printf("ok   %-7s bit-identical to ggml's to_float: %d random blocks (%lld elements), %lld elements ggml quantised\n",
                    name.c_str(), kRandomBlocks, static_cast<long long>(n_random), static_cast<long long>(n_quantized));
    }
    std::printf("%s\n", failures == 0 ? "all types agree" : "dequantisation differs from ggml's");
    return failures == 0 ? 0 : 1;
}
