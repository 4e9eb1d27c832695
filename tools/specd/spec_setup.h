// Shared by the CLI commands that decode speculatively: the flags
// (llama.cpp's names) and building the proposer they describe.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/backend.h"
#include "engine/proposer.h"
#include "engine/speculative.h"
#include "engine/thread_pool.h"
#include "gpu/device.h"

namespace specd::cli {

struct SpecOptions {
    std::string draft_model;        // -md: a draft GGUF; implies --spec draft
    std::string kind;               // none | draft | ngram ("" = draft if -md given, else none)
    int32_t ngram_min = 1;
    int32_t ngram_max = 4;
    int32_t draft_vocab = 4096;     // --draft-vocab: ForwardOptions::draft_head_tokens of the draft (0 = full head)
    SpeculativeParams params;       // --draft-max/--draft-min/--draft-p-min, --no-adaptive
};

void add_spec_flags(CLI::App* cmd, SpecOptions& o);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed
// (a given seed also sets coupled: engine/coupled_sampling.h).
void add_sampling_flags(CLI::App* cmd, SamplingParams& s);

// What add_spec_flags produced, loaded: the proposer (null for none) and the
// draft model it owns.
struct SpecSetup {
    std::unique_ptr<LlamaModel> draft_model;
    std::unique_ptr<Proposer> proposer;
    std::string kind;  // resolved: none | draft | ngram
};

// `device`: where a draft model runs (null: the CPU on `pool`), a choice
// from choose_device() without an error.
SpecSetup make_spec_setup(const SpecOptions& o, const LlamaModel& target, ThreadPool& pool, int32_t n_ctx,
                          const gpu::BackendChoice* device = nullptr);

// --device auto|cpu|cuda (default auto), the runtime's flag, on `generate`
// and `bench`; CLI11 rejects any other word.
void add_device_flag(CLI::App* cmd, std::string& device);
// The same choice as `specd serve` makes: prints its one line on stderr
// ("specd: no CUDA device (...): running on the CPU") and throws
// specd::Error with the refusal ("--device cuda: no CUDA device (...)"),
// which main prints as "specd: error: ..." before exiting 1.
gpu::BackendChoice choose_device(const std::string& device);
// A forward backend for `model` on the chosen device (the weights are
// uploaded for this backend alone on a GPU); `pool` runs it on the CPU.
std::unique_ptr<ForwardBackend> make_backend(const gpu::BackendChoice& device, const LlamaModel& model, ThreadPool& pool,
                                             const ForwardOptions& options = {});
// "avx512" etc. for a CPU forward pass, else the backend's name ("cuda:0").
std::string backend_label(const ForwardBackend& backend);

// "-md" and "-np" are llama.cpp's spellings; CLI11 only knows one-letter short options.
void rewrite_llama_style_flags(int& argc, char**& argv);

}  // namespace specd::cli
