// Chat templates: the exact text of each format for a system + user +
// assistant + user conversation, llama.cpp's own test conversation through
// every variant (expected strings as in llama.cpp's tests/test-chat-template
// .cpp), detection from excerpts of real templates, and the errors.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/error.h"

using specd::ChatMessage;
using specd::ChatTemplate;
using Variant = specd::ChatTemplate::Variant;

namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
};

// llama.cpp's test conversation: the padded reply shows which formats trim.
const std::vector<ChatMessage> kLlamaCppConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

std::string render(std::string_view name, const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) {
    return ChatTemplate::by_name(name).render(messages, add_generation_prompt);
}

// Excerpts of real tokenizer.chat_template texts (the parts that matter for
// detection, as they appear in the models' tokenizer_config.json).
constexpr std::string_view kOpenHermesChatML =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
constexpr std::string_view kQwen2ChatML =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
constexpr std::string_view kLlama3Instruct =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";
constexpr std::string_view kLlama2Chat =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";
constexpr std::string_view kMistralInstructV02 =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})";
constexpr std::string_view kFusionNet =
    R"({%- for idx in range(0, messages|length) -%}{%- if messages[idx]['role'] == 'user' -%}{%- if idx > 1 -%}{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}{%- else -%}{{- messages[idx]['content'] + ' [/INST]' -}}{%- endif -%}{% elif messages[idx]['role'] == 'system' %}{{- '[INST] <<SYS>>\n' + messages[idx]['content'] + '\n<</SYS>>\n\n' -}}{%- elif messages[idx]['role'] == 'assistant' -%}{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}{% endif %}{% endfor %})";
constexpr std::string_view kMistralV7 =
    R"({{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %})";
constexpr std::string_view kZephyr7bBeta =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
constexpr std::string_view kGemma7bIt =
    R"({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})";
constexpr std::string_view kPhi3Mini =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %})";
// Formats llama.cpp knows but this file does not render.
constexpr std::string_view kPhi4 =
    R"({% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% endif %}{% endfor %})";
constexpr std::string_view kGlmEdge =
    R"({% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}{% elif item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' %}<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>)";
constexpr std::string_view kVicuna =
    R"({%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%})";

}  // namespace

TEST_CASE("chatml renders each message between im_start and im_end and opens the assistant turn", "[chat_template]") {
    CHECK(render("chatml", kConversation) ==
          "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\nHi there<|im_end|>\n"
          "<|im_start|>user\nWho are you<|im_end|>\n"
          "<|im_start|>assistant\n");
    CHECK(render("chatml", kConversation, false) ==
          "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
          "<|im_start|>user\nHello<|im_end|>\n"
          "<|im_start|>assistant\nHi there<|im_end|>\n"
          "<|im_start|>user\nWho are you<|im_end|>\n");
}

