#include "config/runtime_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/error.h"

namespace specd {

namespace {
void check(bool ok, const std::string& what) {
    if (!ok) throw Error("config: " + what);
}
}  // namespace

void RuntimeConfig::validate() const {
    check(!target_model.empty(), "model (the target GGUF path) is required");
    check(draft_max >= 0 && draft_max <= 64, "MAX_DRAFT_TOKENS must be in 0..64, got " + std::to_string(draft_max));
    check(n_ctx >= 0, "ctx_size must be >= 0, got " + std::to_string(n_ctx));
    check(max_sequences >= 1 && max_sequences <= 1024, "max_sequences must be in 1..1024, got " + std::to_string(max_sequences));
    check(kv_cache_ratio > 0.0 && kv_cache_ratio <= 1.0, "KV_CACHE_RATIO must be in (0, 1], got " + std::to_string(kv_cache_ratio));
    check(memory_budget_bytes >= 0, "memory_budget_bytes must be >= 0");
    check(max_waiting >= 0, "max_waiting must be >= 0, got " + std::to_string(max_waiting));
    check(threads_target >= 0 && threads_target <= 256, "threads must be in 0..256, got " + std::to_string(threads_target));
    check(threads_draft >= 0 && threads_draft <= 256, "threads_draft must be in 0..256, got " + std::to_string(threads_draft));
    check(prefill_chunk >= 1, "prefill_chunk must be >= 1, got " + std::to_string(prefill_chunk));
    check(max_step_tokens >= 16 && max_step_tokens <= 4096, "batch_size must be in 16..4096, got " + std::to_string(max_step_tokens));
    check(verify_token_budget >= 0, "spec_token_budget must be >= 0, got " + std::to_string(verify_token_budget));
    check(ngram_min >= 1 && ngram_max >= ngram_min, "ngram_min must be >= 1 and <= ngram_max");
}

std::string RuntimeConfig::effective_model_name() const {
    if (!model_name.empty()) return model_name;
    return std::filesystem::path(target_model).stem().string();
}

void load_config_json(const std::string& text, RuntimeConfig& c) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("config: malformed JSON: ") + e.what());
    }
    check(j.is_object(), "the configuration must be a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& key = it.key();
        const nlohmann::json& v = it.value();
        auto want = [&](bool ok, const char* type) { check(ok, "key \"" + key + "\" must be " + type); };
        auto get_int = [&](int32_t& dst) {
            want(v.is_number_integer(), "an integer");
            dst = v.get<int32_t>();
        };
        if (key == "model") { want(v.is_string(), "a string"); c.target_model = v.get<std::string>(); }
        else if (key == "model_draft") { want(v.is_string(), "a string"); c.draft_model = v.get<std::string>(); }
        else if (key == "model_name") { want(v.is_string(), "a string"); c.model_name = v.get<std::string>(); }
        else if (key == "ENABLE_SPECULATIVE_DECODING" || key == "speculative") { want(v.is_boolean(), "true or false"); c.enable_speculative = v.get<bool>(); }
        else if (key == "MAX_DRAFT_TOKENS" || key == "draft_max") get_int(c.draft_max);
        else if (key == "adaptive") { want(v.is_boolean(), "true or false"); c.adaptive = v.get<bool>(); }
        else if (key == "ctx_size") get_int(c.n_ctx);
        else if (key == "max_sequences") get_int(c.max_sequences);
        else if (key == "KV_CACHE_RATIO" || key == "kv_cache_ratio") { want(v.is_number(), "a number"); c.kv_cache_ratio = v.get<double>(); }
        else if (key == "memory_budget_bytes") { want(v.is_number_integer(), "an integer"); c.memory_budget_bytes = v.get<int64_t>(); }
        else if (key == "max_waiting") get_int(c.max_waiting);
        else if (key == "threads") get_int(c.threads_target);
        else if (key == "threads_draft") get_int(c.threads_draft);
        else if (key == "prefill_chunk") get_int(c.prefill_chunk);
        else if (key == "batch_size") get_int(c.max_step_tokens);
        else if (key == "spec_token_budget") get_int(c.verify_token_budget);
        else if (key == "ngram_min") get_int(c.ngram_min);
        else if (key == "ngram_max") get_int(c.ngram_max);
        else throw Error("config: unknown key \"" + key + "\"");
    }
}

void load_config_file(const std::string& path, RuntimeConfig& c) {
    std::ifstream in(path);
    if (!in) throw Error("config: cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
        load_config_json(ss.str(), c);
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
}

void apply_environment(RuntimeConfig& c) {
    if (const char* v = std::getenv("MAX_DRAFT_TOKENS"); v && *v) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        check(end && *end == 0, std::string("MAX_DRAFT_TOKENS must be an integer, got \"") + v + "\"");
        c.draft_max = static_cast<int32_t>(n);
    }
    if (const char* v = std::getenv("KV_CACHE_RATIO"); v && *v) {
        char* end = nullptr;
        const double r = std::strtod(v, &end);
        check(end && *end == 0, std::string("KV_CACHE_RATIO must be a number, got \"") + v + "\"");
        c.kv_cache_ratio = r;
    }
    if (const char* v = std::getenv("ENABLE_SPECULATIVE_DECODING"); v && *v) {
        const std::string s = v;
        if (s == "true" || s == "1") c.enable_speculative = true;
        else if (s == "false" || s == "0") c.enable_speculative = false;
        else throw Error("config: ENABLE_SPECULATIVE_DECODING must be true or false, got \"" + s + "\"");
    }
    if (const char* v = std::getenv("SPECD_MODEL"); v && *v) c.target_model = v;
    if (const char* v = std::getenv("SPECD_MODEL_DRAFT"); v && *v) c.draft_model = v;
}

}  // namespace specd
