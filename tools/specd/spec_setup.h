// Shared by the CLI commands that decode speculatively: the flags
// (llama.cpp's names) and building the proposer they describe.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/proposer.h"
#include "engine/speculative.h"

namespace specd::cli {

struct SpecOptions {
    std::string draft_model;        // -md: a draft GGUF; implies --spec draft
    std::string kind;               // none | draft | ngram ("" = draft if -md given, else none)
    int32_t ngram_min = 1;
    int32_t ngram_max = 4;
    SpeculativeParams params;       // --draft-max/--draft-min/--draft-p-min, --no-adaptive
};

void add_spec_flags(CLI::App* cmd, SpecOptions& o);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed.
void add_sampling_flags(CLI::App* cmd, SamplingParams& s);

// What add_spec_flags produced, loaded: the proposer (null for none) and the
// draft model it owns.
struct SpecSetup {
    std::unique_ptr<LlamaModel> draft_model;
    std::unique_ptr<Proposer> proposer;
    std::string kind;  // resolved: none | draft | ngram
};

SpecSetup make_spec_setup(const SpecOptions& o, const LlamaModel& target, ThreadPool& pool, int32_t n_ctx);

// "-md" and "-np" are llama.cpp's spellings; CLI11 only knows one-letter short options.
void rewrite_llama_style_flags(int& argc, char**& argv);

}  // namespace specd::cli
