// `specd bench-chat`: time to first token at each turn of multi-turn
// conversations, with the prefix cache (cache_prompt true) and without it
// (false), side by side on one in-process runtime. Each turn's prompt is
// the previous prompt, its reply and the next user text, so with the cache
// a turn prefills only what follows the last turn's full blocks.
// Conversations alternate between the two arms turn by turn (the machine's
// noise falls on both alike); each opens with its own line, so no
// conversation meets another's blocks.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "config/runtime_config.h"
#include "engine/error.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

struct BenchChatOptions {
    std::string target, draft;
    int conversations = 6;  // per arm
    int turns = 5;
    int max_tokens = 24;    // reply length (greedy, EOS ignored)
    int threads = 0;
    std::string device;
};

// The user's side of every conversation (stories15M-style text; any model reads it).
const char* const kTurns[] = {
    " Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine with her friends and her dog.",
    " One day, Lily found a shiny red ball under a big tree.",
    " Then the sky turned grey and it started to rain.",
    " Her mom called her home for dinner.",
    " The next morning, Lily went back to the tree.",
    " She saw a little bird in the nest.",
    " The bird sang a happy song.",
    " Lily smiled and went home.",
};

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

void run_bench_chat(const BenchChatOptions& o) {
    const int max_turns = static_cast<int>(std::size(kTurns));
    if (o.turns < 1 || o.turns > max_turns) throw Error("bench-chat: --turns must be in [1, " + std::to_string(max_turns) + "]");
    if (o.conversations < 1) throw Error("bench-chat: --conversations must be >= 1");
    ConfigLoader loader;
    loader.load_environment();
    RuntimeConfig rc = loader.config();
    rc.target_model = o.target;
    rc.draft_model = o.draft;
    rc.threads_target = o.threads;
    rc.prefix_cache = true;
    if (!o.device.empty()) rc.device = o.device;
    StandaloneRuntime host(rc);
    Runtime& rt = host.runtime();

    struct Turn {
        std::vector<double> ttft[2], total[2];  // [arm] ms per conversation; arm 1: the prefix cache
        std::vector<double> prompt_tokens, cached_tokens;
    };
    std::vector<Turn> turns(static_cast<size_t>(o.turns));
    std::vector<std::string> text[2];  // [arm][conversation] the conversation so far
    for (int arm = 0; arm < 2; ++arm) {
        for (int c = 0; c < o.conversations; ++c)
            text[arm].push_back("Story " + std::to_string(c + 1) + (arm ? "a" : "b") + ".");
    }
    // A warm-up request, so the first timed turn pays no first-touch costs.
    generate_request warm;
    warm.prompt = kTurns[0];
    warm.max_tokens = 8;
    warm.sampling.temperature = 0.0f;
    warm.cache_prompt = false;
    rt.generate(warm);

    for (int t = 0; t < o.turns; ++t) {
        for (int c = 0; c < o.conversations; ++c) {
            for (int arm = 0; arm < 2; ++arm) {
                std::string& conv = text[arm][static_cast<size_t>(c)];
                conv += kTurns[t];
                generate_request req;
                req.prompt = conv;
                req.max_tokens = o.max_tokens;
                req.sampling.temperature = 0.0f;
                req.stop_at_eos = false;
                req.cache_prompt = arm == 1;
                const GenerateResult r = rt.generate(req);
                if (!r.ok) throw Error("bench-chat: a request failed: " + r.error.message);
                Turn& tt = turns[static_cast<size_t>(t)];
                tt.ttft[arm].push_back(r.done.ttft_ms);
                tt.total[arm].push_back(r.done.total_ms);
                if (arm == 1) {
                    tt.prompt_tokens.push_back(r.done.prompt_tokens);
                    tt.cached_tokens.push_back(r.done.cached_prompt_tokens);
                }
                conv += r.text;
            }
        }
    }
    std::printf("bench-chat: %s%s%s, %d conversations per arm, %d-token replies (greedy), medians\n", o.target.c_str(),
                o.draft.empty() ? "" : ", draft ", o.draft.c_str(), o.conversations, o.max_tokens);
    std::printf("| turn | prompt tokens | cached | TTFT no cache (ms) | TTFT cache (ms) | TTFT ratio | turn no cache (ms) | turn cache (ms) |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int t = 0; t < o.turns; ++t) {
        const Turn& tt = turns[static_cast<size_t>(t)];
        const double off = median(tt.ttft[0]), on = median(tt.ttft[1]);
        std::printf("| %d | %.0f | %.0f | %.1f | %.1f | %.2fx | %.1f | %.1f |\n", t + 1, median(tt.prompt_tokens), median(tt.cached_tokens),
                    off, on, on > 0 ? off / on : 0.0, median(tt.total[0]), median(tt.total[1]));
    }
}

}  // namespace

void register_bench_chat_command(CLI::App& app) {
    auto o = std::make_shared<BenchChatOptions>();
    CLI::App* b = app.add_subcommand("bench-chat", "time to first token per turn of multi-turn chats, prefix cache on and off");
    b->add_option("-m,--model", o->target, "target GGUF")->required();
    b->add_option("--draft", o->draft, "draft model GGUF (default: n-gram drafts)");
    b->add_option("-c,--conversations", o->conversations, "conversations per arm")->capture_default_str();
    b->add_option("--turns", o->turns, "turns per conversation (1-8)")->capture_default_str();
    b->add_option("-n,--max-tokens", o->max_tokens, "tokens per reply")->capture_default_str();
    b->add_option("-t,--threads", o->threads, "target threads (0: all)")->capture_default_str();
    b->add_option("--device", o->device, "auto, cpu or cuda (default: the configured one)");
    b->callback([o] { run_bench_chat(*o); });
}

}  // namespace specd::cli
