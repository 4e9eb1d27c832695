// Embedding specd in an application that has its own CAF actor system:
// the runtime's actors live next to the application's, and the tokens of a
// generation arrive as messages to one of the application's actors.
//
//   embed_actor TARGET.gguf [DRAFT.gguf] [PROMPT]
#include <cstdio>
#include <string>

#include <caf/all.hpp>

#include "actors/runtime.h"

namespace {

// The application's own actor: prints the stream, then reports the figures.
// (It takes an argument: CAF 0.17 binds a null reference when an actor
// function has none, which UBSan reports.)
caf::behavior printer(caf::event_based_actor* self, std::string label) {
    return {
        [](const specd::token_event& e) {
            std::printf("%s", e.text.c_str());
            std::fflush(stdout);
        },
        [self, label](const specd::done_event& d) {
            std::printf("\n[%s done: %s, %d tokens, %lld of %lld drafted tokens accepted]\n", label.c_str(), d.finish_reason.c_str(), d.completion_tokens,
                        static_cast<long long>(d.accepted), static_cast<long long>(d.drafted));
            self->quit();
        },
        [self](const specd::error_event& e) {
            std::fprintf(stderr, "error %s: %s\n", e.code.c_str(), e.message.c_str());
            self->quit(caf::sec::runtime_error);
        },
    };
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s TARGET.gguf [DRAFT.gguf] [PROMPT]\n", argv[0]);
        return 2;
    }
    caf::actor_system_config cfg;
    specd::register_types(cfg);  // before the system exists
    caf::actor_system system{cfg};

    specd::RuntimeConfig config;
    config.target_model = argv[1];
    if (argc > 2) config.draft_model = argv[2];
    try {
        auto runtime = specd::Runtime::create(system, config);
        specd::generate_request request;
        request.id = "example";
        request.prompt = argc > 3 ? argv[3] : "Once upon a time";
        request.max_tokens = 48;
        request.sampling.temperature = 0.0f;
        auto sink = system.spawn(printer, std::string("printer"));
        runtime->submit(request, sink);
        caf::scoped_actor self{system};
        self->wait_for(sink);  // the printer quits after done/error
        // ~Runtime stops its actors; then the system can shut down.
    } catch (const std::exception& e) {
        std::fprintf(stderr, "embed_actor: %s\n", e.what());
        return 1;
    }
    return 0;
}
