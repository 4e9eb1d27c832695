// Quantizes a GGUF with llama.cpp's own llama_model_quantize(), loaded at run
// time from the shared library node-llama-cpp ships (nothing of llama.cpp is
// built or linked here). The interop test uses it to make GGUF files that
// llama.cpp wrote, which specd must then load.
//
//   llama_quantize LIBLLAMA.so IN.gguf OUT.gguf q4_0|q8_0|f16|f32
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

int32_t ftype_for(const std::string& type) {
    if (type == "f32") return 0;   // LLAMA_FTYPE_ALL_F32
    if (type == "f16") return 1;   // LLAMA_FTYPE_MOSTLY_F16
    if (type == "q8_0") return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    if (type == "q4_0") return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0 (the classifier gets llama.cpp's own choice)
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s LIBLLAMA.so IN.gguf OUT.gguf q4_0|q8_0|f16|f32\n", argv[0]);
        return 2;
    }
    const int32_t ftype = ftype_for(argv[4]);
    if (ftype < 0) {
        std::fprintf(stderr, "llama_quantize: unsupported type %s (q4_0, q8_0, f16, f32)\n", argv[4]);
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
