// What a request's constraint fields (response_format, grammar,
// json_schema) become, for the front end: net/ reaches the engine only
// through actors/, and a request's grammar travels in its SamplingParams
// (actors/messages.h), so the parsers that check it are re-exported here,
// as a request's other limits are with the request.
#pragma once

#include "engine/grammar.h"              // Grammar::parse (GBNF), Grammar::json_object_text()
#include "engine/json_schema_grammar.h"  // json_schema_to_grammar
