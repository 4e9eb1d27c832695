// llama-server's own generation endpoint, POST /completion (llama.cpp
// tools/server/README.md), on the runtime the OpenAI endpoints use: the
// request's llama-server fields are checked and mapped onto the one request
// parser (parse_generation), and the answer takes llama-server's shapes.
//
// Request, beyond what /v1/completions reads (same names, same checks):
//   n_predict       -1 or absent: until EOS or the context ends (bounded by
//                   max_tokens_limit); else 1..max_tokens_limit
//   ignore_eos      true: the end-of-generation tokens are never sampled
//                   (llama-server's logit bias -inf), the text goes on
//   return_tokens   true: the token ids in "tokens" (streamed chunks always carry them)
//   cache_prompt, id_slot -1, n_keep, n_cache_reuse 0, min_keep 0, and the
//   parameters of samplers that are off (dry_*, xtc_threshold, mirostat_tau/eta,
//   dynatemp_exponent): accepted; none changes the text specd generates
//   samplers        names from llama.cpp's chain ("penalties", "dry", "top_k",
//                   "typ_p", "top_p", "min_p", "xtc", "temperature"), in its
//                   default order; a sampler left out is off
// Refused with a 400 naming the field (specd would not honour them):
// dynatemp_range, typical_p, dry_multiplier, xtc_probability, mirostat,
// n_indent, t_max_predict_ms other than their "off" values; n_probs > 0,
// post_sampling_probs, n_cmpl > 1, lora, response_fields, a specific
// id_slot, a prompt mixing strings and token ids or holding several prompts.
//
// Response: {"index", "content", "tokens", "id_slot", "stop", "model",
// "tokens_predicted", "tokens_evaluated", "generation_settings", "prompt",
// "has_new_line", "truncated", "stop_type" (eos | limit | word | none),
// "stopping_word", "tokens_cached", "timings"} plus specd's "speculative".
// Streamed: one "data: {content, tokens, stop: false, ...}" event per token
// event, then that whole object with "content": "" and "stop": true; no
// [DONE] (llama-server sends none on this endpoint).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/messages.h"
#include "net/api.h"

namespace specd::net {

// What the answer needs besides the generation's output.
struct LlamaCompletionShape {
    std::string prompt;          // the prompt text as given ("" for token ids)
    bool return_tokens = false;  // non-streamed: the ids in "tokens"
    nlohmann::json generation_settings;
};

// Checks the llama-server fields of `body` and parses it; throws ApiError.
// `raw_body`: the body's text, so a json_schema keeps its properties' order
// (as parse_generation).
ParsedRequest parse_llama_completion(const nlohmann::json& body, const RequestLimits& limits, LlamaCompletionShape& shape,
                                     std::string_view raw_body = {});

// The whole (non-streamed) answer, and the last event of a streamed one
// (with "content" "" and the ids not repeated).
nlohmann::json llama_completion_response(const LlamaCompletionShape& shape, const std::string& model, const std::string& text,
                                         const std::vector<int32_t>& tokens, const done_event& d);

// One streamed token event's JSON: {"index", "content", "tokens", "stop": false,
// "id_slot", "tokens_predicted"} (the prompt's count comes with the last event).
std::string llama_completion_chunk(const std::string& text, const std::vector<int32_t>& tokens, int32_t tokens_predicted);

}  // namespace specd::net
