// Quantizes a GGUF with llama.cpp's own llama_model_quantize(), loaded at run
// time from the shared library node-llama-cpp ships (nothing of llama.cpp is
// built or linked here). The interop test uses it to make GGUF files that
// llama.cpp wrote, which specd must then load.
//
//   llama_quantize LIBLLAMA.so IN.gguf OUT.gguf TYPE
//
// TYPE: f32, f16, q4_0, q8_0, q5_0, q5_1, Q2_K, Q3_K_S/M/L, Q4_K_S/M,
// Q5_K_S/M, Q6_K, IQ4_NL, IQ4_XS (llama-quantize's names for its mixes).
//
// llama_model_quantize_params is passed as llama.cpp lays it out: nthread
// (int32) then ftype (int32) lead the struct in every release. The defaults
// (nthread 0; ftype LLAMA_FTYPE_MOSTLY_Q8_0 = 7 in current releases, Q5_1 = 9
// in older ones) are checked before anything is changed, so a library with
// another layout is refused (exit 77, skipped) rather than fed a wrong struct.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

// Larger than any release's llama_model_quantize_params (returned through a
// hidden pointer, so the callee writes only its own size into it).
struct QuantizeParamsStorage {
    alignas(8) unsigned char bytes[512];
};

using DefaultParamsFn = QuantizeParamsStorage (*)();
using QuantizeFn = uint32_t (*)(const char* in, const char* out, const void* params);
using BackendInitFn = void (*)();

constexpr int32_t kFtypeMostlyQ8_0 = 7;
constexpr int32_t kFtypeMostlyQ5_1 = 9;

// llama.h's LLAMA_FTYPE_* (ALL_F32, MOSTLY_*): the mixes its quantizer writes.
struct Ftype {
    const char* name;
    int32_t value;
};
constexpr Ftype kFtypes[] = {
    {"f32", 0},     {"f16", 1},      {"q4_0", 2},     {"q8_0", 7},     {"q5_0", 8},     {"q5_1", 9},
    {"Q2_K", 10},   {"Q3_K_S", 11},  {"Q3_K_M", 12},  {"Q3_K_L", 13},  {"Q4_K_S", 14},  {"Q4_K_M", 15},
    {"Q5_K_S", 16}, {"Q5_K_M", 17},  {"Q6_K", 18},    {"IQ4_NL", 25},  {"IQ4_XS", 30},
};

int32_t ftype_for(const std::string& type) {
    for (const Ftype& f : kFtypes) {
        if (type == f.name) return f.value;
    }
    return -1;
}

std::string ftype_names() {
    std::string out;
    for (const Ftype& f : kFtypes) {
        if (!out.empty()) out += '|';  // appended piece by piece: "x" + string trips GCC 12's -Wrestrict false positive
        out += f.name;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s LIBLLAMA.so IN.gguf OUT.gguf %s\n", argv[0], ftype_names().c_str());
        return 2;
    }
    const int32_t ftype = ftype_for(argv[4]);
    if (ftype < 0) {
        std::fprintf(stderr, "llama_quantize: unsupported type %s (%s)\n", argv[4], ftype_names().c_str());
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "llama_quantize: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    auto default_params = reinterpret_cast<DefaultParamsFn>(dlsym(lib, "llama_model_quantize_default_params"));
    auto quantize = reinterpret_cast<QuantizeFn>(dlsym(lib, "llama_model_quantize"));
    auto backend_init = reinterpret_cast<BackendInitFn>(dlsym(lib, "llama_backend_init"));
    if (!default_params || !quantize) {
        std::fprintf(stderr, "llama_quantize: %s lacks llama_model_quantize\n", argv[1]);
        return 1;
    }
    if (backend_init) backend_init();
    QuantizeParamsStorage params = default_params();
    int32_t fields[2];
    std::memcpy(fields, params.bytes, sizeof fields);
    if (fields[0] != 0 || (fields[1] != kFtypeMostlyQ8_0 && fields[1] != kFtypeMostlyQ5_1)) {
        std::fprintf(stderr, "llama_quantize: unexpected llama_model_quantize_params layout (defaults nthread %d, ftype %d)\n",
                     fields[0], fields[1]);
        return 77;
    }
    fields[0] = 1;  // nthread
    fields[1] = ftype;
    std::memcpy(params.bytes, fields, sizeof fields);
    const uint32_t rc = quantize(argv[2], argv[3], params.bytes);
    if (rc != 0) {
        std::fprintf(stderr, "llama_quantize: llama_model_quantize(%s -> %s, %s) failed with %u\n", argv[2], argv[3], argv[4], rc);
        return 1;
    }
    std::printf("llama.cpp wrote %s (%s)\n", argv[3], argv[4]);
    return 0;
}
