// llama-server's POST /completion; see llama_completion.h.
#include "net/llama_completion.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "config/json_text.h"

namespace specd::net {

using nlohmann::json;

namespace {

[[noreturn]] void refuse_param(const std::string& param, const std::string& message) { throw ApiError{400, "invalid_request", message, param}; }

const json* present(const json& body, const char* key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A field specd does not implement: accepted only at the value that means
// "off" (is_off), else refused naming it.
template <class IsOff>
void refuse_unless_off(const json& body, const char* key, IsOff is_off, const char* what) {
    const json* v = present(body, key);
    if (v && !is_off(*v)) refuse_param(key, std::string(key) + ": " + what + " is not supported (leave it at its default)");
}

bool equals_number(const json& v, double want) { return v.is_number() && v.get<double>() == want; }

// llama.cpp's sampler chain in its default order (common/sampling.cpp), the
// names /completion's "samplers" may use. specd applies its samplers in this
// order; "typ_p", "dry" and "xtc" are inert at their default parameters.
constexpr std::array<std::string_view, 8> kSamplerOrder = {"penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"};

// "samplers": a list in the default order; those left out are switched off
// in `body` (top_k 0, top_p 1, min_p 0, penalties neutral).
void apply_samplers(const json& list, json& body) {
    if (!list.is_array()) refuse_param("samplers", "samplers must be an array of sampler names");
    size_t next = 0;  // every name must come after the previous one in kSamplerOrder
    std::vector<std::string_view> named;
    for (const json& s : list) {
        if (!s.is_string()) refuse_param("samplers", "samplers must be an array of sampler names");
        std::string name = s.get<std::string>();
        if (name == "temp") name = "temperature";
        if (name == "typical_p") name = "typ_p";
        const auto it = std::find(kSamplerOrder.begin(), kSamplerOrder.end(), name);
        if (it == kSamplerOrder.end()) {
            refuse_param("samplers", "unknown or unsupported sampler \"" + utf8_excerpt(name, 40) +
                                   "\" (specd has penalties, dry, top_k, typ_p, top_p, min_p, xtc, temperature)");
        }
        const size_t at = static_cast<size_t>(it - kSamplerOrder.begin());
        if (at < next) {
            refuse_param("samplers", "samplers must keep llama.cpp's default order (penalties, dry, top_k, typ_p, top_p, min_p, xtc, "
                               "temperature): \"" + name + "\" comes too late");
        }
        next = at + 1;
        named.push_back(*it);
    }
    const auto has = [&](std::string_view n) { return std::find(named.begin(), named.end(), n) != named.end(); };
    if (!has("top_k")) body["top_k"] = 0;
    if (!has("top_p")) body["top_p"] = 1.0;
    if (!has("min_p")) body["min_p"] = 0.0;
    if (!has("penalties")) {
        body["repeat_penalty"] = 1.0;
        body["presence_penalty"] = 0.0;
        body["frequency_penalty"] = 0.0;
    }
    if (!has("temperature")) body["temperature"] = 1.0;  // llama.cpp without a temperature sampler: the raw distribution
}

// llama-server's stop_type.
const char* llama_stop_type(const done_event& d) {
    if (d.finish_reason == "stop") return d.stop_word.empty() ? "eos" : "word";
    if (d.finish_reason == "length" || d.finish_reason == "context") return "limit";
    return "none";
}

}  // namespace

ParsedRequest parse_llama_completion(const json& body_in, const RequestLimits& limits, LlamaCompletionShape& shape,
                                     std::string_view raw_body) {
    if (!body_in.is_object()) throw ApiError{400, "invalid_request", "the request body must be a JSON object", ""};
    json body = body_in;
    // The prompt: a string or one sequence of token ids (one prompt per request).
    if (const json* p = present(body, "prompt")) {
        if (p->is_string()) {
            shape.prompt = p->get<std::string>();
        } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
            refuse_param("prompt", "one prompt per request: send several prompts as several requests");
        } else if (p->is_array() && p->size() > 1 && std::any_of(p->begin(), p->end(), [](const json& e) { return e.is_string(); })) {
            refuse_param("prompt", "a prompt mixing text and token ids is not supported: give a string or an array of token ids");
        } else if (p->is_object()) {
            refuse_param("prompt", "multimodal prompts are not supported (this model reads text)");
        } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
            shape.prompt = (*p)[0].get<std::string>();
        }
    }
    // llama.cpp's "off" spellings: seed -1 (a random seed), a temperature
    // <= 0 (greedy), top_k <= 0 (the whole vocabulary).
    if (const json* v = present(body, "seed"); v && v->is_number_integer() && v->get<int64_t>() == -1) body.erase("seed");
    if (const json* v = present(body, "temperature"); v && v->is_number() && v->get<double>() < 0) body["temperature"] = 0.0;
    if (const json* v = present(body, "top_k"); v && v->is_number_integer() && v->get<int64_t>() < 0) body["top_k"] = 0;
    // n_predict -1 (the default): until EOS or the context ends.
    if (const json* n = present(body, "n_predict")) {
        if (n->is_number_integer() && n->get<int64_t>() == -1) body.erase("n_predict");
        else if (n->is_number_integer() && n->get<int64_t>() == 0)
            refuse_param("n_predict", "n_predict 0 (evaluate the prompt only) is not supported: ask for at least 1 token, or -1");
    }
    if (!present(body, "n_predict") && !present(body, "max_tokens")) body["max_tokens"] = limits.max_tokens_limit;

