// JSON Schema → GBNF (engine/grammar.h), for OpenAI's response_format
// {"type": "json_schema"} and llama-server's `json_schema` (issue 35,
// item 5). What llama.cpp's json-schema-to-grammar covers in the common
// case, written anew:
//
//   type       object, array, string, number, integer, boolean, null, or a list of them
//   object     properties (in the schema's order), required, additionalProperties
//              (false or absent: no other keys; true or a schema: only on an
//              object without properties); no properties at all: any object
//   array      items, minItems, maxItems
//   string     minLength, maxLength
//   enum, const (any JSON values), anyOf, oneOf (as anyOf: a grammar cannot
//   exclude a second match), $ref to #/$defs/… or #/definitions/… (recursive
//   references too), {} or true: any JSON value
//
// Annotations (title, description, $schema, $id, $comment, default,
// examples, strict) are ignored. Any other keyword (pattern, format,
// minimum, allOf, prefixItems, …) is refused with an error naming it and
// where it is, never ignored: a grammar that did not enforce it would let
// the model break the schema. The engine has no JSON library: the schema
// comes as JSON text and is read by a small parser here.
//
// The grammar allows up to two whitespace characters before the value
// (SentencePiece models write "▁{") and bounded whitespace between tokens,
// as Grammar::json_object() does.
#pragma once

#include <string>
#include <string_view>

namespace specd {

// The most bytes of schema JSON accepted, and how deep it may nest.
inline constexpr size_t kMaxJsonSchemaBytes = 64 * 1024;
inline constexpr int kMaxJsonSchemaDepth = 64;

// GBNF text with root rule "root" matching exactly the JSON texts the
// schema allows (within the keywords above). Throws specd::Error with a
// one-line message ("json_schema: at /properties/age: unsupported keyword
// \"minimum\"") for invalid JSON, an invalid schema or one it cannot enforce.
std::string json_schema_to_grammar(std::string_view schema_json);

// The same schema's rules for a larger grammar: rule `prefix` (letters,
// digits, '-') matches a value of the schema (no leading whitespace), its
// helper rules are named "<prefix>-...", and the shared primitives (space,
// string, value, object, ...) keep their names and bodies, so the rules of
// several schemas can be joined (a primitive's line then appears more than
// once, identical). Errors as json_schema_to_grammar; the joined grammar's
// size is the caller's to check (Grammar::parse).
std::string json_schema_rules(std::string_view schema_json, std::string_view prefix);

}  // namespace specd
