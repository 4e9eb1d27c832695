// Tokenizer::from_gguf: the tokenizer.ggml.* keys → VocabData. Kept apart
// from tokenizer.cpp so the tokenizer itself does not depend on the reader.
#include <array>
#include <climits>
#include <optional>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/gguf.h"
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

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
    const std::string& path = file.path();
    constexpr std::string_view kModel = "tokenizer.ggml.model";
    if (!file.has(kModel)) throw Error(path + ": missing key tokenizer.ggml.model (the file has no tokenizer)");
    const std::string model = file.get_string(kModel);
    if (model != "llama") {
        throw Error(path + ": tokenizer.ggml.model is \"" + model +
                    "\"; only SentencePiece \"llama\" vocabularies are supported");
    }

    VocabData v;  // llama.cpp's SPM defaults: bos 1, eos 2, unk 0, add_bos, add_space_prefix
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
    if (v.eot_id < 0) {
        // Chat models often say end-of-turn only by the token's text (llama.cpp looks the same way).
        static constexpr std::array<std::string_view, 6> kEndOfTurn = {
            "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"};
        for (const std::string_view text : kEndOfTurn) {
            for (size_t i = 0; i < n && v.eot_id < 0; ++i) {
                if (v.tokens[i] == text) v.eot_id = static_cast<int32_t>(i);
            }
        }
    }
    read_flag(file, "tokenizer.ggml.add_bos_token", v.add_bos);
    read_flag(file, "tokenizer.ggml.add_eos_token", v.add_eos);
    read_flag(file, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    // The defaults ids 1/2 may not exist in a tiny vocabulary.
    if (v.bos_id >= n_vocab) v.bos_id = -1;
    if (v.eos_id >= n_vocab) v.eos_id = -1;
    if (v.unk_id >= n_vocab) v.unk_id = -1;
    if (v.add_bos && v.bos_id < 0) v.add_bos = false;
    if (v.add_eos && v.eos_id < 0) v.add_eos = false;

    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
}

}  // namespace specd
