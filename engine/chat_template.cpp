// Chat template detection and rendering; see chat_template.h. The rendering
// of each format reproduces llama.cpp's llm_chat_apply_template.
#include "engine/chat_template.h"

#include <array>
#include <cstddef>
#include <string>

#include "engine/error.h"

namespace specd {

namespace {

using Variant = ChatTemplate::Variant;

struct VariantInfo {
    Variant variant;
    std::string_view family;   // name()
    std::string_view variant_name;
};

// The family names come first, in the order by_name()'s error lists them;
// a family's own entry is its default variant.
constexpr std::array<VariantInfo, 15> kVariants = {{
    {Variant::ChatML, "chatml", "chatml"},
    {Variant::Llama3, "llama3", "llama3"},
    {Variant::Llama2Sys, "llama2", "llama2-sys"},
    {Variant::Zephyr, "zephyr", "zephyr"},
    {Variant::Gemma, "gemma", "gemma"},
    {Variant::Phi3, "phi3", "phi3"},
    {Variant::Plain, "plain", "plain"},
    {Variant::Llama2SysBos, "llama2", "llama2-sys-bos"},
    {Variant::Llama2SysStrip, "llama2", "llama2-sys-strip"},
    {Variant::Llama2NoSys, "llama2", "llama2-no-sys"},
    {Variant::MistralV1, "llama2", "mistral-v1"},
    {Variant::MistralV3, "llama2", "mistral-v3"},
    {Variant::MistralV3Tekken, "llama2", "mistral-v3-tekken"},
    {Variant::MistralV7, "llama2", "mistral-v7"},
    {Variant::MistralV7Tekken, "llama2", "mistral-v7-tekken"},
}};
constexpr size_t kFamilyCount = 7;

const VariantInfo& info(Variant variant) {
    for (const VariantInfo& entry : kVariants) {
        if (entry.variant == variant) return entry;
    }
    return kVariants[kFamilyCount - 1];  // unreachable: every Variant is listed
}

// Looks `name` up as a family or variant name; nullptr if it is neither.
const VariantInfo* find_by_name(std::string_view name) {
    for (size_t i = 0; i < kFamilyCount; ++i) {
        if (kVariants[i].family == name) return &kVariants[i];
    }
    for (const VariantInfo& entry : kVariants) {
        if (entry.variant_name == name) return &entry;
    }
    return nullptr;
}

// The whitespace llama.cpp's trim() removes (C isspace in the "C" locale).
bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string_view trim(std::string_view text) {
    size_t begin = 0, end = text.size();
    while (begin < end && is_space(text[begin])) ++begin;
    while (end > begin && is_space(text[end - 1])) --end;
    return text.substr(begin, end - begin);
}

bool contains(std::string_view haystack, std::string_view needle) {
    return haystack.find(needle) != std::string_view::npos;
}

// Zephyr closes every turn, the user's included, with the EOS; Falcon-3 and
// GLM-Edge (which also write "<|user|>" and "<|assistant|>") do not. So look
// for an EOS in the {{ ... }} expression that writes "<|user|>".
bool user_turn_ends_with_eos(std::string_view text) {
    for (size_t at = text.find("<|user|>"); at != std::string_view::npos;
         at = text.find("<|user|>", at + 1)) {
        const size_t expression_end = text.find("}}", at);
        const std::string_view expression = text.substr(at, expression_end == std::string_view::npos
                                                                ? std::string_view::npos
                                                                : expression_end - at);
        if (contains(expression, "eos_token") || contains(expression, "</s>") ||
            contains(expression, "<|endoftext|>")) {
            return true;
        }
    }
    return false;
}

// Which "[INST]" spelling a template uses; llama.cpp's rules and order.
Variant detect_inst_variant(std::string_view text) {
    if (contains(text, "[SYSTEM_PROMPT]")) return Variant::MistralV7;
    // The official Mistral v1 template ("' [INST] ' + system_message") and
    // the v3 / v3-tekken ones (which know about tools).
    if (contains(text, "' [INST] ' + system_message") || contains(text, "[AVAILABLE_TOOLS]")) {
        if (contains(text, " [INST]")) return Variant::MistralV1;
        if (contains(text, "\"[INST]\"")) return Variant::MistralV3Tekken;
        return Variant::MistralV3;
    }
    if (contains(text, "content.strip()")) return Variant::Llama2SysStrip;
    if (contains(text, "bos_token + '[INST]")) return Variant::Llama2SysBos;
    if (contains(text, "<<SYS>>")) return Variant::Llama2Sys;
    return Variant::Llama2NoSys;
}

// What detect() made of a template; not recognised: the plain fallback.
struct Detection {
    Variant variant;
    bool recognised;
};

Detection detect(std::string_view text) {
    constexpr Detection unrecognised{Variant::Plain, false};
    if (contains(text, "<|im_start|>")) {
        if (contains(text, "<|im_sep|>") || contains(text, "<end_of_utterance>")) return unrecognised;  // Phi-4, SmolVLM
        return {Variant::ChatML, true};
    }
    if (text.starts_with("mistral") || contains(text, "[INST]")) return {detect_inst_variant(text), true};
    if (contains(text, "<|assistant|>") && contains(text, "<|end|>")) return {Variant::Phi3, true};
    if (contains(text, "[gMASK]<sop>")) return unrecognised;  // ChatGLM-4
    if (contains(text, "<|user|>") && user_turn_ends_with_eos(text)) return {Variant::Zephyr, true};
    if (contains(text, "<|assistant|>") && contains(text, "<|user|>")) return unrecognised;  // Falcon-3, GLM-Edge
    if (contains(text, "<|{{ item['role'] }}|>") && contains(text, "<|begin_of_image|>")) return unrecognised;  // GLM-Edge
    if (contains(text, "<|user|>") && contains(text, "<|endoftext|>")) return {Variant::Zephyr, true};
    if (contains(text, "bos_token + message['role']")) return unrecognised;  // Monarch
    if (contains(text, "<start_of_turn>")) return {Variant::Gemma, true};
    if (contains(text, "'\\n\\nAssistant: ' + eos_token")) return unrecognised;  // Orion
    if (contains(text, "GPT4 Correct ")) return unrecognised;                    // OpenChat
    if (contains(text, "USER: ") && contains(text, "ASSISTANT: ")) return unrecognised;  // Vicuna
    if (contains(text, "### Instruction:") && contains(text, "<|EOT|>")) return unrecognised;  // DeepSeek
    if (contains(text, "<|START_OF_TURN_TOKEN|>") && contains(text, "<|USER_TOKEN|>")) return unrecognised;  // Command-R
    if (contains(text, "<|start_header_id|>") && contains(text, "<|end_header_id|>")) return {Variant::Llama3, true};
    return unrecognised;
}

enum class Role { System, User, Assistant };

Role parse_role(const ChatMessage& message, size_t index) {
    if (message.role == "system") return Role::System;
    if (message.role == "user") return Role::User;
    if (message.role == "assistant") return Role::Assistant;
    throw Error("chat message " + std::to_string(index) + " has role \"" + message.role +
                "\"; expected system, user or assistant");
}

void render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
    for (const ChatMessage& m : messages) {
        out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
    }
    if (add_generation_prompt) out.append("<|im_start|>assistant\n");
}

void render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
    for (const ChatMessage& m : messages) {
        out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
        out.append(trim(m.content)).append("<|eot_id|>");
    }
    if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama-2 and its variants. The first "[INST] " is written up front (it
// follows the BOS the tokenizer adds); each later turn opens its own.
void render_llama2(std::span<const ChatMessage> messages, Variant variant, std::string_view eos, std::string& out) {
    const bool system_block = variant != Variant::Llama2NoSys;
    const bool bos_in_history = variant == Variant::Llama2SysBos;
    const bool strip = variant == Variant::Llama2SysStrip;
    bool inside_turn = true;
    out.append("[INST] ");
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string_view content = strip ? trim(messages[i].content) : std::string_view(messages[i].content);
        if (!inside_turn) {
            inside_turn = true;
            out.append(bos_in_history ? "<s>[INST] " : "[INST] ");
        }
        switch (parse_role(messages[i], i)) {
        case Role::System:
            if (system_block) {
                out.append("<<SYS>>\n").append(content).append("\n<</SYS>>\n\n");
            } else {
                out.append(content).append("\n");  // no system slot: it opens the first user turn
            }
            break;
        case Role::User: out.append(content).append(" [/INST]"); break;
        case Role::Assistant:
            out.append(content).append(eos);
            inside_turn = false;
            break;
        }
    }
}

// Mistral's official v1 / v3 / v3-tekken spellings.
void render_mistral_v1_v3(std::span<const ChatMessage> messages, Variant variant, std::string_view eos,
                          std::string& out) {
    const std::string_view leading_space = variant == Variant::MistralV1 ? " " : "";
    const std::string_view trailing_space = variant == Variant::MistralV3Tekken ? "" : " ";
    const bool trim_assistant = variant == Variant::MistralV3;
    bool inside_turn = false;
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string_view content = messages[i].content;
        if (!inside_turn) {
            out.append(leading_space).append("[INST]").append(trailing_space);
            inside_turn = true;
        }
        switch (parse_role(messages[i], i)) {
        case Role::System: out.append(content).append("\n\n"); break;
        case Role::User: out.append(content).append(leading_space).append("[/INST]"); break;
        case Role::Assistant:
            out.append(trailing_space).append(trim_assistant ? trim(content) : content).append(eos);
            inside_turn = false;
            break;
        }
    }
}

