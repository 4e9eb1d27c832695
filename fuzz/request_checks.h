// What the network fuzz targets (fuzz_request, fuzz_ws_message) need to
// drive parse_generation as the server does: a chat renderer over
// engine/chat_template.h, fixed limits, and the invariants every accepted
// request must hold (each field within the range the API documents).
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "actors/constraints.h"
#include "engine/chat_template.h"
#include "fuzz/reply_checks.h"
#include "net/api.h"

namespace specd::fuzz {

// The server's limits (RequestLimits defaults: max_tokens_limit 4096,
// default_max_tokens 128, max_draft_tokens 32) for stories15M's vocabulary.
inline const net::RequestLimits& fuzz_limits() {
    static const net::RequestLimits limits = [] {
        net::RequestLimits l;
        l.n_vocab = 32000;
        return l;
    }();
    return limits;
}

// As net/routes.cpp's render_chat_messages: ctx is a ChatTemplate; tools
// and tool turns through its tool format, a 400 naming them without one.
inline std::string render_with_template(const void* ctx, const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools_json,
                                        ChatTemplate::ToolFormat& tool_format) {
    const ChatTemplate& t = *static_cast<const ChatTemplate*>(ctx);
    tool_format = t.tool_format();
    bool tool_turns = false;
    for (const ChatMessage& m : messages) tool_turns = tool_turns || m.role == "tool" || !m.tool_calls.empty();
    if (tools_json.empty() && !tool_turns) return t.render(messages, true);
    if (t.tool_format() == ChatTemplate::ToolFormat::None)
        throw net::ApiError{400, "invalid_request", "no tool format", tools_json.empty() ? "messages" : "tools"};
    return t.render_with_tools(messages, tools_json, true);
}

// The formats a served model may have: plain (stories15M, base models),
// ChatML (the common instruct format, special tokens written as text) and
// Qwen2.5's, with its <tool_call> tool format, and Llama 3.1's, with its
// JSON calls (each recognised by these markers).
inline const std::vector<ChatTemplate>& fuzz_templates() {
    static const std::vector<ChatTemplate> templates = {
        ChatTemplate::plain(), ChatTemplate::by_name("chatml"),
        ChatTemplate::from_gguf_template("<|im_start|> <tools> <tool_call> You are Qwen, created by Alibaba Cloud."),
        ChatTemplate::from_gguf_template("<|start_header_id|> <|end_header_id|> Environment: ipython tools_in_user_message \"parameters\": ")};
    return templates;
}

// Float fields are compared with float bounds: 0.01 accepted becomes 0.01f,
// which is below the double 0.01.
template <typename T>
void check_in(const char* target, const char* what, T x, T lo, T hi) {
    if (!(x >= lo && x <= hi)) fail(target, std::string(what) + " = " + std::to_string(x) + " accepted outside [" +
                                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// An accepted request: a prompt to run and every parameter in range.
inline void check_parsed(const char* target, const net::ParsedRequest& p, net::ApiKind kind) {
    const net::RequestLimits& limits = fuzz_limits();
    const generate_request& r = p.request;
    if (r.prompt.empty() && r.prompt_tokens.empty()) fail(target, "accepted a request without a prompt");
    if (kind == net::ApiKind::Completion && p.chat) fail(target, "a completion request came back as chat");
    if (kind == net::ApiKind::Chat && (!p.chat || p.messages.empty() || r.prompt.empty()))
        fail(target, "a chat request came back without messages or a rendered prompt");
    if (p.chat && !r.parse_special) fail(target, "a chat prompt must be tokenized with its special tokens");
    for (const ChatMessage& m : p.messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") fail(target, "accepted the role \"" + m.role + "\"");
        if (!m.tool_calls.empty() && m.role != "assistant") fail(target, "accepted tool_calls on a " + m.role + " message");
    }
    if (p.tool_calls && kind != net::ApiKind::Chat) fail(target, "tool calls accepted outside chat completions");
    for (const int32_t t : r.prompt_tokens) {
        if (t < 0) fail(target, "accepted a negative prompt token id");
    }
    check_in<int32_t>(target, "max_tokens", r.max_tokens, 1, limits.max_tokens_limit);
    check_in<float>(target, "temperature", r.sampling.temperature, 0.0f, 2.0f);
    check_in<float>(target, "top_p", r.sampling.top_p, 0.0f, 1.0f);
    check_in<float>(target, "min_p", r.sampling.min_p, 0.0f, 1.0f);
    check_in<int32_t>(target, "top_k", r.sampling.top_k, 0, 1 << 20);
    check_in<float>(target, "repeat_penalty", r.sampling.repeat_penalty, 0.01f, 10.0f);
    check_in<int32_t>(target, "repeat_last_n", r.sampling.repeat_last_n, -1, 1 << 20);
    check_in<float>(target, "presence_penalty", r.sampling.presence_penalty, -2.0f, 2.0f);
    check_in<float>(target, "frequency_penalty", r.sampling.frequency_penalty, -2.0f, 2.0f);
    if (r.sampling.logit_bias.size() > kMaxLogitBias) fail(target, "accepted more than kMaxLogitBias logit_bias entries");
    for (const LogitBias& b : r.sampling.logit_bias) {
        if (b.token < 0 || (limits.n_vocab > 0 && b.token >= limits.n_vocab)) fail(target, "accepted a logit_bias id outside the vocabulary");
        if (b.bias != -INFINITY) check_in<float>(target, "logit_bias", b.bias, -100.0f, 100.0f);
    }
    if (!r.sampling.grammar.empty()) {
        // response_format, grammar and json_schema are checked where parsed: the session must not refuse them later.
        try {
            Grammar::parse(r.sampling.grammar);
        } catch (const std::exception& e) {
            fail(target, std::string("accepted a grammar that does not parse: ") + e.what());
        }
    }
    try {
        r.sampling.validate();
    } catch (const std::exception& e) {
        fail(target, std::string("accepted sampling parameters the engine refuses: ") + e.what());
    }
    if (r.speculative < -1 || r.speculative > 1) fail(target, "speculative is not -1, 0 or 1");
    if (r.adaptive < -1 || r.adaptive > 1) fail(target, "adaptive is not -1, 0 or 1");
    if (r.draft_max != -1) check_in<int32_t>(target, "speculative.draft_max", r.draft_max, 1, limits.max_draft_tokens);
}

}  // namespace specd::fuzz
