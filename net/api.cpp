#include "net/api.h"

#include <algorithm>
#include <cmath>

#include "actors/constraints.h"
#include "config/json_text.h"
#include "engine/json_string.h"
#include "net/logprobs_json.h"
#include "net/tool_request.h"

namespace specd::net {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, const char* code = "invalid_request", int status = 400) {
    throw ApiError{status, code, message, param};
}

// A value as echoed in an error: short, valid UTF-8.
std::string shown(const json& v) { return utf8_excerpt(dump_json(v), 40); }

// The parameter's value, or nullptr when it is absent or null: OpenAI reads
// null for an optional parameter as "use the default".
const json* given(const json& body, const char* key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const char* key, double lo, double hi) {
    if (!v.is_number()) bad(key, std::string(key) + " must be a number, got " + shown(v));
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi) || !std::isfinite(x))
        bad(key, std::string(key) + " must be in [" + dump_json(lo) + ", " + dump_json(hi) + "], got " + shown(v));
    return x;
}

int64_t integer(const json& v, const char* key, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) bad(key, std::string(key) + " must be an integer, got " + shown(v));
    const int64_t x = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX)) : v.get<int64_t>();
    if (x < lo || x > hi) bad(key, std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + shown(v));
    return x;
}

// A content as text: a string or an array of text parts (as many SDKs
// send it). `what` names it in errors.
std::string content_text(const json& content, const std::string& what) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array() || content.empty())
        bad("messages", what + " must be a string or a non-empty array of {\"type\": \"text\", \"text\": ...} parts, got " + shown(content));
    std::string text;
    for (const json& part : content) {
        const json* type = part.is_object() ? given(part, "type") : nullptr;
        if (!type || !type->is_string()) bad("messages", "each content part needs a string type, got " + shown(part));
        if (*type != "text")
            bad("messages", "content parts of type \"" + utf8_excerpt(type->get_ref<const std::string&>(), 40) +
                                "\" are not supported (this model reads text parts only)");
        const json* t = given(part, "text");
        if (!t || !t->is_string()) bad("messages", "a text part needs a string text");
        text += t->get_ref<const std::string&>();
    }
    return text;
}

// An assistant turn's tool_calls ([{id, type: "function", function: {name,
// arguments}}], arguments a string of JSON as OpenAI sends it) as the
// template writes them back: arguments re-serialised as its tojson does.
std::vector<ChatToolCall> history_tool_calls(const json& calls) {
    if (!calls.is_array()) bad("messages", "tool_calls must be an array, got " + shown(calls));
    std::vector<ChatToolCall> out;
    for (const json& c : calls) {
        const json* f = c.is_object() ? given(c, "function") : nullptr;
        const json* type = c.is_object() ? given(c, "type") : nullptr;
        if (!f || !f->is_object() || (type && *type != "function"))
            bad("messages", "each tool call needs type \"function\" and a function {\"name\", \"arguments\"}, got " + shown(c));
        const json* name = given(*f, "name");
        if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
            bad("messages", "a tool call's function needs a name");
        const json* args = given(*f, "arguments");
        std::string text = "{}";
        if (args && args->is_string()) {
            text = args->get<std::string>();
        } else if (args && args->is_object()) {
            text = dump_json(*args);  // some clients send the object itself
        } else if (args) {
            bad("messages", "a tool call's arguments must be a string of JSON, got " + shown(*args));
        }
        try {
            parse_json_text(text);  // depth-limited, our error words
        } catch (const JsonTextError& e) {
            bad("messages", "the arguments of tool call \"" + utf8_excerpt(name->get<std::string>(), 64) + "\" are not JSON: " + e.what());
        }
        out.push_back({name->get<std::string>(), template_json(nlohmann::ordered_json::parse(text))});
    }
    return out;
}

