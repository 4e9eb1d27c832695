// specd inflate: widens a llama model into a benchmark construct that
// computes the same logits (engine/model_inflate.h). Not a model: a large,
// memory-bound target with the small model's real text, for measuring
// speculative decoding where real models live.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/error.h"
#include "engine/model_inflate.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

struct InflateArgs {
    std::string input;
    std::string output;
    InflateOptions options;
};

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void run_inflate(const InflateArgs& a) {
    if (a.options.dim <= 0 || a.options.ffn <= 0) throw Error("inflate: --dim and --ffn must be positive");
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    // A terminal gets a live line (tensor i of n, bytes, rate), a pipe or
    // log only the summary.
    const bool live = isatty(fileno(stderr)) != 0;
    double last_draw = -1.0;
    auto progress = [&](const InflateProgress& p) {
        const double t = seconds();
        if (!live || (t - last_draw < 0.1 && p.tensor != p.n_tensors)) return;
        last_draw = t;
        std::fprintf(stderr, "\rspecd: inflate: tensor %zu of %zu, %.0f of %.0f MiB, %.0f MiB/s   ", p.tensor, p.n_tensors,
                     mib(p.bytes_done), mib(p.bytes_total), t > 0.0 ? mib(p.bytes_done) / t : 0.0);
        if (p.tensor == p.n_tensors) std::fprintf(stderr, "\n");
    };
    const InflateStats s = inflate_model(a.input, a.output, a.options, progress);
    std::fprintf(stderr,
                 "specd: inflated %s (%.2fM parameters, %.2f MiB) -> %s (dim %lld, ffn %lld, +%d layers: %.2fM parameters, "
                 "%.2f MiB, f32, %zu tensors) in %.2f s; a benchmark construct with the same logits, not a model\n",
                 a.input.c_str(), static_cast<double>(s.params_in) / 1e6, mib(s.bytes_in), a.output.c_str(),
                 static_cast<long long>(a.options.dim), static_cast<long long>(a.options.ffn), a.options.extra_layers,
                 static_cast<double>(s.params_out) / 1e6, mib(s.bytes_out), s.n_tensors, seconds());
}

}  // namespace

void register_inflate_command(CLI::App& app) {
    auto a = std::make_shared<InflateArgs>();
    CLI::App* cmd = app.add_subcommand(
        "inflate", "Widen a llama GGUF into a benchmark construct with the same logits (f32; not a model)");
    cmd->add_option("input", a->input, "input GGUF (llama)")->required();
    cmd->add_option("output", a->output, "output GGUF (f32)")->required();
    cmd->add_option("--dim", a->options.dim, "new embedding length (>= the model's, a multiple of its head size)")->required();
    cmd->add_option("--ffn", a->options.ffn, "new feed-forward length (>= the model's)")->required();
    cmd->add_option("--extra-layers", a->options.extra_layers, "layers to append, each adding nothing (default 0)");
    cmd->add_option("--seed", a->options.seed, "seed of the random weights of new heads, units and layers");
    cmd->callback([a] { run_inflate(*a); });
}

}  // namespace specd::cli
