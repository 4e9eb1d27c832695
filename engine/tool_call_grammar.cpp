#include "engine/tool_call_grammar.h"

#include <set>
#include <string_view>

#include "engine/error.h"
#include "engine/grammar.h"
#include "engine/json_schema_grammar.h"

namespace specd {

namespace {

bool valid_name(std::string_view name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

// Appends `rules` (lines "name ::= body") to `out`, skipping a rule already
// there: the primitives every schema shares come once.
void add_rules(const std::string& rules, std::set<std::string>& defined, std::string& out) {
    size_t at = 0;
    while (at < rules.size()) {
        size_t end = rules.find('\n', at);
        if (end == std::string::npos) end = rules.size();
        const std::string_view line = std::string_view(rules).substr(at, end - at);
        at = end + 1;
        if (line.empty()) continue;
        const std::string name(line.substr(0, line.find(" ::= ")));
        if (!defined.insert(name).second) continue;
        out.append(line).append("\n");
    }
}

}  // namespace

std::string tool_call_grammar(std::span<const ToolSchema> tools, bool parallel, ChatTemplate::ToolFormat format) {
    if (tools.empty()) throw Error("tool_call_grammar: no tools to call");
    if (format == ChatTemplate::ToolFormat::None) throw Error("tool_call_grammar: the chat template has no tool format");
    const bool llama = format == ChatTemplate::ToolFormat::Llama3Json;
    std::string calls;  // the alternatives of tool-call's name part
    std::string rules;
    std::set<std::string> defined;
    for (size_t i = 0; i < tools.size(); ++i) {
        const ToolSchema& t = tools[i];
        if (!valid_name(t.name))
            throw Error("the function name \"" + t.name.substr(0, 80) + "\" is not 1 to 64 letters, digits, '_' or '-'");
        const std::string prefix = "tool-" + std::to_string(i);
        std::string args;
        try {
            args = json_schema_rules(t.parameters_json, prefix);
        } catch (const Error& e) {
            std::string why = e.what();
            if (why.rfind("json_schema: ", 0) == 0) why = why.substr(13);
            throw Error("the parameters of function \"" + t.name + "\": " + why);
        }
        // The name is plain ASCII without quotes or backslashes: a GBNF
        // literal as it stands.
        rules += prefix + "-call ::= \"\\\"" + t.name + "\\\", \\\"" + (llama ? "parameters" : "arguments") + "\\\": \" " + prefix + "\n";
        defined.insert(prefix + "-call");
        add_rules(args, defined, rules);
        calls += (i ? " | " : "") + prefix + "-call";
    }
    std::string gbnf = std::string("root ::= [ \\t\\n]{0,2} tool-call") + (parallel && !llama ? " (\"\\n\" tool-call)*" : "") + "\n";
    gbnf += llama ? "tool-call ::= \"{\\\"name\\\": \" ( " + calls + " ) \"}\"\n"
                  : "tool-call ::= \"<tool_call>\\n{\\\"name\\\": \" ( " + calls + " ) \"}\\n</tool_call>\"\n";
    gbnf += rules;
    try {
        Grammar::parse(gbnf);  // its size limits, checked when the request comes
    } catch (const Error& e) {
        throw Error(std::string("the tools' grammar is refused: ") + e.what());
    }
    return gbnf;
}

}  // namespace specd