void render_mistral_v7(std::span<const ChatMessage> messages, Variant variant, std::string_view eos,
                       std::string& out) {
    const std::string_view space = variant == Variant::MistralV7 ? " " : "";
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string_view content = messages[i].content;
        switch (parse_role(messages[i], i)) {
        case Role::System: out.append("[SYSTEM_PROMPT]").append(space).append(content).append("[/SYSTEM_PROMPT]"); break;
        case Role::User: out.append("[INST]").append(space).append(content).append("[/INST]"); break;
        case Role::Assistant: out.append(space).append(content).append(eos); break;
        }
    }
}

// Zephyr and Phi-3 differ only in what closes a turn.
void render_role_tags(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string_view end_of_turn,
                      std::string& out) {
    for (const ChatMessage& m : messages) {
        out.append("<|").append(m.role).append("|>\n").append(m.content).append(end_of_turn).append("\n");
    }
    if (add_generation_prompt) out.append("<|assistant|>\n");
}

// Gemma has no system turn: system contents (trimmed, concatenated) open
// the next user turn, followed by a blank line. "assistant" is "model".
void render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
    std::string system_prompt;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Role role = parse_role(messages[i], i);
        if (role == Role::System) {
            system_prompt.append(trim(messages[i].content));
            continue;
        }
        out.append("<start_of_turn>").append(role == Role::Assistant ? "model" : "user").append("\n");
        if (!system_prompt.empty() && role == Role::User) {
            out.append(system_prompt).append("\n\n");
            system_prompt.clear();
        }
        out.append(trim(messages[i].content)).append("<end_of_turn>\n");
    }
    if (add_generation_prompt) out.append("<start_of_turn>model\n");
}