// One chat message. "developer" is OpenAI's newer name for "system"; an
// assistant's content may be null (with tool_calls, or empty); "tool"
// carries a tool's result (tool_call_id says to which call; templates such
// as Qwen2.5's place results by order, so it is only checked for type).
ChatMessage chat_message(const json& msg) {
    if (!msg.is_object()) bad("messages", "each message must be an object with a role and a content");
    const json* role_v = given(msg, "role");
    if (!role_v || !role_v->is_string()) bad("messages", "each message needs a string role");
    std::string role = role_v->get<std::string>();
    if (role == "developer") role = "system";
    if (role == "function" || given(msg, "function_call"))
        bad("messages", "the deprecated function role and function_call are not supported; send tools, tool_calls and role \"tool\"");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        bad("messages", "unknown role \"" + utf8_excerpt(role, 40) + "\" (system, developer, user, assistant, tool)");
    ChatMessage out{role, ""};
    if (const json* calls = given(msg, "tool_calls")) {
        if (role != "assistant") bad("messages", "only assistant messages carry tool_calls");
        out.tool_calls = history_tool_calls(*calls);
    }
    if (role == "tool") {
        if (const json* id = given(msg, "tool_call_id"); id && !id->is_string()) bad("messages", "tool_call_id must be a string");
    }
    const json* content = given(msg, "content");
    if (!content) {
        if (role == "assistant") return out;
        bad("messages", "a " + role + " message needs a content");
    }
    out.content = content_text(*content, "content");
    return out;
}

// Parameters OpenAI or llama-server clients send that specd does not
// implement yet: refused with a 400 naming them rather than ignored (a
// client that asked for JSON must not get prose). Each key with the values
// that mean "off", which are accepted.
void refuse_unsupported(const json& body) {
    const auto off = [&](const char* key, auto is_off) {
        const json* v = given(body, key);
        if (v && !is_off(*v)) bad(key, std::string(key) + " is not supported yet");
    };
    const auto zero = [](const json& v) { return v.is_number() && v.get<double>() == 0.0; };
    const auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
    const auto empty = [](const json& v) { return (v.is_array() || v.is_object() || v.is_string()) && v.empty(); };
    off("echo", is_false);
    off("suffix", empty);
    // best_of = n returns every choice; ranking more than n by likelihood is not implemented.
    if (const json* v = given(body, "best_of")) {
        const json* n = given(body, "n");
        const int64_t n_choices = n && n->is_number_integer() ? n->get<int64_t>() : 1;
        if (!(v->is_number_integer() && v->get<int64_t>() == n_choices))
            bad("best_of", "best_of other than n (" + std::to_string(n_choices) +
                               ") is not supported: ranking more candidates than are returned is not implemented");
    }
    // The deprecated spellings of tools and tool_choice (net/tool_request.h
    // reads the current ones).
    const auto deprecated = [&](const char* key, auto is_off) {
        const json* v = given(body, key);
        if (v && !is_off(*v)) bad(key, std::string(key) + " is deprecated and not supported: send tools and tool_choice");
    };
    deprecated("functions", empty);
    deprecated("function_call", [](const json& v) { return v == "none" || v == "auto"; });
    off("n_probs", zero);
    off("audio", empty);
    off("modalities", [](const json& v) { return v == json::array({"text"}); });
}

// A JSON schema's grammar (engine/json_schema_grammar.h), or a 400 naming
// `field` with the converter's one-line message.
// `where` names the schema inside the body ("response_format.json_schema.schema");
// `path` is where it lies in `raw`, the body's text: re-read from there,
// its objects keep their keys' order (nlohmann::json sorts them, and a
// schema's properties are written in the order it gives). Without `raw`,
// the sorted order.
std::string schema_grammar(const json& schema, const char* field, const std::string& where, std::string_view raw,
                           std::initializer_list<const char*> path) {
    if (!schema.is_object() && !schema.is_boolean()) bad(field, where + " must be a JSON schema object, got " + shown(schema));
    std::string text;
    if (!raw.empty()) {
        // The body parsed already (depth-limited), so this parse succeeds.
        const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw);
        const nlohmann::ordered_json* at = &ordered;
        for (const char* key : path) at = &at->at(key);
        text = at->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else {
        text = dump_json(schema);
    }
    try {
        return json_schema_to_grammar(text);
    } catch (const Error& e) {
        std::string why = e.what();
        if (why.rfind("json_schema: ", 0) == 0) why = why.substr(13);
        bad(field, where + ": " + valid_utf8(why));
    }
}