    refuse_unless_off(body, "dynatemp_range", [](const json& v) { return equals_number(v, 0.0); }, "dynamic temperature");
    refuse_unless_off(body, "typical_p", [](const json& v) { return equals_number(v, 1.0); }, "locally typical sampling");
    refuse_unless_off(body, "dry_multiplier", [](const json& v) { return equals_number(v, 0.0); }, "DRY sampling");
    refuse_unless_off(body, "xtc_probability", [](const json& v) { return equals_number(v, 0.0); }, "XTC sampling");
    refuse_unless_off(body, "mirostat", [](const json& v) { return equals_number(v, 0.0); }, "Mirostat sampling");
    refuse_unless_off(body, "n_indent", [](const json& v) { return equals_number(v, 0.0); }, "minimum indentation");
    refuse_unless_off(body, "t_max_predict_ms", [](const json& v) { return equals_number(v, 0.0); }, "a generation time limit");
    refuse_unless_off(body, "n_probs", [](const json& v) { return equals_number(v, 0.0); }, "token probabilities");
    refuse_unless_off(body, "post_sampling_probs", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, "token probabilities");
    refuse_unless_off(body, "n_cmpl", [](const json& v) { return equals_number(v, 1.0); }, "more than one completion per request");
    refuse_unless_off(body, "lora", [](const json& v) { return v.is_array() && v.empty(); }, "LoRA adapters");
    refuse_unless_off(body, "response_fields", [](const json& v) { return v.is_array() && v.empty(); }, "selecting response fields");
    refuse_unless_off(body, "return_progress", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, "prompt progress events");
    refuse_unless_off(body, "timings_per_token", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }, "per-token timings");
    refuse_unless_off(body, "id_slot", [](const json& v) { return equals_number(v, -1.0); },
             "a fixed slot (specd schedules every request itself; use -1)");
    refuse_unless_off(body, "n_cache_reuse", [](const json& v) { return equals_number(v, 0.0); }, "KV shifting");
    refuse_unless_off(body, "min_keep", [](const json& v) { return equals_number(v, 0.0); }, "min_keep");
    if (const json* v = present(body, "samplers")) apply_samplers(*v, body);
    // The OpenAI names for what llama-server spells its own way are not
    // this endpoint's: refuse them rather than read them silently.
    for (const char* key : {"max_tokens", "max_completion_tokens", "logprobs", "n", "messages"}) {
        if (present(body_in, key)) refuse_param(key, std::string(key) + " belongs to /v1/completions; /completion takes llama-server's fields");
    }
    bool ignore_eos = false;
    if (const json* v = present(body, "ignore_eos")) {
        if (!v->is_boolean()) refuse_param("ignore_eos", "ignore_eos must be true or false");
        ignore_eos = v->get<bool>();
    }
    if (const json* v = present(body, "return_tokens")) {
        if (!v->is_boolean()) refuse_param("return_tokens", "return_tokens must be true or false");
        shape.return_tokens = v->get<bool>();
    }

    ParsedRequest parsed = parse_generation(body, ApiKind::Completion, limits, nullptr, nullptr, raw_body);
    generate_request& r = parsed.request;
    r.stop_at_eos = !ignore_eos;
    const SamplingParams& s = r.sampling;
    shape.generation_settings = {{"n_predict", r.max_tokens},
                                 {"seed", s.seed},
                                 {"temperature", s.temperature},
                                 {"top_k", s.top_k},
                                 {"top_p", s.top_p},
                                 {"min_p", s.min_p},
                                 {"repeat_last_n", s.repeat_last_n},
                                 {"repeat_penalty", s.repeat_penalty},
                                 {"presence_penalty", s.presence_penalty},
                                 {"frequency_penalty", s.frequency_penalty},
                                 {"ignore_eos", ignore_eos},
                                 {"stop", r.stop},
                                 {"n_probs", 0},
                                 {"stream", parsed.stream}};
    return parsed;
}

