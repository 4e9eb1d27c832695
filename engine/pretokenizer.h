// The pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre):
// the text is cut into words by a list of regular expressions before BPE
// merges run inside each word, as llama.cpp's unicode_regex_split does. Each
// expression in turn splits every piece the previous ones left: its matches
// and the runs between them both become pieces.
//
// The regexes are llama.cpp's (llama-vocab.cpp), run with PCRE2 in UTF mode
// with Unicode properties (UCP) and JIT; PCRE2 stays inside pretokenizer.cpp
// so that this header needs the standard library only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specd {

// What a pre-tokenizer name implies beyond its regexes, as llama.cpp's
// llama_vocab::impl::load sets it.
struct PreTokenizerTraits {
    std::string name;                 // the canonical name ("llama3" for "llama-bpe")
    bool ignore_merges = false;       // a word that is a whole token is taken as it is (no merges)
    bool add_bos_by_default = false;  // add_bos is true unless the file says otherwise
    bool no_bos = false;              // the vocabulary has no BOS unless the file names one (ChatGLM)
    bool byte_level = true;           // merges start from byte-level characters; false: from UTF-8 ones
    bool escape_spaces = false;       // spaces become "▁" (U+2581) before splitting (Gemma 4)
    bool whole_newline_runs = false;  // a word of only "\n" that is a token is taken whole (Gemma 4)
};

// One piece of the text: bytes [offset, offset + size).
struct TextSpan {
    uint32_t offset;
    uint32_t size;
};

class PreTokenizer {
public:
    // The pre-tokenizer that tokenizer.ggml.pre names ("default" is
    // llama.cpp's for a missing key). Throws specd::Error naming the name and
    // listing the known ones when it is not known.
    explicit PreTokenizer(std::string_view name);

    const PreTokenizerTraits& traits() const;
    const std::vector<std::string>& regexes() const;  // in the order they apply

    // Cuts `text` (valid UTF-8; see sanitize_utf8) into words: appends their
    // spans, relative to text, to `words` in text order; together they cover
    // the text. Thread-safe: one PreTokenizer may split on many threads.
    void split(std::string_view text, std::vector<TextSpan>& words) const;

    // Every name PreTokenizer accepts, aliases included, sorted.
    static std::vector<std::string> known_names();
    // The traits of a name without compiling its regexes; an unknown name
    // throws the constructor's error.
    static PreTokenizerTraits traits_of(std::string_view name);

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;
};

// `text` with each byte that does not start a well-formed UTF-8 character
// replaced by U+FFFD, as llama.cpp's unicode_cpts_from_utf8 does before
// pre-tokenizing. Returns false (and leaves `out` alone) when `text` is valid
// already, so the common case copies nothing.
bool sanitize_utf8(std::string_view text, std::string& out);

}  // namespace specd
