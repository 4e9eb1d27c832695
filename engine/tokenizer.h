// The tokenizer of GGUF vocabularies, behaving as llama.cpp's llama_vocab:
//
// SentencePiece BPE (tokenizer.ggml.model = "llama", llm_tokenizer_spm): the
// text gets a space prefix, spaces become "▁" (U+2581), the text is split
// into UTF-8 characters, and the adjacent pair whose concatenation is the
// highest-scoring vocabulary token is merged until no pair is a token.
// Characters that never became a token fall back to byte tokens "<0xXX>".
// Unlike llama.cpp, a merge only forms Normal and UserDefined tokens (never
// Control, Unknown or Byte ones, as SentencePiece; nor Unused ones, which
// would decode to nothing), so plain text cannot turn into "</s>". On the
// Llama-2 vocabulary no such merge exists: the output is llama.cpp's.
//
// Byte-level BPE (tokenizer.ggml.model = "gpt2", llm_tokenizer_bpe): the
// text is cut into words by the pre-tokenizer that tokenizer.ggml.pre names
// (pretokenizer.h), each word's bytes are merged by the ranked merges of
// tokenizer.ggml.merges (tokenizer_bpe.h), and tokens decode through GPT-2's
// byte-to-character mapping back to the exact bytes. Gemma 4
// (tokenizer.ggml.model = "gemma4") is BPE on the UTF-8 characters
// themselves, spaces written "▁", with "<0xXX>" byte tokens as fallback.
// decode() gives the pieces' bytes as they are: llama.cpp's optional
// clean-up of spaces before punctuation (clean_spaces) is not applied.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/utf8.h"

namespace specd {

namespace gguf {
class File;
}

// The GGUF / SentencePiece token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
    Undefined = 0,    // seen in some files; decodes to nothing, like Unused
    Normal = 1,
    Unknown = 2,      // "<unk>"
    Control = 3,      // "<s>", "</s>": decoded only on request
    UserDefined = 4,  // always matched literally in the text, always decoded
    Unused = 5,
    Byte = 6,         // "<0xXX>"
};

// The two tokenizer models (tokenizer.ggml.model).
enum class VocabKind {
    Spm,  // "llama": SentencePiece BPE on scores
    Bpe,  // "gpt2" (byte-level) and "gemma4": BPE on merges after a regex pre-tokenizer
};

// Everything the tokenizer needs, independent of the file format.
struct VocabData {
    VocabKind kind = VocabKind::Spm;
    std::vector<std::string> tokens;   // (n_vocab) piece text per id, "▁" for spaces as in the GGUF
    std::vector<float> scores;         // (n_vocab) merge priority; empty: all 0
    std::vector<int32_t> token_types;  // (n_vocab) TokenType values; empty: all Normal
    int32_t bos_id = 1;                // -1: none
    int32_t eos_id = 2;                // -1: none
    int32_t unk_id = 0;                // -1: none (then unencodable text is an error)
    int32_t pad_id = -1;               // -1: none
    int32_t eot_id = -1;               // end of turn, also ends generation; -1: none
    bool add_bos = true;               // the model expects a BOS first
    bool add_eos = false;              // the model expects an EOS last (added with the BOS)
    bool add_space_prefix = true;      // prefix a space to text at the start and after special tokens
    // BPE only:
    std::vector<std::string> merges;   // (n_merges) "left right" as token texts, lowest rank first; required
    std::string pre = "default";       // the pre-tokenizer (tokenizer.ggml.pre), one PreTokenizer knows
    // Further tokens that end generation besides eos and eot (llama.cpp's
    // special_eog_ids: <|im_end|>, <|eom_id|>, <|fim_pad|>, ... found by text).
    std::vector<int32_t> eog_ids;
    // Special tokens that, matched in text, swallow the whitespace on their
    // left / right (llama.cpp's LSTRIP / RSTRIP attributes: Phi-3's specials
    // strip on the right, e.g. "<|user|>\nHi" → <|user|> "Hi").
    std::vector<int32_t> lstrip_ids;
    std::vector<int32_t> rstrip_ids;
    // What the loader found odd but accepted (a missing pre-tokenizer, ...),
    // one line each; the caller decides where to print them.
    std::vector<std::string> warnings;
};