json llama_completion_response(const LlamaCompletionShape& shape, const std::string& model, const std::string& text,
                               const std::vector<int32_t>& tokens, const done_event& d) {
    const double prompt_ms = d.ttft_ms, predicted_ms = std::max(0.0, d.total_ms - d.ttft_ms);
    const auto per = [](double ms, int32_t n) { return n > 0 ? ms / n : 0.0; };
    const auto rate = [](double ms, int32_t n) { return ms > 0 ? 1000.0 * n / ms : 0.0; };
    // As llama-server's: prompt_n counts the prompt tokens computed,
    // cache_n those taken from the prefix cache.
    const int32_t computed = d.prompt_tokens - d.cached_prompt_tokens;
    const json timings{{"cache_n", d.cached_prompt_tokens},
                       {"prompt_n", computed},
                       {"prompt_ms", prompt_ms},
                       {"prompt_per_token_ms", per(prompt_ms, computed)},
                       {"prompt_per_second", rate(prompt_ms, computed)},
                       {"predicted_n", d.completion_tokens},
                       {"predicted_ms", predicted_ms},
                       {"predicted_per_token_ms", per(predicted_ms, d.completion_tokens)},
                       {"predicted_per_second", rate(predicted_ms, d.completion_tokens)}};
    return {{"index", 0},
            {"content", text},
            {"tokens", tokens},
            {"id_slot", -1},
            {"stop", true},
            {"model", model},
            {"tokens_predicted", d.completion_tokens},
            {"tokens_evaluated", d.prompt_tokens},
            {"generation_settings", shape.generation_settings},
            {"prompt", shape.prompt},
            {"has_new_line", text.find('\n') != std::string::npos},
            {"truncated", d.finish_reason == "context"},
            {"stop_type", llama_stop_type(d)},
            {"stopping_word", d.stop_word},
            {"tokens_cached", d.cached_prompt_tokens},
            {"timings", timings},
            {"speculative", speculative_json(d)}};
}

std::string llama_completion_chunk(const std::string& text, const std::vector<int32_t>& tokens, int32_t tokens_predicted) {
    return dump_json(json{{"index", 0}, {"content", text}, {"tokens", tokens}, {"stop", false}, {"id_slot", -1},
                          {"tokens_predicted", tokens_predicted}});
}

}  // namespace specd::net
