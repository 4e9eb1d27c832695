// Built against the installed specd (find_package(specd), specd::runtime):
// one blocking greedy generation.
//   specd_consumer TARGET.gguf
#include <cstdio>

#include <specd/actors/runtime.h>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TARGET.gguf\n", argv[0]);
        return 2;
    }
    specd::RuntimeConfig config;
    config.target_model = argv[1];
    try {
        specd::StandaloneRuntime host(config);
        specd::generate_request request;
        request.id = "consumer";
        request.prompt = "Once upon a time";
        request.max_tokens = 24;
        request.sampling.temperature = 0.0f;
        const specd::GenerateResult r = host.runtime().generate(request);
        if (!r.ok) {
            std::fprintf(stderr, "error %s: %s\n", r.error.code.c_str(), r.error.message.c_str());
            return 1;
        }
        std::printf("%s%s\n", request.prompt.c_str(), r.text.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "specd_consumer: %s\n", e.what());
        return 1;
    }
    return 0;
}
