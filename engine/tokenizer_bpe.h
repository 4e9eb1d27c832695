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
#include <vector>

namespace specd::bpe {

// The text that stands for byte b in byte-level vocabularies: the byte
// itself for printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ'), otherwise
// U+0100 + its rank among the others (' ' → "Ġ" U+0120, '\n' → "Ċ" U+010A).
std::string_view byte_to_text(uint8_t b);

// The bytes a byte-level text stands for, appended to `bytes`; false (with
// `bytes` partly appended) if the text has a character that stands for none.
bool text_to_bytes(std::string_view text, std::string& bytes);

// The merges of a vocabulary as a table on token ids. A symbol is a token id
// in [0, n_vocab), or an id above it for a merge result that is not a token
// (the merge still happens, as llama.cpp merges texts; such a symbol comes
// out as the single-character tokens of its text).
class Merger {
public:
    // tokens: (n_vocab) byte-level texts; merges: "left right" in rank order
    // (the first of duplicate pairs wins). find_token: the id of a token with
    // exactly this text, -1 if none (any token type, as llama.cpp looks up).
    Merger(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
           const std::function<int32_t(std::string_view)>& find_token);

    // The tokens of one word (raw bytes, not byte-level text), appended to
    // `out`. Short words are merged by scanning the pairs, long ones with a
    // priority queue; both give the same tokens.
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
    void emit(int32_t symbol, std::vector<int32_t>& out) const;

    int32_t n_vocab_ = 0;
    int32_t n_merges_ = 0;
    std::vector<Entry> table_;                       // open addressing, power-of-two size, linear probing
    uint64_t mask_ = 0;
    std::vector<int32_t> byte_symbol_;               // (256) the symbol of each byte's character
    std::vector<std::vector<int32_t>> fallback_;     // (symbols above n_vocab) their single-character tokens
};

}  // namespace specd::bpe