// The grammar a request constrains its output with (GBNF text; empty:
// none), from OpenAI's response_format ({"type": "json_object"}, or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}) or
// llama-server's `grammar` (GBNF) and `json_schema` (a schema) fields; its
// response_format {"type": "json_object", "schema": {...}} too. At most one
// of them. Each checked here, so a bad one is a 400 naming its field.
std::string constraint_grammar(const json& body, std::string_view raw) {
    std::string gbnf;
    const char* from = nullptr;
    const auto take = [&](const char* field, std::string g) {
        if (from) bad(field, std::string("give one of response_format, grammar and json_schema, not ") + from + " and " + field);
        from = field;
        gbnf = std::move(g);
    };
    if (const json* rf = given(body, "response_format")) {
        if (!rf->is_object()) bad("response_format", "response_format must be an object such as {\"type\": \"json_object\"}, got " + shown(*rf));
        const json* type = given(*rf, "type");
        if (!type || !type->is_string()) bad("response_format", "response_format needs a string type (text, json_object, json_schema)");
        const std::string& t = type->get_ref<const std::string&>();
        if (t == "json_object") {
            const json* schema = given(*rf, "schema");  // llama-server's form
            take("response_format", schema ? schema_grammar(*schema, "response_format", "response_format.schema", raw, {"response_format", "schema"})
                                           : std::string(Grammar::json_object_text()));
        } else if (t == "json_schema") {
            const json* js = given(*rf, "json_schema");
            if (!js || !js->is_object())
                bad("response_format", "response_format of type json_schema needs a json_schema object {\"name\": ..., \"schema\": {...}}");
            if (const json* name = given(*js, "name"); name && !name->is_string()) bad("response_format", "response_format.json_schema.name must be a string");
            if (const json* strict = given(*js, "strict"); strict && !strict->is_boolean())
                bad("response_format", "response_format.json_schema.strict must be a boolean");
            const json* schema = given(*js, "schema");
            // No schema: any JSON object, as json_object.
            take("response_format", schema ? schema_grammar(*schema, "response_format", "response_format.json_schema.schema", raw,
                                                          {"response_format", "json_schema", "schema"})
                                           : std::string(Grammar::json_object_text()));
        } else if (t != "text") {
            bad("response_format", "response_format type \"" + utf8_excerpt(t, 40) + "\" is not supported (text, json_object, json_schema)");
        }
    }
    if (const json* g = given(body, "grammar")) {
        if (!g->is_string()) bad("grammar", "grammar must be a string of GBNF, got " + shown(*g));
        const std::string& text = g->get_ref<const std::string&>();
        if (!text.empty()) {
            if (text.size() > kMaxGrammarBytes)
                bad("grammar", "grammar is " + std::to_string(text.size()) + " bytes; at most " + std::to_string(kMaxGrammarBytes));
            try {
                Grammar::parse(text);
            } catch (const Error& e) {
                bad("grammar", valid_utf8(e.what()));
            }
            take("grammar", text);
        }
    }
    if (const json* s = given(body, "json_schema")) {
        if (!(s->is_object() && s->empty())) take("json_schema", schema_grammar(*s, "json_schema", "json_schema", raw, {"json_schema"}));  // {}: none, as llama-server
    }
    if (gbnf.size() > kMaxGrammarBytes)
        bad(from, std::string(from) + " makes a grammar of " + std::to_string(gbnf.size()) + " bytes; at most " + std::to_string(kMaxGrammarBytes));
    return gbnf;
}

// A logit_bias token id as a key of OpenAI's object form: decimal digits only.
int32_t bias_token_key(const std::string& key) {
    const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
        bad("logit_bias", "logit_bias keys must be token ids such as \"15043\", got \"" + utf8_excerpt(key, 40) +
                              "\" (token strings are not supported: tokenize them with /tokenize)");
    }
    const int64_t id = std::stoll(key);
    if (id > INT32_MAX) bad("logit_bias", "logit_bias token id " + key + " is outside the vocabulary");
    return static_cast<int32_t>(id);
}

