// The grammar of a reply that must call a tool (OpenAI's tool_choice
// "required" or a named function, issue 35 item 6): Qwen2.5's / Hermes'
// <tool_call> blocks (engine/chat_template.h, ToolFormat::QwenHermes), each
// naming one of the offered functions, its arguments a value of that
// function's parameters schema (engine/json_schema_grammar.h). Passed as the
// request's grammar, it is enforced like any other (engine/grammar_decode.h):
// the same masks with speculation on and off.
#pragma once

#include <span>
#include <string>

#include "engine/chat_template.h"

namespace specd {

struct ToolSchema {
    std::string name;             // the function's name: letters, digits, '_' and '-' (OpenAI's rule), 1 to 64 of them
    std::string parameters_json;  // its parameters' JSON schema as text, an object schema
};

// GBNF text (root "root") matching up to two whitespace characters, then,
// for `format` QwenHermes, one block, or with `parallel` one or more
// separated by "\n", each exactly
//   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
// as the template's system prompt shows it; for Llama3Json the one call
// its template allows per turn (`parallel` has no second form there)
//   {"name": "NAME", "parameters": ARGS}
// NAME one of `tools`' names and ARGS a value of its schema (bounded
// whitespace inside, as the schema grammars allow). Throws specd::Error for
// no tools, a name outside the rule above, a schema json_schema_to_grammar
// refuses (its message, naming the function), or format None.
std::string tool_call_grammar(std::span<const ToolSchema> tools, bool parallel,
                              ChatTemplate::ToolFormat format = ChatTemplate::ToolFormat::QwenHermes);

}  // namespace specd
