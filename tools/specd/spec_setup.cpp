#include "tools/specd/spec_setup.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "actors/backend_factory.h"
#include "engine/error.h"
#include "engine/forward.h"

namespace specd::cli {

void add_sampling_flags(CLI::App* cmd, SamplingParams& s) {
    cmd->add_option("--temp", s.temperature, "temperature; 0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", s.top_k, "top-k sampling; 0 = off")->capture_default_str();
    cmd->add_option("--top-p", s.top_p, "top-p sampling; 1.0 = off")->capture_default_str();
    cmd->add_option("--min-p", s.min_p, "min-p sampling; 0.0 = off")->capture_default_str();
    cmd->add_option("--repeat-penalty", s.repeat_penalty, "penalise repeated tokens; 1.0 = off")->capture_default_str();
    cmd->add_option("--repeat-last-n", s.repeat_last_n, "last n tokens the penalties look at")->capture_default_str();
    cmd->add_option("--presence-penalty", s.presence_penalty, "subtracted once from a token in the last n; 0.0 = off")->capture_default_str();
    cmd->add_option("--frequency-penalty", s.frequency_penalty, "subtracted per occurrence in the last n; 0.0 = off")->capture_default_str();
    // As llama-cli: the presence and frequency penalties count the last
    // repeat_last_n tokens of prompt + output, as the repetition penalty does.
    s.penalty_window = PenaltyWindow::LastN;
    // A seed also asks for coupled sampling, as `seed` does on the API: the
    // text is then the same with speculation on or off, at any draft length.
    cmd->add_option("-s,--seed", s.seed, "RNG seed (default: random); a given seed gives the same text with or without speculation")
        ->each([&s](const std::string&) { s.coupled = true; });
}

void add_spec_flags(CLI::App* cmd, SpecOptions& o) {
    cmd->add_option("--model-draft", o.draft_model, "draft model GGUF (also -md)");
    cmd->add_option("--spec", o.kind, "proposer: none, draft, ngram (default: draft with -md, else none)")
        ->check(CLI::IsMember({"none", "draft", "ngram"}));
    cmd->add_option("--draft-max,--draft", o.params.draft_max, "most tokens drafted per step (MAX_DRAFT_TOKENS); 0 = plain")
        ->capture_default_str();
    cmd->add_option("--draft-min", o.params.draft_min, "drafts shorter than this are not verified")->capture_default_str();
    cmd->add_option("--draft-p-min", o.params.draft_p_min, "stop drafting when the draft's top probability is below this")
        ->capture_default_str();
    cmd->add_option("--draft-vocab", o.draft_vocab,
                    "draft head over the N token ids fed most often (learned as it runs; CPU only); 0 = full head")
        ->capture_default_str();
    cmd->add_flag("!--no-adaptive", o.params.adaptive, "always draft --draft-max tokens (no dynamic draft length)");
    cmd->add_option("--ngram-min", o.ngram_min, "shortest n-gram the lookup matches")->capture_default_str();
    cmd->add_option("--ngram-max", o.ngram_max, "longest n-gram the lookup matches")->capture_default_str();
}

void add_device_flag(CLI::App* cmd, std::string& device) {
    cmd->add_option("--device", device, "where the model runs: auto (CUDA GPU 0 when usable, else the CPU), cpu, cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->capture_default_str();
}

gpu::BackendChoice choose_device(const std::string& device) {
    gpu::BackendChoice choice = BackendFactory::choose(device);
    if (!choice.error.empty()) throw Error(choice.error);
    if (!choice.log_line.empty()) std::fprintf(stderr, "%s\n", choice.log_line.c_str());
    return choice;
}

std::unique_ptr<ForwardBackend> make_backend(const gpu::BackendChoice& device, const LlamaModel& model, ThreadPool& pool,
                                             const ForwardOptions& options) {
    // A factory per model: the backend keeps what it needs (the CPU pass
    // references `model` and `pool`, a GPU pass shares the uploaded weights).
    return BackendFactory::make(device, &model, nullptr, &pool, nullptr)->make_target(options);
}

std::string backend_label(const ForwardBackend& backend) {
    if (const auto* cpu = dynamic_cast<const ForwardPass*>(&backend)) return isa_name(cpu->isa());
    return backend.name();
}

SpecSetup make_spec_setup(const SpecOptions& o, const LlamaModel& target, ThreadPool& pool, int32_t n_ctx,
                          const gpu::BackendChoice* device) {
    o.params.validate();
    SpecSetup s;
    s.kind = o.kind.empty() ? (o.draft_model.empty() ? "none" : "draft") : o.kind;
    if (o.params.draft_max == 0) s.kind = "none";
    if (s.kind == "draft") {
        if (o.draft_model.empty()) throw Error("--spec draft needs a draft model (-md FILE)");
        s.draft_model = LlamaModel::load(o.draft_model);
        if (s.draft_model->weight_bytes() > target.weight_bytes()) {
            std::fprintf(stderr, "specd: warning: the draft model (%zu bytes of weights) is larger than the target (%zu); "
                                 "speculation will likely be slower than plain decoding\n",
                         s.draft_model->weight_bytes(), target.weight_bytes());
        }
        if (device) {
            ForwardOptions draft_options;
            draft_options.draft_head_tokens = o.draft_vocab;  // the CPU pass's; a GPU one ignores it
            s.proposer = std::make_unique<DraftModelProposer>(target, make_backend(*device, *s.draft_model, pool, draft_options), n_ctx);
        } else {
            s.proposer = std::make_unique<DraftModelProposer>(target, *s.draft_model, pool, n_ctx, o.draft_vocab);
        }
    } else if (s.kind == "ngram") {
        s.proposer = std::make_unique<NgramProposer>(o.ngram_min, o.ngram_max);
    }
    return s;
}

void rewrite_llama_style_flags(int& argc, char**& argv) {
    static std::vector<char*> rewritten;
    static char model_draft[] = "--model-draft";
    static char parallel[] = "--parallel";
    rewritten.assign(argv, argv + argc);
    for (char*& a : rewritten) {
        if (std::strcmp(a, "-md") == 0) a = model_draft;
        else if (std::strcmp(a, "-np") == 0) a = parallel;
    }
    rewritten.push_back(nullptr);
    argv = rewritten.data();
}

}  // namespace specd::cli