// logit_bias as OpenAI sends it, {"15043": -100, ...}, or as llama-server
// also takes it, [[15043, -1.5], [29871, false], ...]: a bias in [-100, 100]
// added to that token's logit, false for never (-inf). Token strings
// (llama-server tokenizes them) are refused: specd's front end has no
// tokenizer, and a silently different reading would be worse.
std::vector<LogitBias> logit_bias(const json& v, int32_t n_vocab) {
    const auto bias_of = [](const json& b, const std::string& where) {
        if (b.is_boolean() && !b.get<bool>()) return -INFINITY;
        if (!b.is_number() || !std::isfinite(b.get<double>()) || b.get<double>() < -100.0 || b.get<double>() > 100.0)
            bad("logit_bias", "logit_bias" + where + " must be a number in [-100, 100] or false, got " + shown(b));
        return static_cast<float>(b.get<double>());
    };
    const auto checked = [&](int64_t id) {
        if (id < 0 || id > INT32_MAX || (n_vocab > 0 && id >= n_vocab)) {
            bad("logit_bias", "logit_bias token id " + std::to_string(id) + " is outside the vocabulary" +
                                  (n_vocab > 0 ? " (0 to " + std::to_string(n_vocab - 1) + ")" : std::string()));
        }
        return static_cast<int32_t>(id);
    };
    if (!v.is_object() && !v.is_array())
        bad("logit_bias", "logit_bias must be an object of token id -> bias or an array of [id, bias] pairs, got " + shown(v));
    if (v.size() > kMaxLogitBias)
        bad("logit_bias", "logit_bias has " + std::to_string(v.size()) + " entries; at most " + std::to_string(kMaxLogitBias));
    std::vector<LogitBias> out;
    out.reserve(v.size());
    if (v.is_object()) {
        for (const auto& [key, b] : v.items()) {
            const int32_t id = checked(bias_token_key(key));
            out.push_back({id, bias_of(b, "[\"" + key + "\"]")});
        }
        return out;
    }
    for (const json& pair : v) {
        if (!pair.is_array() || pair.size() != 2)
            bad("logit_bias", "each logit_bias entry must be a pair [token id, bias], got " + shown(pair));
        if (pair[0].is_string())
            bad("logit_bias", "logit_bias token strings are not supported (tokenize them with /tokenize), got " + shown(pair[0]));
        if (!pair[0].is_number_integer()) bad("logit_bias", "a logit_bias token id must be an integer, got " + shown(pair[0]));
        const int64_t raw = pair[0].is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(pair[0].get<uint64_t>(), INT64_MAX))
                                                         : pair[0].get<int64_t>();
        const int32_t id = checked(raw);
        out.push_back({id, bias_of(pair[1], " for token " + std::to_string(id))});
    }
    return out;
}

bool boolean(const json& v, const char* key) {
    if (!v.is_boolean()) bad(key, std::string(key) + " must be true or false, got " + shown(v));
    return v.get<bool>();
}

}  // namespace

json parse_json(std::string_view text) {
    try {
        return parse_json_text(text);
    } catch (const JsonTextError& e) {
        throw ApiError{400, "invalid_json", e.what(), ""};
    }
}

