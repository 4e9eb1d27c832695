#include "net/tool_request.h"

#include "config/json_text.h"
#include "engine/error.h"
#include "engine/tool_call_grammar.h"

namespace specd::net {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void tool_refusal(const char* param, const std::string& message) { throw ApiError{400, "invalid_request", message, param}; }

std::string tool_shown(const json& v) { return utf8_excerpt(dump_json(v), 40); }

const json* tool_given(const json& body, const char* key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool tool_name_ok(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
    }
    return true;
}

}  // namespace

std::string template_json(const ordered_json& value) {
    if (value.is_object()) {
        std::string s = "{";
        bool first = true;
        for (const auto& [k, v] : value.items()) {
            s += first ? "" : ", ";
            s += ordered_json(k).dump(-1, ' ', false, ordered_json::error_handler_t::replace) + ": " + template_json(v);
            first = false;
        }
        return s + "}";
    }
    if (value.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < value.size(); ++i) s += (i ? ", " : "") + template_json(value[i]);
        return s + "]";
    }
    return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

ToolRequest parse_tool_request(const json& body, ApiKind kind, std::string_view raw_body) {
    ToolRequest out;
    const json* tools = tool_given(body, "tools");
    const json* choice = tool_given(body, "tool_choice");
    const json* parallel = tool_given(body, "parallel_tool_calls");
    const bool any_tools = tools && !(tools->is_array() && tools->empty());
    if (kind != ApiKind::Chat) {
        // The reply's calls are parsed on chat completions only.
        if (any_tools) tool_refusal("tools", "tools belong to /v1/chat/completions");
        if (choice && *choice != "none" && *choice != "auto") tool_refusal("tool_choice", "tool_choice belongs to /v1/chat/completions");
        if (parallel) tool_refusal("parallel_tool_calls", "parallel_tool_calls belongs to /v1/chat/completions");
        out.choice = ToolRequest::Choice::None;
        return out;
    }
    if (tools && !tools->is_array())
        tool_refusal("tools", "tools must be an array of {\"type\": \"function\", \"function\": {\"name\": ...}}, got " + tool_shown(*tools));
    if (parallel) {
        if (!parallel->is_boolean()) tool_refusal("parallel_tool_calls", "parallel_tool_calls must be true or false, got " + tool_shown(*parallel));
        out.parallel = parallel->get<bool>();
    }
    std::vector<ToolSchema> schemas;
    if (any_tools) {
        // The same tools in the client's key order (its text, parsed again:
        // it parsed already, depth-limited, so this succeeds).
        const ordered_json ordered = raw_body.empty() ? ordered_json(*tools) : ordered_json::parse(raw_body).at("tools");
        if (tools->size() > 128) tool_refusal("tools", "at most 128 tools, got " + std::to_string(tools->size()));
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            if (!t.is_object()) tool_refusal("tools", at + " must be an object, got " + tool_shown(t));
            const json* type = tool_given(t, "type");
            if (!type || *type != "function")
                tool_refusal("tools", at + ".type must be \"function\" (the only kind of tool chat completions call), got " +
                                          (type ? tool_shown(*type) : std::string("none")));
            const json* f = tool_given(t, "function");
            if (!f || !f->is_object()) tool_refusal("tools", at + ".function must be an object {\"name\", \"description\", \"parameters\"}");
            const json* name = tool_given(*f, "name");
            if (!name || !name->is_string() || !tool_name_ok(name->get<std::string>()))
                tool_refusal("tools", at + ".function.name must be 1 to 64 letters, digits, '_' or '-', got " +
                                          (name ? tool_shown(*name) : std::string("none")));
            for (const ToolSchema& s : schemas) {
                if (s.name == name->get_ref<const std::string&>()) tool_refusal("tools", "two tools are named \"" + s.name + "\"");
            }
            if (const json* d = tool_given(*f, "description"); d && !d->is_string()) tool_refusal("tools", at + ".function.description must be a string");
            if (const json* s = tool_given(*f, "strict"); s && !s->is_boolean()) tool_refusal("tools", at + ".function.strict must be true or false");
            ToolSchema schema{name->get<std::string>(), R"({"type": "object"})"};
            if (const json* p = tool_given(*f, "parameters")) {
                if (!p->is_object()) tool_refusal("tools", at + ".function.parameters must be a JSON schema object, got " + tool_shown(*p));
                if (const json* pt = tool_given(*p, "type"); pt && *pt != "object")
                    tool_refusal("tools", at + ".function.parameters must describe an object (arguments are a JSON object), got type " + tool_shown(*pt));
                // {} (no keywords): any arguments object.
                if (!p->empty()) schema.parameters_json = ordered[i]["function"]["parameters"].dump(-1, ' ', false, ordered_json::error_handler_t::replace);
            }
            schemas.push_back(std::move(schema));
            out.tools_json.push_back(template_json(ordered[i]));
        }
    }
    if (choice) {
        if (*choice == "none") {
            out.choice = ToolRequest::Choice::None;
        } else if (*choice == "auto") {
            out.choice = ToolRequest::Choice::Auto;
        } else if (*choice == "required") {
            out.choice = ToolRequest::Choice::Required;
        } else if (choice->is_object()) {
            const json* type = tool_given(*choice, "type");
            const json* f = tool_given(*choice, "function");
            const json* name = f && f->is_object() ? tool_given(*f, "name") : nullptr;
            if (!type || *type != "function" || !name || !name->is_string())
                tool_refusal("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                                                tool_shown(*choice));
            out.choice = ToolRequest::Choice::Required;
            out.named = name->get<std::string>();
        } else {
            tool_refusal("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                                            tool_shown(*choice));
        }
    }
    if (out.choice == ToolRequest::Choice::Required && !any_tools)
        tool_refusal("tool_choice", "tool_choice " + (out.named.empty() ? std::string("\"required\"") : "naming a function") + " needs tools to call");
    if (out.choice == ToolRequest::Choice::Required) {
        for (const ToolSchema& s : schemas) {
            if (out.named.empty() || s.name == out.named) out.callable.push_back(s);
        }
        if (out.callable.empty()) tool_refusal("tool_choice", "tool_choice names \"" + utf8_excerpt(out.named, 64) + "\", which is not in tools");
    } else if (out.choice == ToolRequest::Choice::Auto) {
        // With "auto" the model may answer in text or call: nothing
        // constrains the arguments, so a strict schema cannot be promised.
        for (size_t i = 0; any_tools && i < tools->size(); ++i) {
            const json* s = tool_given((*tools)[i]["function"], "strict");
            if (s && s->get<bool>())
                tool_refusal("tools", "tools[" + std::to_string(i) +
                                          "].function.strict: true is enforced with tool_choice \"required\" or a named function; "
                                          "with \"auto\" the arguments are not constrained");
        }
    }
    return out;
}

std::string tool_grammar(const ToolRequest& tools, ChatTemplate::ToolFormat format) {
    if (tools.choice != ToolRequest::Choice::Required || tools.callable.empty()) return "";
    try {
        return tool_call_grammar(tools.callable, tools.parallel, format);
    } catch (const Error& e) {
        tool_refusal("tools", valid_utf8(e.what()));
    }
}

}  // namespace specd::net
