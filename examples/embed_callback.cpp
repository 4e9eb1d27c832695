// Embedding specd in an application that does not use CAF: a standalone
// runtime with its own actor system; tokens arrive through callbacks, and
// generate() blocks for the whole result.
//
//   embed_callback TARGET.gguf [DRAFT.gguf] [PROMPT]
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "actors/runtime.h"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TARGET.gguf [DRAFT.gguf] [PROMPT]\n", argv[0]);
        return 2;
    }
    specd::RuntimeConfig config;
    config.target_model = argv[1];
    if (argc > 2) config.draft_model = argv[2];
    try {
        specd::StandaloneRuntime host(config);
        specd::generate_request request;
        request.id = "callbacks";
        request.prompt = argc > 3 ? argv[3] : "Once upon a time";
        request.max_tokens = 48;
        request.sampling.temperature = 0.0f;

        // 1. Streaming through callbacks (called on a runtime thread).
        std::mutex mu;
        std::condition_variable cv;
        bool finished = false;
        int exit_code = 0;
        specd::RuntimeCallbacks cb;
        cb.on_token = [](const specd::token_event& e) {
            std::printf("%s", e.text.c_str());
            std::fflush(stdout);
        };
        cb.on_done = [&](const specd::done_event& d) {
            std::printf("\n[done: %s, %d tokens]\n", d.finish_reason.c_str(), d.completion_tokens);
            std::lock_guard<std::mutex> lock(mu);
            finished = true;
            cv.notify_all();
        };
        cb.on_error = [&](const specd::error_event& e) {
            std::fprintf(stderr, "error %s: %s\n", e.code.c_str(), e.message.c_str());
            std::lock_guard<std::mutex> lock(mu);
            finished = true;
            exit_code = 1;
            cv.notify_all();
        };
        host.runtime().submit(request, cb);
        {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return finished; });
        }

        // 2. Blocking: the same request, the whole result at once (greedy,
        // so the same text).
        specd::GenerateResult result = host.runtime().generate(request);
        if (!result.ok) {
            std::fprintf(stderr, "error %s: %s\n", result.error.code.c_str(), result.error.message.c_str());
            return 1;
        }
        std::printf("[blocking generate: %zu tokens, %lld from accepted drafts]\n", result.tokens.size(),
                    static_cast<long long>(result.done.accepted));
        return exit_code;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "embed_callback: %s\n", e.what());
        return 1;
    }
}