ParsedRequest parse_generation(const json& body, ApiKind kind, const RequestLimits& limits, ChatRenderer render_chat,
                               const void* render_ctx, std::string_view raw_body) {
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    ParsedRequest out;
    generate_request& r = out.request;
    // Chat, as OpenAI and llama-server: until the answer ends or the context
    // fills (bounded by max_tokens_limit); completions and the WebSocket keep
    // the shorter default.
    r.max_tokens = kind == ApiKind::Chat ? limits.max_tokens_limit : limits.default_max_tokens;
    const json* prompt = given(body, "prompt");
    const json* messages = given(body, "messages");
    if (kind == ApiKind::Completion && !prompt) bad("prompt", "prompt is required");
    if (kind == ApiKind::Chat && !messages) bad("messages", "messages is required");
    if (kind == ApiKind::WebSocket && (prompt != nullptr) == (messages != nullptr)) bad("prompt", "give exactly one of prompt and messages");
    if (kind == ApiKind::Completion && messages) bad("messages", "messages belongs to /v1/chat/completions");
    if (kind == ApiKind::Chat && prompt) bad("prompt", "prompt belongs to /v1/completions");

    if (prompt) {
        const json& p = *prompt;
        if (p.is_string()) {
            r.prompt = p.get<std::string>();
        } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
            r.prompt = p[0].get<std::string>();
        } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
            for (const json& t : p) r.prompt_tokens.push_back(static_cast<int32_t>(integer(t, "prompt", 0, INT32_MAX)));
        } else {
            bad("prompt", "prompt must be a string, a one-string array or an array of token ids");
        }
        if (r.prompt.empty() && r.prompt_tokens.empty()) bad("prompt", "the prompt is empty");
    }
    const ToolRequest tools = parse_tool_request(body, kind, raw_body);
    ChatTemplate::ToolFormat tool_format = ChatTemplate::ToolFormat::None;
    if (messages) {
        const json& m = *messages;
        if (!m.is_array() || m.empty()) bad("messages", "messages must be a non-empty array");
        for (const json& msg : m) out.messages.push_back(chat_message(msg));
        out.chat = true;
        try {
            try {
                r.prompt = render_chat(render_ctx, out.messages, tools.tools_json, tool_format);
            } catch (const ApiError& e) {
                // tool_choice "none" on a template without a tool format: the
                // tools are left out, as llama-server renders them into a
                // template that ignores them.
                if (e.param != "tools" || tools.choice != ToolRequest::Choice::None) throw;
                r.prompt = render_chat(render_ctx, out.messages, {}, tool_format);
            }
        } catch (const std::exception& e) {
            bad("messages", valid_utf8(e.what()));
        }
        r.parse_special = true;  // the template writes its special tokens as text
        if (r.prompt.empty()) bad("messages", "the rendered prompt is empty");
    }
    out.tool_calls = tools.calls_possible();
    // Llama 3.1's calls are the whole reply; Qwen's are tagged blocks.
    out.tool_syntax = tool_format == ChatTemplate::ToolFormat::Llama3Json ? ToolCallSyntax::WholeReply : ToolCallSyntax::TaggedBlocks;
    const std::string forced_call = out.tool_calls ? tool_grammar(tools, tool_format) : std::string();

    refuse_unsupported(body);
    if (const json* v = given(body, "model")) {
        if (!v->is_string()) bad("model", "model must be a string");
        r.model = v->get<std::string>();
        if (r.model.size() > kMaxModelNameBytes)
            bad("model", "model is " + std::to_string(r.model.size()) + " bytes; names are at most " + std::to_string(kMaxModelNameBytes));
    }
    for (const char* key : {"max_tokens", "max_completion_tokens", "n_predict"}) {
        if (const json* v = given(body, key)) r.max_tokens = static_cast<int32_t>(integer(*v, key, 1, limits.max_tokens_limit));
    }
    if (const json* v = given(body, "temperature")) r.sampling.temperature = static_cast<float>(number(*v, "temperature", 0.0, 2.0));
    if (const json* v = given(body, "top_p")) r.sampling.top_p = static_cast<float>(number(*v, "top_p", 0.0, 1.0));
    if (const json* v = given(body, "min_p")) r.sampling.min_p = static_cast<float>(number(*v, "min_p", 0.0, 1.0));
    if (const json* v = given(body, "top_k")) r.sampling.top_k = static_cast<int32_t>(integer(*v, "top_k", 0, 1 << 20));
    if (const json* v = given(body, "repeat_penalty")) r.sampling.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty", 0.01, 10.0));
    if (const json* v = given(body, "presence_penalty")) r.sampling.presence_penalty = static_cast<float>(number(*v, "presence_penalty", -2.0, 2.0));
    if (const json* v = given(body, "frequency_penalty")) r.sampling.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty", -2.0, 2.0));
    // presence_penalty and frequency_penalty count the tokens generated so
    // far, as OpenAI defines them. A request that names repeat_last_n speaks
    // llama-server's dialect and gets its reading: they count the last
    // repeat_last_n tokens of prompt + output, as its penalties sampler does.
    if (const json* v = given(body, "repeat_last_n")) {
        r.sampling.repeat_last_n = static_cast<int32_t>(integer(*v, "repeat_last_n", -1, 1 << 20));
        r.sampling.penalty_window = PenaltyWindow::LastN;
    }
    if (const json* v = given(body, "logit_bias")) r.sampling.logit_bias = logit_bias(*v, limits.n_vocab);
    // llama-server's switch, read on every endpoint: false prefills the whole
    // prompt even where the prefix cache holds its start (the output is the
    // same either way; only the time to the first token differs).
    if (const json* v = given(body, "cache_prompt")) {
        if (!v->is_boolean()) bad("cache_prompt", "cache_prompt must be true or false, got " + shown(*v));
        r.cache_prompt = v->get<bool>();
    }
    r.sampling.grammar = constraint_grammar(body, raw_body);
    if (!forced_call.empty()) {
        // A forced call is the whole reply: no second format can apply.
        if (!r.sampling.grammar.empty())
            bad("tool_choice", "tool_choice " + (tools.named.empty() ? std::string("\"required\"") : "naming a function") +
                                   " makes the reply a tool call; it cannot be combined with response_format, grammar or json_schema");
        r.sampling.grammar = forced_call;
    } else if (out.tool_calls && !r.sampling.grammar.empty()) {
        bad("response_format", "response_format, grammar or json_schema with tools and tool_choice \"auto\" is not supported "
                               "(the grammar would forbid the calls); use tool_choice \"none\" or \"required\"");
    }
    // seed: the text then depends on (seed, prompt, parameters) only, with
    // speculation on or off, at any draft length, alone or batched: each
    // position's token is the race winner under noise keyed on (seed,
    // position) (engine/coupled_sampling.h). Unseeded requests keep the
    // random stream and the rejection rule (docs/BENCHMARKS.md: its
    // acceptance is the higher).
    if (const json* v = given(body, "seed")) {
        r.sampling.seed = static_cast<uint64_t>(integer(*v, "seed", 0, INT64_MAX));
        r.sampling.coupled = true;
    }
    // Log-probabilities (engine/token_logprobs.h says of which distribution):
    // completions take OpenAI's integer logprobs (alternatives per token),
    // chat and the WebSocket its pair logprobs: true + top_logprobs.
    if (kind == ApiKind::Completion) {
        if (const json* v = given(body, "logprobs"); v && !(v->is_boolean() && !v->get<bool>())) {
            if (!v->is_number_integer())
                bad("logprobs", "logprobs must be an integer in [0, " + std::to_string(kMaxTopLogprobs) +
                                    "] on /v1/completions (alternatives per token), got " + shown(*v));
            r.sampling.logprobs = static_cast<int32_t>(integer(*v, "logprobs", 0, kMaxTopLogprobs));
        }
        if (const json* v = given(body, "top_logprobs"); v && !(v->is_number() && v->get<double>() == 0.0))
            bad("top_logprobs", "top_logprobs belongs to /v1/chat/completions; completions take logprobs: N (0 to " +
                                    std::to_string(kMaxTopLogprobs) + ")");
    } else {
        const json* on = given(body, "logprobs");
        const bool wanted = on && boolean(*on, "logprobs");
        int32_t top = 0;
        if (const json* v = given(body, "top_logprobs")) top = static_cast<int32_t>(integer(*v, "top_logprobs", 0, kMaxTopLogprobs));
        if (top > 0 && !wanted) bad("top_logprobs", "top_logprobs needs logprobs: true");
        if (wanted) r.sampling.logprobs = top;
    }
    if (const json* v = given(body, "n")) {
        // Choices beyond the first share the prompt's KV blocks through the
        // prefix cache; each samples on its own (with a seed, choice i uses seed + i).
        if (kind == ApiKind::WebSocket) {
            if (!(v->is_number_integer() && v->get<int64_t>() == 1))
                bad("n", "n > 1 is served on /v1/completions and /v1/chat/completions; a WebSocket generation has one choice");
        } else {
            out.n = static_cast<int32_t>(integer(*v, "n", 1, kMaxChoices));
        }
    }
    if (const json* v = given(body, "stop")) {
        // A string or an array of strings (OpenAI: up to 4; llama-server more).
        const auto add = [&](const json& s) {
            if (!s.is_string()) bad("stop", "stop must be a string or an array of strings, got " + shown(s));
            const std::string& text = s.get_ref<const std::string&>();
            if (text.empty()) bad("stop", "a stop sequence must not be empty");
            if (text.size() > kMaxStopSequenceBytes)
                bad("stop", "a stop sequence is at most " + std::to_string(kMaxStopSequenceBytes) + " bytes, got " + std::to_string(text.size()));
            r.stop.push_back(text);
        };
        if (v->is_array()) {
            if (v->size() > kMaxStopSequences)
                bad("stop", "at most " + std::to_string(kMaxStopSequences) + " stop sequences, got " + std::to_string(v->size()));
            for (const json& s : *v) add(s);
        } else {
            add(*v);
        }
    }
    if (out.tool_calls && tools.choice == ToolRequest::Choice::Auto && !tools.parallel && out.tool_syntax == ToolCallSyntax::TaggedBlocks) {
        // parallel_tool_calls false with "auto": the reply ends where its
        // first call closes (the tag is put back before the calls are read).
        // A whole-reply call (Llama 3.1) is one call already.
        if (std::find(r.stop.begin(), r.stop.end(), kToolCallClose) == r.stop.end()) {
            if (r.stop.size() >= kMaxStopSequences)
                bad("parallel_tool_calls", "parallel_tool_calls false with tool_choice \"auto\" takes a stop sequence, and stop has " +
                                               std::to_string(kMaxStopSequences) + " already");
            r.stop.emplace_back(kToolCallClose);
        }
        out.tool_call_stop = true;
    }
    if (const json* v = given(body, "stream")) out.stream = boolean(*v, "stream");
    if (const json* o = given(body, "stream_options")) {
        if (!o->is_object()) bad("stream_options", "stream_options must be an object");
        if (const json* v = given(*o, "include_usage")) out.include_usage = boolean(*v, "stream_options.include_usage");
    }
    if (const json* s = given(body, "speculative")) {
        if (!s->is_object()) bad("speculative", "speculative must be an object");
        if (const json* v = given(*s, "enabled")) r.speculative = boolean(*v, "speculative.enabled") ? 1 : 0;
        if (const json* v = given(*s, "draft_max")) r.draft_max = static_cast<int32_t>(integer(*v, "speculative.draft_max", 1, limits.max_draft_tokens));
        if (const json* v = given(*s, "adaptive")) r.adaptive = boolean(*v, "speculative.adaptive") ? 1 : 0;
    }
    if (kind == ApiKind::WebSocket) {
        const json* id = given(body, "id");
        if (!id || !id->is_string() || id->get_ref<const std::string&>().empty()) bad("id", "id must be a non-empty string");
        r.id = id->get<std::string>();
    }
    return out;
}

