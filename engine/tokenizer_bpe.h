// Byte-level BPE (tokenizer.ggml.model = "gpt2"): GPT-2's mapping of bytes
// to printable characters, and the merges that turn one pre-tokenized word
// into tokens, as llama.cpp's llm_tokenizer_bpe_session does. Internal to the
// tokenizer (tokenizer.cpp uses it; tests check its two merge strategies
// agree); the rest of the code sees only Tokenizer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace specd::bpe {

// The text that stands for byte b in byte-level vocabularies: the byte
// itself for printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ'), otherwise
// U+0100 + its rank among the others (' ' → "Ġ" U+0120, '\n' → "Ċ" U+010A).
std::string_view byte_to_text(uint8_t b);

// The bytes a byte-level text stands for, appended to `bytes`; false (with
// `bytes` partly appended) if the text has a character that stands for none.
bool text_to_bytes(std::string_view text, std::string& bytes);

// What the merges start from: a word's bytes, each written as its
// byte-level character (GPT-2, Llama 3, Qwen, ...), or its UTF-8 characters
// as they are (Gemma 4, whose tokens are text with "▁" for spaces and
// "<0xXX>" byte tokens for characters it lacks).
enum class Alphabet { Bytes, Utf8 };

// The merges of a vocabulary as a table on token ids. A symbol is a token id
// in [0, n_vocab), or an id above it for a merge result that is not a token
// (the merge still happens, as llama.cpp merges texts; such a symbol comes
// out as the single-byte tokens of its text: for Bytes the tokens whose
// text is one byte of it, for Utf8 the "<0xXX>" tokens).
class Merger {
public:
    // tokens: (n_vocab) texts; merges: "left right" in rank order (the first
    // of duplicate pairs wins). find_token: the id of a token with exactly
    // this text, -1 if none (any token type, as llama.cpp looks up).
    Merger(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
           const std::function<int32_t(std::string_view)>& find_token, Alphabet alphabet = Alphabet::Bytes);

    // The tokens of one word, appended to `out`: for Bytes the raw bytes (not
    // byte-level text), for Utf8 the text itself. Short words are merged by
    // scanning the pairs, long ones with a priority queue; both give the same
    // tokens.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;
    void encode_word_scan(std::string_view word, std::vector<int32_t>& out) const;
    void encode_word_queue(std::string_view word, std::vector<int32_t>& out) const;

    static constexpr size_t kScanMaxBytes = 128;  // longer words use the queue (the scan is quadratic)

    int32_t n_merges() const { return n_merges_; }  // pairs in the table

private:
    struct Entry {
        uint64_t key;    // left << 32 | right; kEmpty: free slot
        int32_t rank;    // lower merges first
        int32_t result;  // the merged symbol
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    const Entry* find(int32_t left, int32_t right) const;
    void insert(int32_t left, int32_t right, int32_t rank, int32_t result);
    // The starting symbols of a word; for Utf8 a character that is no token
    // is -(1 + its offset in the word) and never merges.
    void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
    void emit(int32_t symbol, std::string_view word, std::vector<int32_t>& out) const;

    Alphabet alphabet_ = Alphabet::Bytes;
    int32_t n_vocab_ = 0;
    int32_t n_merges_ = 0;
    std::vector<Entry> table_;                       // open addressing, power-of-two size, linear probing
    uint64_t mask_ = 0;
    int shift_ = 60;                                 // 64 - log2(table size)
    std::vector<int32_t> byte_symbol_;               // (256) Bytes: the symbol of each byte's character
    std::unordered_map<std::string, int32_t> char_symbol_;  // Utf8: the tokens that are one character
    std::vector<int32_t> byte_token_;                // (256) Utf8: the "<0xXX>" token of each byte, -1 if none
    std::vector<std::vector<int32_t>> fallback_;     // (symbols above n_vocab) their single-character tokens
};

}  // namespace specd::bpe
