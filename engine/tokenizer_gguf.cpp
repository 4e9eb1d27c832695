// Tokenizer::from_gguf: the tokenizer.ggml.* keys → VocabData. Kept apart
// from tokenizer.cpp so the tokenizer itself does not depend on the reader.
#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"

namespace specd {

namespace {

// A uint32 special-token id key, if present. 0xFFFFFFFF is how some
// converters write -1 ("none"); any other value must be a token id.
void read_token_id(const gguf::File& file, std::string_view key, int32_t n_vocab, int32_t& id) {
    const std::optional<uint32_t> value = file.get_u32_opt(key);
    if (!value) return;
    if (*value == 0xFFFFFFFFu) {
        id = -1;
        return;
    }
    if (*value >= static_cast<uint32_t>(n_vocab)) {
        throw Error(file.path() + ": " + std::string(key) + " = " + std::to_string(*value) +
                    " is out of range (the vocabulary has " + std::to_string(n_vocab) + " tokens)");
    }
    id = static_cast<int32_t>(*value);
}

void read_flag(const gguf::File& file, std::string_view key, bool& flag) {
    if (const gguf::Value* value = file.find(key)) flag = value->b;
}

// The end-of-generation rules of llama.cpp's llama_vocab::impl::load: the
// ids the file names, then tokens found by their text; a Normal or
// UserDefined token among them becomes Control (as llama.cpp overrides its
// attribute: it is then matched in text only with parse_special and not
// rendered by default).
void find_end_of_generation(const gguf::File& file, VocabData& v) {
    const auto n_vocab = static_cast<int32_t>(v.tokens.size());
    std::unordered_map<std::string_view, int32_t> id_by_text;
    id_by_text.reserve(v.tokens.size());
    for (int32_t i = 0; i < n_vocab; ++i) id_by_text.emplace(v.tokens[static_cast<size_t>(i)], i);
    const auto find_text = [&](std::string_view text) {
        const auto it = id_by_text.find(text);
        return it == id_by_text.end() ? -1 : it->second;
    };
    std::vector<int32_t> forced_control;
    // The first of `texts` the vocabulary has, when the key gave none.
    const auto by_text = [&](int32_t& id, std::initializer_list<std::string_view> texts) {
        if (id >= 0) return;
        for (const std::string_view text : texts) {
            if (const int32_t found = find_text(text); found >= 0) {
                id = found;
                forced_control.push_back(found);
                return;
            }
        }
    };
    if (v.eot_id < 0) {
        by_text(v.eot_id, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                           "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                           "<end_of_utterance>"});
    }
    int32_t eom = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    read_token_id(file, "tokenizer.ggml.eom_token_id", n_vocab, eom);
    read_token_id(file, "tokenizer.ggml.fim_pad_token_id", n_vocab, fim_pad);
    read_token_id(file, "tokenizer.ggml.fim_rep_token_id", n_vocab, fim_rep);
    read_token_id(file, "tokenizer.ggml.fim_sep_token_id", n_vocab, fim_sep);
    by_text(eom, {"<|eom_id|>"});
    by_text(fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    by_text(fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    by_text(fim_sep, {"<|file_sep|>"});

    std::vector<int32_t> eog;
    const auto add = [&](int32_t id) {
        if (id >= 0 && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
    };
    add(fim_pad);
    add(fim_rep);
    add(fim_sep);
    static constexpr std::array<std::string_view, 22> kEndTexts = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<｜end▁of▁sentence｜>", "[e~["};
    for (const std::string_view text : kEndTexts) {
        if (const int32_t id = find_text(text); id >= 0) {
            add(id);
            forced_control.push_back(id);
        }
    }
    add(v.eos_id);
    add(v.eot_id);
    add(eom);
    // gpt-oss / solar-open: "<|end|>" ends a message, not the generation, when
    // "<|return|>" and "<|call|>" (or "<|calls|>" and "<|flush|>") exist.
    const auto in_eog = [&](std::string_view text) {
        const int32_t id = find_text(text);
        return id >= 0 && std::find(eog.begin(), eog.end(), id) != eog.end();
    };
    const bool harmony = in_eog("<|return|>") && in_eog("<|call|>");
    const bool solar = in_eog("<|calls|>") && in_eog("<|flush|>");
    if (in_eog("<|end|>") && (harmony || solar)) {
        const int32_t end = find_text("<|end|>");
        eog.erase(std::find(eog.begin(), eog.end(), end));
        v.token_types[static_cast<size_t>(end)] = static_cast<int32_t>(TokenType::UserDefined);
        std::erase(forced_control, end);
    }
    // Gemma 4: "</s>" is text when "<|tool_response>" exists.
    if (in_eog("<|tool_response>") && in_eog("</s>")) {
        const int32_t s = find_text("</s>");
        eog.erase(std::find(eog.begin(), eog.end(), s));
        v.token_types[static_cast<size_t>(s)] = static_cast<int32_t>(TokenType::Normal);
        std::erase(forced_control, s);
    }
    for (const int32_t id : forced_control) {
        int32_t& type = v.token_types[static_cast<size_t>(id)];
        if (type == static_cast<int32_t>(TokenType::Normal) || type == static_cast<int32_t>(TokenType::UserDefined)) {
            type = static_cast<int32_t>(TokenType::Control);
        }
    }
    for (const int32_t id : eog) {
        if (id != v.eos_id && id != v.eot_id) v.eog_ids.push_back(id);
    }
}

// llama.cpp's per-model token attributes (the end of llama_vocab::impl::load),
// chosen by general.name, tokenizer.ggml.pre and general.architecture.
void find_strip_attributes(const gguf::File& file, VocabData& v) {
    const auto lower = [](std::string s) {
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
    };
    const std::string name = lower(file.get_string_opt("general.name").value_or(""));
    const std::string arch = file.get_string_opt("general.architecture").value_or("");
    const std::string pre = file.get_string_opt("tokenizer.ggml.pre").value_or("");
    const auto contains = [](const std::string& s, std::initializer_list<std::string_view> parts) {
        for (const std::string_view p : parts) {
            if (s.find(p) != std::string::npos) return true;
        }
        return false;
    };
    const auto find_text = [&](std::string_view text) -> int32_t {
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            if (v.tokens[i] == text) return static_cast<int32_t>(i);
        }
        return -1;
    };
    const bool masks_left = contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
                            contains(arch, {"nomic-bert-moe", "jina-bert-v3"});
    if (masks_left) {
        if (const int32_t mask = find_text("<mask>"); mask >= 0) v.lstrip_ids.push_back(mask);
    } else if (contains(name, {"phi-3", "phi3"})) {
        // Every special token strips on its right, and "</s>"; not "<unk>", "<s>", "<|endoftext|>".
        std::vector<uint8_t> rstrip(v.tokens.size(), 0);
        for (size_t i = 0; i < v.tokens.size(); ++i) {
            const auto type = static_cast<TokenType>(v.token_types[i]);
            rstrip[i] = type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown;
        }
        if (const int32_t id = find_text("</s>"); id >= 0) rstrip[static_cast<size_t>(id)] = 1;
        for (const std::string_view keep : {"<unk>", "<s>", "<|endoftext|>"}) {
            if (const int32_t id = find_text(keep); id >= 0) rstrip[static_cast<size_t>(id)] = 0;
        }
        for (size_t i = 0; i < rstrip.size(); ++i) {
            if (rstrip[i]) v.rstrip_ids.push_back(static_cast<int32_t>(i));
        }
    } else if (contains(name, {"modern-bert"})) {
        if (const int32_t mask = find_text("[MASK]"); mask >= 0) v.lstrip_ids.push_back(mask);
    }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
    const std::string& path = file.path();
    constexpr std::string_view kModel = "tokenizer.ggml.model";
    if (!file.has(kModel)) throw Error(path + ": missing key tokenizer.ggml.model (the file has no tokenizer)");
    const std::string model = file.get_string(kModel);

    VocabData v;  // llama.cpp's SPM defaults: bos 1, eos 2, unk 0, add_bos, add_space_prefix
    if (model == "gpt2" || model == "gemma4") {
        // llama.cpp's BPE defaults: bos = eos = 11 (Gemma 4: none), no unk, nothing added.
        v.kind = VocabKind::Bpe;
        v.bos_id = model == "gemma4" ? -1 : 11;
        v.eos_id = v.bos_id;
        v.unk_id = -1;
        v.add_bos = false;
        v.add_space_prefix = false;
        constexpr std::string_view kMerges = "tokenizer.ggml.merges";
        if (!file.has(kMerges)) {
            throw Error(path + ": tokenizer.ggml.model is \"" + model +
                        "\" but tokenizer.ggml.merges is missing (a BPE vocabulary needs its merges)");
        }
        v.merges = file.get_string_array(kMerges);
        if (v.merges.empty()) throw Error(path + ": tokenizer.ggml.merges is empty");
        if (model == "gemma4") {
            v.pre = "gemma4";  // llama.cpp sets it whatever the file says
        } else if (const std::optional<std::string> pre = file.get_string_opt("tokenizer.ggml.pre")) {
            v.pre = *pre;
        } else {
            v.pre = "default";
            v.warnings.push_back(path + ": tokenizer.ggml.pre is missing; using llama.cpp's \"default\" pre-tokenizer "
                                 "(tokens may differ from the model's own: consider converting the model again)");
        }
        try {
            const PreTokenizerTraits traits = PreTokenizer::traits_of(v.pre);
            if (traits.add_bos_by_default) v.add_bos = true;
            if (traits.no_bos) v.bos_id = -1;
        } catch (const Error& e) {
            throw Error(path + ": " + e.what());
        }
    } else if (model != "llama") {
        throw Error(path + ": tokenizer.ggml.model is \"" + model +
                    "\"; supported: \"llama\" (SentencePiece), \"gpt2\" (byte-level BPE) and \"gemma4\"");
    }

    constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
    if (!file.has(kTokens)) throw Error(path + ": missing key tokenizer.ggml.tokens");
    v.tokens = file.get_string_array(kTokens);
    const size_t n = v.tokens.size();
    if (n == 0) throw Error(path + ": tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(INT32_MAX)) throw Error(path + ": tokenizer.ggml.tokens has too many tokens");
    const auto n_vocab = static_cast<int32_t>(n);

    // Scores and types are optional, as in llama.cpp: 0 and Normal.
    constexpr std::string_view kScores = "tokenizer.ggml.scores";
    if (file.has(kScores)) {
        v.scores = file.get_f32_array(kScores);
        if (v.scores.size() != n) {
            throw Error(path + ": tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " +
                        std::to_string(n) + " tokens");
        }
    }
    constexpr std::string_view kTypes = "tokenizer.ggml.token_type";
    if (file.has(kTypes)) {
        v.token_types = file.get_i32_array(kTypes);
        if (v.token_types.size() != n) {
            throw Error(path + ": tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) +
                        " entries for " + std::to_string(n) + " tokens");
        }
    }

    read_token_id(file, "tokenizer.ggml.bos_token_id", n_vocab, v.bos_id);
    read_token_id(file, "tokenizer.ggml.eos_token_id", n_vocab, v.eos_id);
    read_token_id(file, "tokenizer.ggml.unknown_token_id", n_vocab, v.unk_id);
    read_token_id(file, "tokenizer.ggml.padding_token_id", n_vocab, v.pad_id);
    read_token_id(file, "tokenizer.ggml.eot_token_id", n_vocab, v.eot_id);
    read_flag(file, "tokenizer.ggml.add_bos_token", v.add_bos);
    read_flag(file, "tokenizer.ggml.add_eos_token", v.add_eos);
    read_flag(file, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    if (model == "gemma4") v.add_bos = true;  // llama.cpp overrides a false add_bos_token for Gemma 4
    // The defaults ids 1/2 may not exist in a tiny vocabulary.
    if (v.bos_id >= n_vocab) v.bos_id = -1;
    if (v.eos_id >= n_vocab) v.eos_id = -1;
    if (v.unk_id >= n_vocab) v.unk_id = -1;
    if (v.add_bos && v.bos_id < 0) v.add_bos = false;
    if (v.add_eos && v.eos_id < 0) v.add_eos = false;
    if (v.token_types.empty()) v.token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
    find_end_of_generation(file, v);
    find_strip_attributes(file, v);

    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
}

}  // namespace specd
