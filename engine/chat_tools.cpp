// ChatTemplate::render_with_tools: the tool formats of the chat templates,
// written out by hand as chat_template.cpp writes the plain turns. Each
// reproduces its Jinja template's output exactly (tests/engine/
// test_chat_tools.cpp renders the real template with Jinja2 and compares).
#include <string>

#include "engine/chat_template.h"
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

}  // namespace

std::string ChatTemplate::render_with_tools(std::span<const ChatMessage> messages, std::span<const std::string> tools_json,
                                            bool add_generation_prompt) const {
    if (messages.empty()) throw Error("chat template " + std::string(name()) + ": no messages to render");
    std::string out;
    switch (tool_format_) {
    case ToolFormat::QwenHermes: render_qwen_hermes(messages, tools_json, add_generation_prompt, out); return out;
    case ToolFormat::None: break;
    }
    throw Error("the model's chat template (" + std::string(variant_name()) +
                ") has no tool format specd renders (supported: Qwen2.5's <tool_call> template)");
}

}  // namespace specd
