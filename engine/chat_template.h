// Chat templates: turn a list of chat messages into the prompt text a model
// was trained on. There is no Jinja interpreter: like llama.cpp's
// llm_chat_detect_template, the template text stored in the GGUF
// (tokenizer.chat_template) is recognised by the special strings it contains,
// and the recognised format is rendered by hand-written code that produces
// what llama.cpp's llm_chat_apply_template produces for it.
//
// Detection, in llama.cpp's order (the first match wins):
//   1. the text is one of the names by_name() accepts ("chatml", ...)
//   2. "<|im_start|>"                       → chatml (unless "<|im_sep|>",
//                                             Phi-4, or "<end_of_utterance>",
//                                             SmolVLM: unrecognised)
//   3. starts with "mistral" or has "[INST]" → llama2 (Variant says which)
//   4. "<|assistant|>" and "<|end|>"        → phi3
//   5. "<|user|>" whose turn ends with the EOS (eos_token, "</s>" or
//      "<|endoftext|>" inside the same {{ }} expression) → zephyr
//   6. "<|user|>" and "<|endoftext|>"       → zephyr (llama.cpp's own rule)
//   7. "<start_of_turn>"                    → gemma
//   8. "<|start_header_id|>" and "<|end_header_id|>" → llama3
// Formats llama.cpp checks in between that this file does not render
// (ChatGLM, Falcon-3, GLM-Edge, Monarch, Orion, OpenChat, Vicuna, DeepSeek,
// Command-R) are reported as unrecognised, so they never fall through to a
// wrong format further down the list. Rule 5 is the one deviation: current
// llama.cpp sends HuggingFaceH4/zephyr-7b-beta's template (which closes turns
// with eos_token, not a literal "<|endoftext|>") to its Falcon-3/GLM-Edge
// branch; here it is Zephyr, as its model card says.
//
// The rendered text holds the format's special tokens written out
// ("<|im_start|>", "</s>"): encode it with parse_special = true. It never
// starts with the BOS: the tokenizer adds that (Tokenizer::encode add_bos).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specd {

// A function call an assistant turn made (OpenAI's tool_calls[].function).
struct ChatToolCall {
    std::string name;
    std::string arguments;  // JSON text, serialised as the template's tojson writes it (", " and ": ")
};

struct ChatMessage {
    std::string role;     // "system", "user" or "assistant"; "tool" in render_with_tools()
    std::string content;
    std::vector<ChatToolCall> tool_calls = {};  // assistant turns, render_with_tools() only
};

class ChatTemplate {
public:
    // The "[INST]" family has several spellings; llama.cpp tells them apart
    // by the template text and so does from_gguf_template(). name() is
    // "llama2" for all of them, variant() and variant_name() say which.
    enum class Variant {
        ChatML,           // "<|im_start|>{role}\n{content}<|im_end|>\n"
        Llama3,           // "<|start_header_id|>{role}<|end_header_id|>\n\n{trimmed}<|eot_id|>"
        Llama2Sys,        // "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]{assistant}</s>"
        Llama2SysBos,     // as Llama2Sys, later turns start "<s>[INST] " (template writes bos_token + '[INST]')
        Llama2SysStrip,   // as Llama2Sys with every content trimmed (template calls content.strip())
        Llama2NoSys,      // no <<SYS>> in the template: the system content + "\n" opens the first turn
        MistralV1,        // " [INST] {system}\n\n{user} [/INST] {assistant}</s>"
        MistralV3,        // "[INST] {system}\n\n{user}[/INST] {trimmed assistant}</s>"
        MistralV3Tekken,  // "[INST]{system}\n\n{user}[/INST]{assistant}</s>"
        MistralV7,        // "[SYSTEM_PROMPT] {system}[/SYSTEM_PROMPT][INST] {user}[/INST] {assistant}</s>"
        MistralV7Tekken,  // as MistralV7 without the spaces
        Zephyr,           // "<|{role}|>\n{content}{eos}\n"
        Gemma,            // "<start_of_turn>{user|model}\n{trimmed}<end_of_turn>\n", system merged into the next user turn
        Phi3,             // "<|{role}|>\n{content}<|end|>\n"
        Plain,            // no markup: see plain()
    };

    // The plain template (as plain()).
    ChatTemplate();