// Where decoded text goes: at the start of a text, where the space prefix the
// encoder added is removed again, or after text already shown (e.g. the
// tokens generated after a prompt), where every space is kept.
enum class DecodeAt { Start, Continuation };

class Tokenizer {
public:
    // Validates the vocabulary: non-empty, sizes agree, known token types,
    // finite scores, special ids in range, unique texts, byte tokens spelled
    // "<0xXX>"; for BPE, merges present and a known pre-tokenizer. Throws
    // specd::Error naming the problem.
    explicit Tokenizer(VocabData vocab);
    // Reads the tokenizer.ggml.* keys (tokenizer_gguf.cpp) as llama.cpp does;
    // errors name the missing or bad key. tokenizer.ggml.model "llama",
    // "gpt2" and "gemma4" are supported. A "gpt2" vocabulary without tokenizer.ggml.pre
    // gets the "default" pre-tokenizer and a warning (vocab().warnings); an
    // unknown pre-tokenizer name is an error, as in llama.cpp.
    static Tokenizer from_gguf(const gguf::File& file);

    int32_t n_vocab() const;
    int32_t bos_id() const;
    int32_t eos_id() const;
    int32_t eot_id() const;   // -1: none
    int32_t unk_id() const;   // -1: none
    int32_t pad_id() const;   // -1: none
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;
    VocabKind kind() const;
    const VocabData& vocab() const;

    const std::string& token_text(int32_t id) const;  // as in the vocabulary ("▁Hello")
    TokenType token_type(int32_t id) const;
    float token_score(int32_t id) const;
    int32_t find_token(std::string_view text) const;  // id with exactly this text, -1 if none
    bool is_end_of_generation(int32_t id) const;      // eos, eot (if present) and eog_ids

    // Tokenizes `text` as llama_tokenize(text, add_special = add_bos,
    // parse_special). add_bos: put the BOS first (callers usually pass
    // add_bos() unless the user asked for none); it also appends the EOS when
    // the vocabulary says add_eos. parse_special: Control and Unknown tokens
    // written literally ("<s>") become their id; without it they are plain
    // text. UserDefined tokens are always matched, as in llama.cpp.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;

    // One token's bytes: "▁" → ' ' (SPM) or the bytes its byte-level
    // characters stand for (BPE), byte tokens give their raw byte (maybe
    // half a UTF-8 character), Control/Unknown give "" unless render_special.
    std::string token_to_piece(int32_t id, bool render_special = false) const;
    // The same without allocating: a view into the tokenizer's own storage.
    std::string_view piece_view(int32_t id, bool render_special = false) const;

    // A whole sequence as text, Control/Unknown tokens skipped. At Start a
    // leading BOS is skipped and one leading space of the next token's piece
    // is removed (the space prefix). Always valid UTF-8: each invalid byte
    // sequence becomes U+FFFD, as Python's errors="replace".
    std::string decode(std::span<const int32_t> ids, DecodeAt at = DecodeAt::Start) const;

    // Decodes token by token for streaming. push() returns only complete
    // UTF-8 characters: an incomplete multi-byte tail (from byte tokens) is
    // held back until completed, invalid sequences become U+FFFD. The
    // concatenation of every push() and flush() equals decode() of the same
    // tokens at the same DecodeAt. Keeps a pointer to the tokenizer.
    class StreamDecoder {
    public:
        explicit StreamDecoder(const Tokenizer& tokenizer, DecodeAt at = DecodeAt::Start);
        std::string push(int32_t id);
        // The same, appending to `out` (no allocation once out has capacity).
        void push(int32_t id, std::string& out);
        // The held-back tail (U+FFFD if it is an incomplete character); pushing
        // may go on afterwards.
        std::string flush();
        void flush(std::string& out);
        void reset();              // forget everything pushed; start as newly constructed

    private:
        const Tokenizer* tokenizer_;
        DecodeAt at_;
        bool first_token_ = true;     // nothing pushed yet (a BOS here is skipped)
        bool strip_space_ = false;    // the next piece loses one leading space
        Utf8Repair utf8_;             // holds an incomplete UTF-8 character back
        friend class Tokenizer;
    };

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;  // immutable, shared by copies
    void check_id(int32_t id) const;
};

}  // namespace specd
