// llama-server's endpoints; see llama_server_routes.h.
#include "net/llama_server_routes.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "actors/runtime.h"
#include "config/json_text.h"

namespace specd::net {

using nlohmann::json;
using Method = RouteRequest::Method;

namespace {

RouteResult json_result(int status, const json& body) {
    RouteResult r;
    r.status = status;
    r.body = dump_json(body);
    r.content_type = "application/json";
    return r;
}

// The JSON object body of a POST, or the error result that answers it.
std::optional<RouteResult> object_body(const RouteRequest& req, json& out) {
    try {
        out = parse_json(req.body);
    } catch (const ApiError& e) {
        return error_result(e.status, e.code, e.message, e.param);
    }
    if (!out.is_object()) return error_result(400, "invalid_request", "the request body must be a JSON object");
    return std::nullopt;
}

// body[key] as a boolean, `fallback` when absent or null; sets `error` when
// it is something else.
bool flag(const json& body, const char* key, bool fallback, std::optional<RouteResult>& error) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
        error = error_result(400, "invalid_request", std::string(key) + " must be true or false", key);
        return fallback;
    }
    return it->get<bool>();
}

// A piece as llama-server writes it: the text when it is valid UTF-8, else
// its bytes (a byte-fallback token or half of a multi-byte character).
json piece_json(const std::string& piece) {
    if (is_valid_utf8(piece)) return piece;
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return bytes;
}

RouteResult tokenize(const RouteRequest& req, const RouteContext& ctx) {
    json body;
    if (auto error = object_body(req, body)) return *error;
    const auto content = body.find("content");
    if (content == body.end() || !content->is_string())
        return error_result(400, "invalid_request", "content must be a string (the text to tokenize)", "content");
    std::optional<RouteResult> error;
    const bool add_special = flag(body, "add_special", false, error);
    const bool parse_special = flag(body, "parse_special", true, error);
    const bool with_pieces = flag(body, "with_pieces", false, error);
    if (error) return *error;
    const std::string& text = content->get_ref<const std::string&>();
    if (!is_valid_utf8(text)) return error_result(400, "invalid_request", "content is not valid UTF-8", "content");
    const Tokenizer& tok = ctx.runtime.tokenizer();
    std::vector<int32_t> ids;
    try {
        ids = tok.encode(text, add_special && tok.add_bos(), parse_special);
    } catch (const std::exception& e) {
        return error_result(400, "invalid_request", valid_utf8(e.what()), "content");
    }
    if (add_special && tok.add_eos()) ids.push_back(tok.eos_id());
    json tokens = json::array();
    for (int32_t id : ids) {
        if (with_pieces) tokens.push_back(json{{"id", id}, {"piece", piece_json(tok.token_to_piece(id, true))}});
        else tokens.push_back(id);
    }
    return json_result(200, json{{"tokens", std::move(tokens)}});
}

RouteResult detokenize(const RouteRequest& req, const RouteContext& ctx) {
    json body;
    if (auto error = object_body(req, body)) return *error;
    const auto tokens = body.find("tokens");
    if (tokens == body.end() || !tokens->is_array())
        return error_result(400, "invalid_request", "tokens must be an array of token ids", "tokens");
    const Tokenizer& tok = ctx.runtime.tokenizer();
    std::vector<int32_t> ids;
    ids.reserve(tokens->size());
    for (const json& t : *tokens) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
            return error_result(400, "invalid_request",
                                "tokens holds " + utf8_excerpt(dump_json(t), 40) + ", not a token id of this model (0 to " +
                                    std::to_string(tok.n_vocab() - 1) + ")",
                                "tokens");
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    // Special tokens render as their text, as llama-server's detokenize does.
    std::string text;
    for (int32_t id : ids) text += tok.token_to_piece(id, true);
    return json_result(200, json{{"content", valid_utf8(text)}});
}

RouteResult props(const RouteContext& ctx) {
    const Runtime& rt = ctx.runtime;
    const RuntimeConfig& c = rt.config();
    const SamplingParams defaults;  // what a request that sets nothing samples with
    const SpeculationSettings spec = ctx.runtime.speculation();
    const json params{{"n_predict", ctx.options.limits.default_max_tokens},
                      {"temperature", defaults.temperature},
                      {"top_k", defaults.top_k},
                      {"top_p", defaults.top_p},
                      {"min_p", defaults.min_p},
                      {"repeat_penalty", defaults.repeat_penalty},
                      {"repeat_last_n", defaults.repeat_last_n},
                      {"presence_penalty", defaults.presence_penalty},
                      {"frequency_penalty", defaults.frequency_penalty},
                      {"logit_bias", json::array()},
                      {"grammar", ""},
                      {"seed", -1},
                      {"stop", json::array()},
                      {"speculative.n_max", spec.enabled ? spec.draft_max : 0},
                      {"speculative", spec.enabled}};
    return json_result(200, json{{"default_generation_settings", {{"n_ctx", rt.n_ctx()}, {"params", params}}},
                                 {"total_slots", c.max_sequences},
                                 {"model_path", c.target_model},
                                 {"model_alias", rt.model_name()},
                                 {"chat_template", valid_utf8(rt.chat_template_text())},
                                 {"modalities", {{"vision", false}, {"audio", false}}},
                                 {"build_info", "specd"}});
}

// POST /completion: a generation answered in llama-server's shapes.
RouteResult completion(const RouteRequest& req, const RouteContext& ctx) {
    if (ctx.draining) return error_result(503, "draining", "the server is draining; retry on another instance");
    RouteResult r;
    r.kind = RouteResult::Kind::Generate;
    LlamaCompletionShape shape;
    try {
        r.parsed = parse_llama_completion(parse_json(req.body), ctx.options.limits, shape, req.body);
    } catch (const ApiError& e) {
        return error_result(e.status, e.code, e.message, e.param);
    }
    if (!r.parsed.request.stop_at_eos) {
        // ignore_eos as llama-server does it: the end-of-generation tokens
        // are never sampled (logit bias -inf), so the text goes on.
        const Tokenizer& tok = ctx.runtime.tokenizer();
        for (int32_t id = 0; id < tok.n_vocab(); ++id) {
            if (tok.is_end_of_generation(id)) r.parsed.request.sampling.logit_bias.push_back({id, -std::numeric_limits<float>::infinity()});
        }
    }
    r.llama = std::move(shape);
    return r;
}

}  // namespace

std::optional<RouteResult> llama_server_route(const RouteRequest& req, const RouteContext& ctx, const std::string& p) {
    const bool get = req.method == Method::get || req.method == Method::head, post = req.method == Method::post;
    auto not_allowed = [&] { return error_result(405, "method_not_allowed", std::string(req.method_name) + " is not allowed on " + p); };
    if (p == "/tokenize") return post ? tokenize(req, ctx) : not_allowed();
    if (p == "/detokenize") return post ? detokenize(req, ctx) : not_allowed();
    if (p == "/props") {
        if (get) return props(ctx);
        if (post) return error_result(501, "not_implemented", "POST /props: specd's global settings change through its config file (SIGHUP) and /admin/speculation");
        return not_allowed();
    }
    if (p == "/slots" || p.rfind("/slots/", 0) == 0) {
        return error_result(501, "not_implemented",
                            "/slots: specd schedules every request itself (continuous batching) and has no fixed slots; "
                            "see /metrics for the sessions running");
    }
    if (p == "/completion" || p == "/completions") return post ? completion(req, ctx) : not_allowed();
    return std::nullopt;
}

}  // namespace specd::net
