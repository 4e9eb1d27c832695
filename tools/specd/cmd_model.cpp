// specd convert / quantize / info: model files in and out of GGUF.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "config/runtime_config.h"
#include "engine/context_plan.h"
#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/model_convert.h"
#include "engine/model_summary.h"
#include "engine/quant_mix.h"
#include "engine/tensor_type.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

constexpr const char* kQuantizeTypes =
    "f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K (every 2-D tensor), or llama.cpp's mixes Q4_K_M, Q5_K_M, Q6_K";

struct ConvertOptions {
    std::string model_bin;
    std::string tokenizer_bin;
    std::string output;
    std::string name;  // general.name; default: the model.bin file name without extension
};

struct QuantizeOptions {
    std::string input;
    std::string output;
    std::string type;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

void run_convert(const ConvertOptions& o) {
    const auto start = std::chrono::steady_clock::now();
    const std::string name = o.name.empty() ? std::filesystem::path(o.model_bin).stem().string() : o.name;
    convert_llama2c(o.model_bin, o.tokenizer_bin, o.output, name);
    const uint64_t out_bytes = std::filesystem::file_size(o.output);
    std::fprintf(stderr, "specd: converted %s + %s -> %s (f32, %.2f MiB) in %.2f s\n", o.model_bin.c_str(),
                 o.tokenizer_bin.c_str(), o.output.c_str(), mib(out_bytes), seconds_since(start));
}

void run_quantize(const QuantizeOptions& o) {
    if (const std::optional<QuantMix> mix = quant_mix_from_name(o.type); mix) {
        // llama.cpp's tensor mix. A terminal gets a live line (tensor i of
        // n, bytes, rate), a pipe or log only the summary.
        const auto start = std::chrono::steady_clock::now();
        const bool live = isatty(fileno(stderr)) != 0;
        double last_draw = -1.0;
        const QuantizeStats stats = quantize_model_mix(o.input, o.output, *mix, [&](const QuantizeProgress& p) {
            const double t = seconds_since(start);
            if (!live || (t - last_draw < 0.1 && p.tensor != p.n_tensors)) return;
            last_draw = t;
            std::fprintf(stderr, "\rspecd: quantize: tensor %zu of %zu, %.0f of %.0f MiB, %.0f MiB/s   ", p.tensor, p.n_tensors,
                         mib(p.bytes_done), mib(p.bytes_total), t > 0.0 ? mib(p.bytes_done) / t : 0.0);
            if (p.tensor == p.n_tensors) std::fprintf(stderr, "\n");
        });
        std::fprintf(stderr, "specd: quantized %s (%.2f MiB) -> %s (%s, %.2f MiB): %zu of %zu tensors quantised in %.2f s\n",
                     o.input.c_str(), mib(stats.bytes_in), o.output.c_str(), quant_mix_name(*mix), mib(stats.bytes_out),
                     stats.n_converted, stats.n_tensors, seconds_since(start));
        return;
    }
    const std::optional<TensorType> type = tensor_type_from_name(o.type);
    if (!type) throw Error("quantize: unknown type '" + o.type + "' (allowed: " + kQuantizeTypes + ")");
    const auto start = std::chrono::steady_clock::now();
    const QuantizeStats stats = quantize_model(o.input, o.output, *type);
    std::fprintf(stderr, "specd: quantized %s (%.2f MiB) -> %s (%s, %.2f MiB): %zu of %zu tensors as %s in %.2f s\n",
                 o.input.c_str(), mib(stats.bytes_in), o.output.c_str(), tensor_type_name(*type), mib(stats.bytes_out),
                 stats.n_converted, stats.n_tensors, tensor_type_name(*type), seconds_since(start));
}

struct InfoOptions {
    std::string model;
    std::string draft;   // its KV counts toward the default context, as in `serve`
    bool brief = false;  // the summary only, without the metadata and tensor table
};

// The context `serve` would choose with ctx_size 0 on this machine's RAM,
// with the environment's KV_CACHE_RATIO, SPECD_MAX_SESSIONS, SPECD_KV_CACHE_TYPE
// and SPECD_MEMORY_BUDGET (the CPU backend's budget).
ContextPlan default_context(const LlamaModel& model, const LlamaModel* draft) {
    ConfigLoader loader;
    loader.load_environment();
    const RuntimeConfig& rc = loader.config();
    const TensorType kv_type = tensor_type_from_name(rc.kv_cache_type).value_or(TensorType::F16);
    int64_t token_bytes = kv_bytes_per_token(model, kv_type);
    if (draft) token_bytes += kv_bytes_per_token(*draft, kv_type);
    ContextInputs in;
    in.requested = 0;
    in.n_ctx_train = model.hparams().n_ctx_train;
    in.kv_cache_ratio = rc.kv_cache_ratio;
    in.budget_bytes = rc.memory_budget_bytes > 0 ? rc.memory_budget_bytes : available_memory_bytes();
    in.kv_bytes_per_token = token_bytes;
    in.max_sequences = rc.max_sequences;
    in.kv_type = rc.kv_cache_type + (draft ? ", target + draft" : ", this model alone");
    return plan_context(in);
}

// A file that is GGUF but not a model specd runs (an unsupported
// architecture, a missing tensor, ...) still gets its metadata and tensor
// table, then the one-line error and exit 1.
void run_info(const InfoOptions& o) {
    const gguf::File file = gguf::File::open(o.model);
    std::unique_ptr<LlamaModel> model;
    std::string load_error;
    try {
        model = LlamaModel::load(o.model);
    } catch (const Error& e) {
        load_error = e.what();
    }
    if (model) {
        std::unique_ptr<LlamaModel> draft;
        if (!o.draft.empty()) draft = LlamaModel::load(o.draft);
        const std::string text = summarize_model(*model, default_context(*model, draft.get()));
        std::fwrite(text.data(), 1, text.size(), stdout);
    }
    if (!o.brief) {
        const std::string text = describe_model(file);
        std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
    if (!load_error.empty()) throw Error(load_error);
}

}  // namespace

void register_model_commands(CLI::App& app) {
    auto convert = std::make_shared<ConvertOptions>();
    CLI::App* convert_cmd = app.add_subcommand("convert", "Convert a llama2.c model.bin + tokenizer.bin to GGUF (f32)");
    convert_cmd->add_option("--model-bin", convert->model_bin, "llama2.c checkpoint (legacy format)")->required();
    convert_cmd->add_option("--tokenizer-bin", convert->tokenizer_bin, "llama2.c tokenizer.bin")->required();
    convert_cmd->add_option("-o,--output", convert->output, "output GGUF file")->required();
    convert_cmd->add_option("--name", convert->name, "general.name (default: the model.bin file name)");
    convert_cmd->callback([convert] { run_convert(*convert); });

    auto quantize = std::make_shared<QuantizeOptions>();
    CLI::App* quantize_cmd =
        app.add_subcommand("quantize", "Re-encode a GGUF model's 2-D weights as another type, or as llama.cpp's Q4_K_M / Q5_K_M / Q6_K mix (norms stay f32)");
    quantize_cmd->add_option("input", quantize->input, "input GGUF")->required();
    quantize_cmd->add_option("output", quantize->output, "output GGUF")->required();
    quantize_cmd->add_option("type", quantize->type, std::string("target type: ") + kQuantizeTypes)->required();
    quantize_cmd->callback([quantize] { run_quantize(*quantize); });

    auto info = std::make_shared<InfoOptions>();
    CLI::App* info_cmd = app.add_subcommand(
        "info", "Summarise a model (architecture, size, attention, context, RoPE, vocabulary, chat template, tensor types), "
                "then print its GGUF metadata and tensor table");
    info_cmd->add_option("model", info->model, "GGUF file")->required();
    info_cmd->add_option("--model-draft", info->draft, "a draft model (also -md): its KV counts toward the default context, as in serve");
    info_cmd->add_flag("--brief", info->brief, "the summary only, without the metadata and tensor table");
    info_cmd->callback([info] { run_info(*info); });
}

}  // namespace specd::cli
