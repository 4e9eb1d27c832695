// OpenAI's `logprobs` objects from the per-token figures a token_event
// carries (engine/token_logprobs.h says which distribution they are read
// from: the target's after logit_bias, the penalties and the temperature,
// before top_k/top_p/min_p, over the whole vocabulary):
//
//   chat         {"content": [{"token", "logprob", "bytes": [..],
//                              "top_logprobs": [{"token", "logprob", "bytes"}]}]}
//   completions  {"tokens": [..], "token_logprobs": [..],
//                 "top_logprobs": [{token: logprob}], "text_offset": [..]}
//
// "token" is the token's own text (its bytes, invalid UTF-8 as U+FFFD, as
// OpenAI does for a token holding part of a character); "bytes" its exact
// bytes. Streamed, each chunk carries the entries of its own tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/messages.h"

namespace specd::net {

// A token's bytes (Tokenizer::token_to_piece with special tokens rendered).
using TokenPiece = std::function<std::string(int32_t token)>;

// Chat's {"content": [...]} for the tokens of `e` (e.logprobs must hold one entry per token).
nlohmann::json chat_logprobs_json(const token_event& e, const TokenPiece& piece);
// Completions' object for the tokens of `e`; `text_base`: the bytes of
// completion text before them (text_offset counts from the completion's start).
nlohmann::json completion_logprobs_json(const token_event& e, const TokenPiece& piece, size_t text_base);

// Appends `e` to `into` (the same generation): tokens, origins, text (with
// its ends shifted) and the log-probabilities.
void append_token_event(token_event& into, const token_event& e);

}  // namespace specd::net