TEST_CASE("llama3 renders header ids, a blank line and eot_id per message", "[chat_template]") {
    CHECK(render("llama3", kConversation) ==
          "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("llama2 puts the system message in <<SYS>> inside the first INST tag and ends replies with </s>", "[chat_template]") {
    const std::string expected =
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
        "[INST] Who are you [/INST]";
    CHECK(render("llama2", kConversation) == expected);
    // The user turn already ends the way the reply starts.
    CHECK(render("llama2", kConversation, false) == expected);
    CHECK(ChatTemplate::by_name("llama2").variant() == Variant::Llama2Sys);
}

TEST_CASE("zephyr closes every turn with the EOS text, llama.cpp's <|endoftext|> by default", "[chat_template]") {
    CHECK(render("zephyr", kConversation) ==
          "<|system|>\nYou are a helpful assistant<|endoftext|>\n"
          "<|user|>\nHello<|endoftext|>\n"
          "<|assistant|>\nHi there<|endoftext|>\n"
          "<|user|>\nWho are you<|endoftext|>\n"
          "<|assistant|>\n");
    // zephyr-7b-beta's EOS is </s> (Mistral vocabulary).
    CHECK(ChatTemplate::by_name("zephyr", "</s>").render(kConversation) ==
          "<|system|>\nYou are a helpful assistant</s>\n"
          "<|user|>\nHello</s>\n"
          "<|assistant|>\nHi there</s>\n"
          "<|user|>\nWho are you</s>\n"
          "<|assistant|>\n");
}

TEST_CASE("gemma merges the system message into the first user turn and calls the assistant model", "[chat_template]") {
    CHECK(render("gemma", kConversation) ==
          "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
          "<start_of_turn>model\nHi there<end_of_turn>\n"
          "<start_of_turn>user\nWho are you<end_of_turn>\n"
          "<start_of_turn>model\n");
}

TEST_CASE("phi3 renders role tags and <|end|> per message", "[chat_template]") {
    CHECK(render("phi3", kConversation) ==
          "<|system|>\nYou are a helpful assistant<|end|>\n"
          "<|user|>\nHello<|end|>\n"
          "<|assistant|>\nHi there<|end|>\n"
          "<|user|>\nWho are you<|end|>\n"
          "<|assistant|>\n");
}

TEST_CASE("plain joins system and user messages as paragraphs and continues replies inline", "[chat_template]") {
    const std::vector<ChatMessage> story = {
        {"system", "A story."},
        {"user", "Once upon a time"},
        {"assistant", " there was a cat."},
        {"user", "One day"},
    };
    const ChatTemplate plain = ChatTemplate::plain();
    CHECK(plain.render(story) == "A story.\n\nOnce upon a time there was a cat.\n\nOne day");
    CHECK(plain.render(story, false) == "A story.\n\nOnce upon a time there was a cat.\n\nOne day");
    // One prompt is just the prompt, so the base model continues it.
    const std::vector<ChatMessage> one = {{"user", "Once upon a time"}};
    CHECK(plain.render(one) == "Once upon a time");
    // Empty contents leave no stray separators.
    const std::vector<ChatMessage> empty_system = {{"system", ""}, {"user", "Hi"}};
    CHECK(plain.render(empty_system) == "Hi");
    CHECK(plain.name() == "plain");
    CHECK(plain.recognised());
    CHECK(ChatTemplate().name() == "plain");
}

TEST_CASE("every variant renders llama.cpp's test conversation as llama.cpp does", "[chat_template]") {
    struct Case {
        std::string_view variant;
        std::string_view expected;
    };
    const Case cases[] = {
        {"chatml",
         "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
         "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
         "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
         "<|im_start|>assistant\n"},
        {"llama2-no-sys",
         "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   "
         "</s>[INST] Another question [/INST]"},
        {"llama2-sys-bos",
         "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you [/INST]"
         "   I am an assistant   </s><s>[INST] Another question [/INST]"},
        {"llama2-sys-strip",
         "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]"
         "I am an assistant</s>[INST] Another question [/INST]"},
        {"mistral-v1",
         " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
         "assistant   </s> [INST] Another question [/INST]"},
        {"mistral-v3",
         "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
         "[INST] Another question[/INST]"},
        {"mistral-v3-tekken",
         "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   "
         "</s>[INST]Another question[/INST]"},
        {"mistral-v7",
         "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
         "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
        {"zephyr",
         "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi "
         "there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
         "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
        {"gemma",
         "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
         "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
         "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
        {"llama3",
         "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user"
         "<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant"
         "<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
         "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"phi3",
         "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
         "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
         "question<|end|>\n<|assistant|>\n"},
    };
    for (const Case& c : cases) {
        INFO("variant " << c.variant);
        const ChatTemplate tmpl = ChatTemplate::by_name(c.variant);
        CHECK(tmpl.variant_name() == c.variant);
        CHECK(tmpl.render(kLlamaCppConversation) == c.expected);
    }
}

TEST_CASE("real templates are recognised by their text as llama.cpp does", "[chat_template]") {
    struct Case {
        std::string_view model;
        std::string_view text;
        std::string_view name;
        std::string_view variant;
    };
    const Case cases[] = {
        {"OpenHermes-2.5", kOpenHermesChatML, "chatml", "chatml"},
        {"Qwen2", kQwen2ChatML, "chatml", "chatml"},
        {"Llama-3-Instruct", kLlama3Instruct, "llama3", "llama3"},
        {"Llama-2-chat (strip wins over bos_token, as in llama.cpp)", kLlama2Chat, "llama2", "llama2-sys-strip"},
        {"Mistral-7B-Instruct-v0.2 (no <<SYS>>)", kMistralInstructV02, "llama2", "llama2-no-sys"},
        {"FusionNet (bos_token + '[INST]')", kFusionNet, "llama2", "llama2-sys-bos"},
        {"Mistral-Large-2411", kMistralV7, "llama2", "mistral-v7"},
        {"zephyr-7b-beta", kZephyr7bBeta, "zephyr", "zephyr"},
        {"gemma-7b-it", kGemma7bIt, "gemma", "gemma"},
        {"Phi-3-mini", kPhi3Mini, "phi3", "phi3"},
        {"a template that is only a name", "gemma", "gemma", "gemma"},
    };
    for (const Case& c : cases) {
        INFO(c.model);
        const ChatTemplate tmpl = ChatTemplate::from_gguf_template(c.text);
        CHECK(tmpl.recognised());
        CHECK(tmpl.name() == c.name);
        CHECK(tmpl.variant_name() == c.variant);
    }
}

TEST_CASE("a detected zephyr template writes the EOS text it is given", "[chat_template]") {
    const std::vector<ChatMessage> one = {{"user", "Hello"}};
    CHECK(ChatTemplate::from_gguf_template(kZephyr7bBeta, "</s>").render(one) == "<|user|>\nHello</s>\n<|assistant|>\n");
    CHECK(ChatTemplate::from_gguf_template(kLlama2Chat, "<eos>").render(std::vector<ChatMessage>{
              {"user", "a"}, {"assistant", "b"}, {"user", "c"}}) == "[INST] a [/INST]b<eos>[INST] c [/INST]");
}

TEST_CASE("templates llama.cpp attributes to other formats fall back to plain, unrecognised", "[chat_template]") {
    for (const std::string_view text : {kPhi4, kGlmEdge, kVicuna, std::string_view("{{ messages }} some custom template")}) {
        INFO(text);
        const ChatTemplate tmpl = ChatTemplate::from_gguf_template(text);
        CHECK_FALSE(tmpl.recognised());
        CHECK(tmpl.name() == "plain");
        CHECK(tmpl.variant() == Variant::Plain);
    }
    // No template at all (a base model) is plain by design, not a failure.
    const ChatTemplate none = ChatTemplate::from_gguf_template("");
    CHECK(none.recognised());
    CHECK(none.name() == "plain");
}

TEST_CASE("a role other than system, user or assistant is an error naming it", "[chat_template]") {
    const std::vector<ChatMessage> messages = {{"user", "Hello"}, {"tool", "42"}};
    for (const std::string_view name : {"chatml", "llama2", "gemma", "plain", "mistral-v7"}) {
        INFO(name);
        CHECK_THROWS_AS(ChatTemplate::by_name(name).render(messages), specd::Error);
        CHECK_THROWS_WITH(ChatTemplate::by_name(name).render(messages),
                          Catch::Contains("\"tool\"") && Catch::Contains("message 1"));
    }
}

TEST_CASE("rendering no messages is an error", "[chat_template]") {
    const std::vector<ChatMessage> none;
    CHECK_THROWS_AS(ChatTemplate::by_name("chatml").render(none), specd::Error);
    CHECK_THROWS_AS(ChatTemplate::plain().render(none), specd::Error);
}

TEST_CASE("an unknown template name is an error listing the valid names", "[chat_template]") {
    CHECK_THROWS_AS(ChatTemplate::by_name("alpaca"), specd::Error);
    CHECK_THROWS_WITH(ChatTemplate::by_name("alpaca"),
                      Catch::Contains("\"alpaca\"") &&
                          Catch::Contains("chatml, llama3, llama2, zephyr, gemma, phi3, plain") &&
                          Catch::Contains("mistral-v7-tekken"));
    for (const std::string_view name : {"chatml", "llama3", "llama2", "zephyr", "gemma", "phi3", "plain"}) {
        CHECK(ChatTemplate::by_name(name).name() == name);
    }
}