void render_plain(std::span<const ChatMessage> messages, std::string& out) {
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.content.empty()) continue;
        if (parse_role(m, i) != Role::Assistant && !out.empty()) out.append("\n\n");
        out.append(m.content);
    }
}

}  // namespace

ChatTemplate::ChatTemplate() = default;

ChatTemplate::ChatTemplate(Variant variant, bool recognised, std::string_view eos_text)
    : variant_(variant), recognised_(recognised), eos_text_(eos_text) {}

ChatTemplate ChatTemplate::from_gguf_template(std::string_view jinja_text, std::string_view eos_text) {
    if (jinja_text.empty()) return plain();
    if (const VariantInfo* named = find_by_name(jinja_text)) return ChatTemplate(named->variant, true, eos_text);
    const Detection detection = detect(jinja_text);
    ChatTemplate t(detection.variant, detection.recognised, eos_text);
    const auto has = [&](std::string_view s) { return jinja_text.find(s) != std::string_view::npos; };
    if (t.variant_ == Variant::ChatML && has("<tools>") && has("<tool_call>") && has("You are Qwen, created by Alibaba Cloud"))
        t.tool_format_ = ToolFormat::QwenHermes;
    if (t.variant_ == Variant::Llama3 && has("Environment: ipython") && has("tools_in_user_message") && has("\"parameters\": "))
        t.tool_format_ = ToolFormat::Llama3Json;
    return t;
}

ChatTemplate ChatTemplate::by_name(std::string_view name, std::string_view eos_text) {
    if (const VariantInfo* named = find_by_name(name)) return ChatTemplate(named->variant, true, eos_text);
    std::string valid;
    for (size_t i = 0; i < kVariants.size(); ++i) {
        valid.append(i == 0 ? "" : ", ").append(i < kFamilyCount ? kVariants[i].family : kVariants[i].variant_name);
    }
    throw Error("unknown chat template \"" + std::string(name) + "\"; expected one of " + valid);
}

ChatTemplate ChatTemplate::plain() { return ChatTemplate(); }

std::string_view ChatTemplate::name() const { return info(variant_).family; }

std::string_view ChatTemplate::variant_name() const { return info(variant_).variant_name; }

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    if (messages.empty()) throw Error("chat template " + std::string(name()) + ": no messages to render");
    size_t size = 64;  // the markup around the contents, roughly
    for (size_t i = 0; i < messages.size(); ++i) {
        parse_role(messages[i], i);  // every role is checked before anything is written
        size += messages[i].role.size() + messages[i].content.size() + 32;
    }
    std::string out;
    out.reserve(size);
    const auto eos_or = [this](std::string_view fallback) {
        return eos_text_.empty() ? fallback : std::string_view(eos_text_);
    };
    switch (variant_) {
    case Variant::ChatML: render_chatml(messages, add_generation_prompt, out); break;
    case Variant::Llama3: render_llama3(messages, add_generation_prompt, out); break;
    case Variant::Llama2Sys:
    case Variant::Llama2SysBos:
    case Variant::Llama2SysStrip:
    case Variant::Llama2NoSys: render_llama2(messages, variant_, eos_or("</s>"), out); break;
    case Variant::MistralV1:
    case Variant::MistralV3:
    case Variant::MistralV3Tekken: render_mistral_v1_v3(messages, variant_, eos_or("</s>"), out); break;
    case Variant::MistralV7:
    case Variant::MistralV7Tekken: render_mistral_v7(messages, variant_, eos_or("</s>"), out); break;
    case Variant::Zephyr: render_role_tags(messages, add_generation_prompt, eos_or("<|endoftext|>"), out); break;
    case Variant::Phi3: render_role_tags(messages, add_generation_prompt, "<|end|>", out); break;
    case Variant::Gemma: render_gemma(messages, add_generation_prompt, out); break;
    case Variant::Plain: render_plain(messages, out); break;
    }
    return out;
}

}  // namespace specd
