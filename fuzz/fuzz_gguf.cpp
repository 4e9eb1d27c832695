// libFuzzer target for the GGUF reader. For any input bytes,
// gguf::File::parse either throws specd::Error or returns a file whose every
// metadata value, typed getter and tensor byte can be read without a crash,
// leak or undefined behaviour (run under ASan + UBSan):
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     fuzz/fuzz_gguf.cpp engine/gguf.cpp engine/tensor_type.cpp -o /tmp/fuzz_gguf
//   /tmp/fuzz_gguf -max_total_time=30 fuzz/corpus/gguf
// Seeds in fuzz/corpus/gguf/ were written by gguf::Writer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/tensor_type.h"

namespace {

using specd::gguf::Value;
using specd::gguf::ValueType;

// Folds every field of a value tree into a checksum, so nothing is optimised away.
uint64_t walk(const Value& v) {
    uint64_t h = static_cast<uint64_t>(v.type) * 31 + v.u + static_cast<uint64_t>(v.i) + (v.b ? 1 : 0);
    h += static_cast<uint64_t>(v.f == v.f ? 1 : 0);
    for (unsigned char c : v.s) h = h * 131 + c;
    for (const Value& e : v.array) {
        if (e.type != v.array_type) std::abort();  // the reader promised homogeneous arrays
        h = h * 7 + walk(e);
    }
    return h;
}

// Each getter either returns or throws specd::Error.
template <typename F>
uint64_t attempt(F&& getter) {
    try {
        return static_cast<uint64_t>(getter());
    } catch (const specd::Error&) {
        return 1;
    }
}

uint64_t touch_getters(const specd::gguf::File& f, const std::string& key) {
    uint64_t h = 0;
    h += attempt([&] { return f.get_u32(key); });
    h += attempt([&] { return f.get_i32(key); });
    h += attempt([&] { return f.get_u64(key); });
    h += attempt([&] { return f.get_i64(key); });
    h += attempt([&] { return f.get_f32(key) == 0.0f; });
    h += attempt([&] { return f.get_bool(key); });
    h += attempt([&] { return f.get_string(key).size(); });
    h += attempt([&] { return f.get_string_array(key).size(); });
    h += attempt([&] { return f.get_f32_array(key).size(); });
    h += attempt([&] { return f.get_i32_array(key).size(); });
    h += attempt([&] { return f.get_u32_array(key).size(); });
    return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> copy(data, data + size);  // an exact-size heap buffer: ASan sees any overread
    try {
        const specd::gguf::File f = specd::gguf::File::parse(copy.data(), copy.size());
        volatile uint64_t sink = f.version() + f.alignment() + f.data_offset();
        for (const auto& [key, value] : f.metadata()) {
            if (f.find(key) != &value) std::abort();
            sink = sink + walk(value) + touch_getters(f, key);
        }
        sink = sink + touch_getters(f, "missing.key");
        std::vector<float> row;  // (ne[0]) the first row, dequantized
        for (const specd::gguf::TensorInfo& t : f.tensors()) {
            if (f.find_tensor(t.name) != &t) std::abort();
            if (t.data < copy.data() || t.n_bytes > static_cast<size_t>(copy.data() + copy.size() - t.data)) std::abort();
            uint64_t h = static_cast<uint64_t>(t.n_elements());
            for (size_t k = 0; k < t.n_bytes; ++k) h = h * 33 + t.data[k];
            if (t.ne[0] <= 4096) {
                row.resize(static_cast<size_t>(t.ne[0]));
                specd::dequantize_row(t.type, t.data, row.data(), t.ne[0]);
                for (float x : row) h += x == x ? 1 : 0;
            }
            sink = sink + h;
        }
        (void)sink;
    } catch (const specd::Error&) {
        // Rejected input: the expected outcome for most mutations.
    }
    return 0;
}
