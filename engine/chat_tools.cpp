// ChatTemplate::render_with_tools: the tool formats of the chat templates,
// written out by hand as chat_template.cpp writes the plain turns. Each
// reproduces its Jinja template's output exactly (tests/engine/
// test_chat_tools.cpp renders the real template with Jinja2 and compares).
#include <string>
#include <string_view>

#include "engine/chat_template.h"
#include "engine/json_string.h"
#include "engine/error.h"

namespace specd {

namespace {

// Qwen2.5's template (llama.cpp's models/templates/Qwen-Qwen2.5-7B-Instruct.jinja).
void render_qwen_hermes(std::span<const ChatMessage> messages, std::span<const std::string> tools, bool add_generation_prompt,
                        std::string& out) {
    constexpr std::string_view kDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    const bool first_is_system = !messages.empty() && messages[0].role == "system";
    if (!tools.empty()) {
        out.append("<|im_start|>system\n");
        out.append(first_is_system ? std::string_view(messages[0].content) : kDefaultSystem);
        out.append("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const std::string& tool : tools) out.append("\n").append(tool);
        out.append("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                   "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                   "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else {
        out.append("<|im_start|>system\n");
        out.append(first_is_system ? std::string_view(messages[0].content) : kDefaultSystem);
        out.append("<|im_end|>\n");
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || (m.role == "system" && i > 0) || (m.role == "assistant" && m.tool_calls.empty())) {
            out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
        } else if (m.role == "assistant") {
            out.append("<|im_start|>assistant");
            if (!m.content.empty()) out.append("\n").append(m.content);
            for (const ChatToolCall& call : m.tool_calls) {
                out.append("\n<tool_call>\n{\"name\": \"").append(call.name).append("\", \"arguments\": ");
                out.append(call.arguments).append("}\n</tool_call>");
            }
            out.append("<|im_end|>\n");
        } else if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out.append("<|im_start|>user");
            out.append("\n<tool_response>\n").append(m.content).append("\n</tool_response>");
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") out.append("<|im_end|>\n");
        } else if (m.role != "system") {
            throw Error("chat message " + std::to_string(i) + " has role \"" + m.role +
                        "\"; expected system, user, assistant or tool");
        }
    }
    if (add_generation_prompt) out.append("<|im_start|>assistant\n");
}

// Python's str.strip() (Jinja's trim filter): ASCII whitespace and the
// separators Python counts as space, U+001C..U+001F and the Unicode spaces.
std::string_view py_strip(std::string_view s) {
    const auto space_at_start = [](std::string_view t) -> size_t {
        const unsigned char c = static_cast<unsigned char>(t[0]);
        if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
        for (const std::string_view u : {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF",
                                         "\xE2\x81\x9F", "\xE3\x80\x80"}) {
            if (t.substr(0, u.size()) == u) return u.size();
        }
        if (t.size() >= 3 && t.substr(0, 2) == "\xE2\x80" && static_cast<unsigned char>(t[2]) >= 0x80 && static_cast<unsigned char>(t[2]) <= 0x8A)
            return 3;  // U+2000..U+200A
        return 0;
    };
    while (!s.empty()) {
        const size_t n = space_at_start(s);
        if (n == 0) break;
        s.remove_prefix(n);
    }
    while (!s.empty()) {
        size_t n = 0;
        for (size_t k = 1; k <= 3 && k <= s.size() && n == 0; ++k) {
            const std::string_view tail = s.substr(s.size() - k);
            if (space_at_start(tail) == k) n = k;
        }
        if (n == 0) break;
        s.remove_suffix(n);
    }
    return s;
}

// JSON text written with ", " and ": " (as tojson writes it) rewritten as
// tojson(indent=4) writes it: each member and element on its own line,
// "," ending lines, empty objects and arrays kept as {} and [].
void append_indented_json(std::string_view json, std::string& out) {
    int depth = 0;
    bool in_string = false;
    const auto newline = [&] { out.append("\n").append(static_cast<size_t>(4 * depth), ' '); };
    for (size_t i = 0; i < json.size(); ++i) {
        const char c = json[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < json.size()) out += json[++i];
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            out += c;
        } else if (c == '{' || c == '[') {
            const char close = c == '{' ? '}' : ']';
            if (i + 1 < json.size() && json[i + 1] == close) {
                out += c;
                out += close;
                ++i;
                continue;
            }
            out += c;
            ++depth;
            newline();
        } else if (c == '}' || c == ']') {
            --depth;
            newline();
            out += c;
        } else if (c == ',') {
            out += ',';
            newline();
            if (i + 1 < json.size() && json[i + 1] == ' ') ++i;
        } else {
            out += c;
        }
    }
}

// Llama 3.1's template (llama.cpp's models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja;
// 3.2's and 3.3's render the same without builtin_tools), with its defaults:
// tools_in_user_message true, date_string "26 Jul 2024".
void render_llama3_json(std::span<const ChatMessage> messages, std::span<const std::string> tools, bool add_generation_prompt,
                        std::string& out) {
    size_t i = 0;
    std::string_view system;
    if (!messages.empty() && messages[0].role == "system") {
        system = py_strip(messages[0].content);
        i = 1;
    }
    out.append("<|start_header_id|>system<|end_header_id|>\n\n");
    if (!tools.empty()) out.append("Environment: ipython\n");
    out.append("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    out.append(system).append("<|eot_id|>");
    if (!tools.empty()) {
        // The definitions open the first message after the system's (the
        // template takes it whatever its role; a user turn is what it means).
        if (i == messages.size() || messages[i].role != "user")
            throw Error("Llama 3.1's chat template puts the tools into the first user message, and the conversation does not start with one");
        out.append("<|start_header_id|>user<|end_header_id|>\n\n"
                   "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
                   "best answers the given prompt.\n\n"
                   "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
                   "Do not use variables.\n\n");
        for (const std::string& tool : tools) {
            append_indented_json(tool, out);
            out.append("\n\n");
        }
        out.append(py_strip(messages[i].content)).append("<|eot_id|>");
        ++i;
    }
    for (; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
            // A string result is "iterable" to Jinja: the template writes it through tojson, quoted.
            out.append("<|start_header_id|>ipython<|end_header_id|>\n\n");
            append_json_string(out, m.content);
            out.append("<|eot_id|>");
        } else if (!m.tool_calls.empty()) {
            if (m.tool_calls.size() != 1)
                throw Error("Llama 3.1's chat template takes one tool call per assistant message; message " + std::to_string(i) + " has " +
                            std::to_string(m.tool_calls.size()));
            const ChatToolCall& call = m.tool_calls[0];
            out.append("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"").append(call.name).append("\", \"parameters\": ");
            out.append(call.arguments).append("}<|eot_id|>");
        } else if (m.role == "system" || m.role == "user" || m.role == "assistant") {
            out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n").append(py_strip(m.content)).append("<|eot_id|>");
        } else {
            throw Error("chat message " + std::to_string(i) + " has role \"" + m.role + "\"; expected system, user, assistant or tool");
        }
    }
    if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace

std::string ChatTemplate::render_with_tools(std::span<const ChatMessage> messages, std::span<const std::string> tools_json,
                                            bool add_generation_prompt) const {
    if (messages.empty()) throw Error("chat template " + std::string(name()) + ": no messages to render");
    std::string out;
    switch (tool_format_) {
    case ToolFormat::QwenHermes: render_qwen_hermes(messages, tools_json, add_generation_prompt, out); return out;
    case ToolFormat::Llama3Json: render_llama3_json(messages, tools_json, add_generation_prompt, out); return out;
    case ToolFormat::None: break;
    }
    throw Error("the model's chat template (" + std::string(variant_name()) +
                ") has no tool format specd renders (supported: Qwen2.5's <tool_call> template, Llama 3.1's JSON calls)");
}

}  // namespace specd
