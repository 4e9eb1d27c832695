// OpenAI's tool calling on /v1/chat/completions (issue 35, item 6), the
// request half: `tools`, `tool_choice` and `parallel_tool_calls` checked
// and turned into what the chat template renders (each tool as its JSON
// text) and what constrains the reply (a grammar for "required" or a named
// function: engine/tool_call_grammar.h). The reply half, the calls parsed
// out of the text, is net/tool_calls.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tool_call_grammar.h"
#include "net/api.h"

namespace specd::net {

struct ToolRequest {
    enum class Choice { None, Auto, Required };
    std::vector<std::string> tools_json;  // each tool as the templates' tojson writes it: the client's key order, ", " and ": "
    Choice choice = Choice::Auto;         // "none", "auto" (the default), "required" or a named function (Required, `named` set)
    std::string named;                    // the function tool_choice names ("" otherwise)
    bool parallel = true;                 // parallel_tool_calls: false allows at most one call
    std::vector<ToolSchema> callable;     // Required: the functions the reply may call (all, or the named one)
    bool calls_possible() const { return !tools_json.empty() && choice != Choice::None; }
};

// Reads the tool parameters of a request of `kind` (the grammar of a
// forced call waits for the template's format: tool_grammar); throws ApiError (400)
// naming the parameter. `raw_body`: the body's text, read again so tools and
// their schemas keep the client's key order (nlohmann::json sorts them);
// empty: sorted. Tools belong to chat completions: on /v1/completions and
// the WebSocket they are refused; "none" and "auto" without tools are
// accepted everywhere (they mean plain text).
ToolRequest parse_tool_request(const nlohmann::json& body, ApiKind kind, std::string_view raw_body);

// The GBNF a Required request's reply must match in the template's tool
// `format` (engine/tool_call_grammar.h); "" for other choices. ApiError
// naming tools when a schema cannot be enforced.
std::string tool_grammar(const ToolRequest& tools, ChatTemplate::ToolFormat format);

// `value` as Python's json.dumps writes it (", " and ": ", non-ASCII kept),
// which is how the chat templates' tojson writes tools and call arguments.
std::string template_json(const nlohmann::ordered_json& value);

}  // namespace specd::net
