// libFuzzer target for byte-level BPE and the PCRE2 pre-tokenizers. The
// first input byte picks a pre-tokenizer; the rest is the text. The
// vocabulary is a small fixed one: the 256 byte characters, a few merges
// (some of whose results are no token), "<|endoftext|>" (Control) and
// "<|u|>" (UserDefined).
//
// Properties checked on every input x (arbitrary bytes):
//  1. encode(x, bos, parse_special) never throws or crashes and every id
//     is in [0, n_vocab).
//  2. decode() of it is valid UTF-8.
//  3. Round trip: without parse_special and with no "<|u|>" in x,
//     decode(encode(x)) is x with each byte that starts no character
//     replaced by U+FFFD (sanitize_utf8), as llama.cpp reads text.
//  4. The pre-tokenizer's words cover the (sanitized) text in order.
//  5. The scan merge and the queue merge give the same tokens for each word.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "fuzz/utf8_oracle.h"

namespace {

using specd::Tokenizer;
using specd::TokenType;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_tokenizer_bpe: property violated: %s\n", what);
    std::abort();
}

constexpr const char* kPreTokenizers[] = {"gpt-2",   "llama3", "qwen2", "qwen35",    "deepseek-llm", "deepseek-coder",
                                          "default", "falcon", "tekken", "starcoder", "gpt-4o",       "bloom"};
constexpr size_t kNumPreTokenizers = sizeof kPreTokenizers / sizeof kPreTokenizers[0];

specd::VocabData small_vocab(const char* pre) {
    specd::VocabData v;
    v.kind = specd::VocabKind::Bpe;
    v.pre = pre;
    for (int b = 0; b < 256; ++b) v.tokens.emplace_back(specd::bpe::byte_to_text(static_cast<uint8_t>(b)));
    const std::string space(specd::bpe::byte_to_text(' '));
    for (const std::string& t : std::vector<std::string>{"ab", "abc", "th", "the", space + "t", space + "the", "12",
                                                         "123", space + space}) {
        v.tokens.push_back(t);
    }
    // "b c" makes "bc", which is no token; "a bc" then makes "abc".
    v.merges = {"a b", "b c", "ab c", "a bc", "t h", "th e", space + " t", space + "t he", "1 2", "12 3",
                space + " " + space};
    v.tokens.push_back("<|endoftext|>");
    v.tokens.push_back("<|u|>");
    v.token_types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
    v.token_types[v.tokens.size() - 2] = static_cast<int32_t>(TokenType::Control);
    v.token_types[v.tokens.size() - 1] = static_cast<int32_t>(TokenType::UserDefined);
    v.bos_id = v.eos_id = static_cast<int32_t>(v.tokens.size()) - 2;
    v.unk_id = -1;
    v.add_bos = true;
    v.add_space_prefix = false;
    return v;
}

struct Setup {
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<specd::PreTokenizer> pre;
    std::unique_ptr<specd::bpe::Merger> merger;
};

const Setup& setup(size_t which) {
    static Setup setups[kNumPreTokenizers];
    Setup& s = setups[which];
    if (!s.tokenizer) {
        s.tokenizer = std::make_unique<Tokenizer>(small_vocab(kPreTokenizers[which]));
        s.pre = std::make_unique<specd::PreTokenizer>(kPreTokenizers[which]);
        const Tokenizer& tok = *s.tokenizer;
        s.merger = std::make_unique<specd::bpe::Merger>(tok.vocab().tokens, tok.vocab().merges,
                                                        [&tok](std::string_view t) { return tok.find_token(t); });
    }
    return s;
}


}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const Setup& s = setup(data[0] % kNumPreTokenizers);
    const Tokenizer& tok = *s.tokenizer;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    std::string sanitized(text);
    specd::sanitize_utf8(text, sanitized);
    const bool has_user_defined = text.find("<|u|>") != std::string_view::npos;

    for (const bool bos : {false, true}) {
        for (const bool parse_special : {false, true}) {
            std::vector<int32_t> ids;
            try {
                ids = tok.encode(text, bos, parse_special);
            } catch (const specd::Error&) {
                fail("encode threw");
            }
            for (const int32_t id : ids) {
                if (id < 0 || id >= tok.n_vocab()) fail("encode produced an id out of range");
            }
            const std::string decoded = tok.decode(ids);
            if (!specd::fuzz::is_utf8(decoded)) fail("decode produced invalid UTF-8");
            if (!parse_special && !has_user_defined && decoded != sanitized) fail("decode(encode(x)) != sanitized x");
        }
    }

    std::vector<specd::TextSpan> words;
    s.pre->split(sanitized, words);
    size_t covered = 0;
    for (const specd::TextSpan w : words) {
        if (w.offset != covered || w.size == 0) fail("the words do not cover the text in order");
        covered += w.size;
        const std::string_view word = std::string_view(sanitized).substr(w.offset, w.size);
        std::vector<int32_t> scan, queue;
        s.merger->encode_word_scan(word, scan);
        s.merger->encode_word_queue(word, queue);
        if (scan != queue) fail("the scan and the queue merge disagree");
    }
    if (covered != sanitized.size()) fail("the words do not cover the whole text");
    return 0;
}