std::string error_body(const ApiError& e) {
    const char* type = e.status == 429   ? "rate_limit_exceeded"
                       : e.status >= 500 ? "server_error"
                       : e.status == 401 ? "authentication_error"
                                         : "invalid_request_error";
    json j = {{"error", {{"message", e.message}, {"type", type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)}, {"code", e.code}}}};
    return dump_json(j);
}

std::string openai_finish_reason(const std::string& ours) {
    if (ours == "length" || ours == "context") return "length";
    if (ours == "cancelled") return "cancelled";  // a cut answer must not look complete
    return "stop";
}

json usage_json(const done_event& d) {
    // prompt_tokens_details.cached_tokens: OpenAI's count of prompt tokens
    // served from its prompt cache; here the prefix cache's.
    return {{"prompt_tokens", d.prompt_tokens}, {"completion_tokens", d.completion_tokens},
            {"total_tokens", d.prompt_tokens + d.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", d.cached_prompt_tokens}}}};
}

json timings_json(const done_event& d) {
    const double gen_ms = d.total_ms - d.ttft_ms;
    const double tps = gen_ms > 0 && d.completion_tokens > 1 ? 1000.0 * (d.completion_tokens - 1) / gen_ms : 0.0;
    return {{"ttft_ms", d.ttft_ms}, {"total_ms", d.total_ms}, {"tokens_per_s", tps}};
}

json speculative_json(const done_event& d) {
    const double rate = d.drafted > 0 ? static_cast<double>(d.accepted) / static_cast<double>(d.drafted) : 0.0;
    const double mean_len = d.draft_steps > 0 ? 1.0 + static_cast<double>(d.accepted) / static_cast<double>(d.draft_steps) : 1.0;
    return {{"enabled", d.speculative}, {"drafted", d.drafted}, {"accepted", d.accepted}, {"acceptance_rate", rate},
            {"mean_accept_len", mean_len}, {"steps", d.steps}, {"load_capped_steps", d.load_capped}};
}

json completion_response(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                         const done_event& d, const json& logprobs) {
    return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kSystemFingerprint},
            {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", openai_finish_reason(d.finish_reason)}}})},
            {"usage", usage_json(d)}, {"timings", timings_json(d)}, {"speculative", speculative_json(d)}};
}

std::string chat_finish_reason(const std::string& ours, int n_calls) {
    const std::string reason = openai_finish_reason(ours);
    return n_calls > 0 && reason == "stop" ? "tool_calls" : reason;
}

json tool_calls_json(const std::vector<ToolCallOut>& calls, int first_index) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (first_index >= 0) c["index"] = first_index + static_cast<int>(i);
        out.push_back(std::move(c));
    }
    return out;
}