    // Recognises `jinja_text` as described at the top of this file. Empty
    // text (the model has no template) gives plain() with recognised() true;
    // text that is not recognised gives plain() with recognised() false, so
    // the caller can warn that the chat will likely go badly.
    // eos_text: the text of the model's EOS token, written where the
    // template writes eos_token (after assistant turns in the "[INST]"
    // formats, after every turn in zephyr). Empty (the default): llama.cpp's
    // fixed text, "</s>" for "[INST]", "<|endoftext|>" for zephyr.
    static ChatTemplate from_gguf_template(std::string_view jinja_text, std::string_view eos_text = {});

    // By name: the names name() returns ("chatml", "llama3", "llama2",
    // "zephyr", "gemma", "phi3", "plain"; "llama2" is Variant::Llama2Sys,
    // the format Meta documents for Llama-2-chat) or the ones
    // variant_name() returns. Throws specd::Error listing the valid names
    // for any other. eos_text as for from_gguf_template().
    static ChatTemplate by_name(std::string_view name, std::string_view eos_text = {});

    // For base models without a template (e.g. stories15M): no markup, the
    // text reads as a document that the model simply continues. A system or
    // user message starts a new paragraph ("\n\n" before it unless it comes
    // first); an assistant message is appended directly to the text before
    // it, since it was generated as that text's continuation (so each turn's
    // prompt starts with the previous prompt plus its reply). Empty contents
    // are skipped; contents are not trimmed. Nothing is added at the end,
    // whatever add_generation_prompt says: the reply continues the last
    // message. E.g. system "A story.", user "Once upon a time", assistant
    // " there was a cat.", user "One day" → "A story.\n\nOnce upon a time
    // there was a cat.\n\nOne day".
    static ChatTemplate plain();

    // The prompt for `messages`. add_generation_prompt: end with the opening
    // of an assistant turn (e.g. "<|im_start|>assistant\n") so that the
    // model writes the reply; formats whose user turn already ends that way
    // ("[INST]" family, plain) ignore it, as llama.cpp does. Throws
    // specd::Error for an empty list or a role other than system, user or
    // assistant (naming the role and its message's index).
    std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

    // How the template offers tools to the model and how the model calls
    // them. QwenHermes: Qwen2.5's template (a ChatML template with <tools>
    // and <tool_call>, recognised by its default system prompt): tool
    // definitions as JSON lines in <tools></tools> in the system turn, calls
    // as <tool_call>{"name": ..., "arguments": ...}</tool_call>, results as
    // <tool_response> in a user turn (engine/chat_tools.cpp). Llama3Json:
    // Llama 3.1's template (3.2's and 3.3's render the same without
    // builtin tools; recognised by its "Environment: ipython" and
    // tools_in_user_message): the definitions, indented JSON, open the
    // first user turn; a call is the whole reply, {"name": ...,
    // "parameters": {...}}, one per turn; results are "ipython" turns.
    enum class ToolFormat { None, QwenHermes, Llama3Json };
    ToolFormat tool_format() const { return tool_format_; }
    // render() for a conversation with tools: `tools_json` holds each tool
    // definition as JSON text ({"type": "function", "function": {...}},
    // serialised as tojson writes it); messages may have role "tool" and
    // assistant tool_calls. Renders exactly what the model's Jinja template
    // renders (tested against Jinja2 itself). Throws specd::Error naming the
    // template when tool_format() is None, and for what the template itself
    // refuses (Llama3Json: two calls in one turn, tools without a first
    // user turn to open).
    std::string render_with_tools(std::span<const ChatMessage> messages, std::span<const std::string> tools_json,
                                  bool add_generation_prompt = true) const;

    // "chatml", "llama3", "llama2", "zephyr", "gemma", "phi3" or "plain".
    std::string_view name() const;
    // The finer name: name() except in the "[INST]" family, which gives
    // "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "llama2-no-sys",
    // "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7" or
    // "mistral-v7-tekken" (llama.cpp's names, except that its "llama2" is
    // "llama2-no-sys" here).
    std::string_view variant_name() const;
    Variant variant() const { return variant_; }
    // False only when from_gguf_template() fell back to plain for a
    // non-empty template it did not recognise.
    bool recognised() const { return recognised_; }

private:
    ChatTemplate(Variant variant, bool recognised, std::string_view eos_text);

    Variant variant_ = Variant::Plain;
    bool recognised_ = true;
    ToolFormat tool_format_ = ToolFormat::None;
    std::string eos_text_;  // empty: the format's llama.cpp default
};

}  // namespace specd