json chat_response(const std::string& id, const std::string& model, int64_t created, const std::string& text, const done_event& d,
                   const json& logprobs, const std::vector<ToolCallOut>& calls) {
    json message = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) {
        if (text.empty()) message["content"] = nullptr;  // OpenAI: null content beside calls
        message["tool_calls"] = tool_calls_json(calls);
    }
    return {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kSystemFingerprint},
            {"choices", json::array({{{"index", 0}, {"message", std::move(message)},
                                      {"logprobs", logprobs}, {"finish_reason", chat_finish_reason(d.finish_reason, static_cast<int>(calls.size()))}}})},
            {"usage", usage_json(d)}, {"timings", timings_json(d)}, {"speculative", speculative_json(d)}};
}

json completion_chunk(const std::string& id, const std::string& model, int64_t created, const std::string& text,
                      const std::string& finish_reason, const json& logprobs) {
    return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"system_fingerprint", kSystemFingerprint},
            {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs},
                                      {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

json chat_chunk(const std::string& id, const std::string& model, int64_t created, const std::string* role, const std::string* content,
                const std::string& finish_reason, const json& logprobs) {
    json delta = json::object();
    if (role) delta["role"] = *role;
    if (content) delta["content"] = *content;
    return {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}, {"system_fingerprint", kSystemFingerprint},
            {"choices", json::array({{{"index", 0}, {"delta", delta}, {"logprobs", logprobs},
                                      {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}}})}};
}

std::string content_chunk_json(bool chat, const std::string& id, const std::string& model, int64_t created, const std::string& text,
                               int index) {
    std::string out;
    out.reserve(128 + id.size() + model.size() + text.size());
    out += R"({"id":)";
    append_json_string(out, id);
    out += chat ? R"(,"object":"chat.completion.chunk","created":)" : R"(,"object":"text_completion","created":)";
    out += std::to_string(created);
    out += R"(,"model":)";
    append_json_string(out, model);
    out += R"(,"system_fingerprint":)";
    append_json_string(out, kSystemFingerprint);
    out += R"(,"choices":[{"index":)";
    out += std::to_string(index);
    out += chat ? R"(,"delta":{"content":)" : R"(,"text":)";
    append_json_string(out, text);
    out += chat ? R"(},"logprobs":null,"finish_reason":null}]})" : R"(,"logprobs":null,"finish_reason":null}]})";
    return out;
}

// Written by hand, not through a json object: it runs for every token event
// of every WebSocket generation on the network thread, and building then
// dumping a json tree costs several allocations per frame (a std::map per
// object). Keys in the documented order (docs/websocket-protocol.md).
std::string ws_token_frame(const token_event& e, const TokenPiece* piece) {
    std::string out;
    out.reserve(80 + e.id.size() + 2 * e.text.size() + 16 * e.tokens.size());
    out += R"({"type":"token","id":)";
    append_json_string(out, e.id);
    out += R"(,"text":)";
    append_json_string(out, e.text);
    out += R"(,"token_ids":[)";
    for (size_t i = 0; i < e.tokens.size(); ++i) {
        if (i > 0) out += ',';
        out += std::to_string(e.tokens[i]);
    }
    out += R"(],"from_draft":[)";
    for (size_t i = 0; i < e.from_draft.size(); ++i) {
        if (i > 0) out += ',';
        out += e.from_draft[i] != 0 ? "true" : "false";
    }
    // Each token's own share of text (a client marks tokens by origin);
    // only when the ends describe this text exactly.
    const bool ends_fit = e.text_ends.size() == e.tokens.size() && !e.tokens.empty() && e.text_ends.back() == e.text.size() &&
                          std::is_sorted(e.text_ends.begin(), e.text_ends.end());
    if (ends_fit) {
        out += R"(],"token_texts":[)";
        uint32_t begin = 0;
        for (size_t i = 0; i < e.text_ends.size(); ++i) {
            if (i > 0) out += ',';
            append_json_string(out, std::string_view(e.text).substr(begin, e.text_ends[i] - begin));
            begin = e.text_ends[i];
        }
    }
    out += ']';
    // Asked for (logprobs: true): chat's per-token entries, one per token id.
    if (piece && !e.logprobs.empty()) {
        out += R"(,"logprobs":)";
        out += dump_json(chat_logprobs_json(e, *piece)["content"]);
    }
    out += '}';
    return out;
}

std::string ws_done_frame(const done_event& d) {
    return dump_json(json{{"type", "done"}, {"id", d.id}, {"finish_reason", d.finish_reason},
                {"usage", usage_json(d)}, {"timings", timings_json(d)}, {"speculative", speculative_json(d)}});
}

std::string ws_error_frame(const std::string* id, const std::string& code, const std::string& message) {
    return dump_json(json{{"type", "error"}, {"id", id ? json(*id) : json(nullptr)}, {"code", code}, {"message", message}});
}

}  // namespace specd::net
