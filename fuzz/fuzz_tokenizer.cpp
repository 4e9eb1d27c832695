// libFuzzer target for the tokenizer. The vocabulary is a small fixed one
// (byte tokens, a few merges, Control/Unknown/UserDefined tokens), or the
// GGUF named by $SPECD_FUZZ_GGUF.
//
// Properties checked on every input x (arbitrary bytes):
//  1. encode(x, bos, parse_special) never throws or crashes, for both
//     values of bos and parse_special, and every id is in [0, n_vocab).
//  2. decode() of anything is valid UTF-8.
//  3. Round trip: if x is valid UTF-8, contains no U+2581 ("▁", which the
//     tokenizer uses for spaces and so decodes as ' ') and no UserDefined
//     token text (matched even without parse_special, and the text after it
//     gets a space prefix, as in llama.cpp), then
//     decode(encode(x, bos, parse_special = false)) == x, for both bos.
//  4. If x contains no special token text at all (Control, Unknown,
//     UserDefined), parse_special changes nothing.
//  5. Streaming: with the input's bytes read as token ids, the concatenation
//     of StreamDecoder::push() and flush() equals decode() (both DecodeAt
//     values), and each push() returns valid UTF-8.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "engine/tokenizer.h"
#include "fuzz/utf8_oracle.h"

#if __has_include("engine/gguf.h")
#include "engine/gguf.h"
#define SPECD_FUZZ_HAVE_GGUF 1
#endif

namespace {

using specd::DecodeAt;
using specd::Tokenizer;
using specd::TokenType;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
    std::abort();
}


specd::VocabData small_vocab() {
    specd::VocabData v;
    const auto add = [&](std::string text, float score, TokenType type) {
        v.tokens.push_back(std::move(text));
        v.scores.push_back(score);
        v.token_types.push_back(static_cast<int32_t>(type));
    };
    add("<unk>", 0, TokenType::Unknown);
    add("<s>", 0, TokenType::Control);
    add("</s>", 0, TokenType::Control);
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0, TokenType::Byte);
    const std::string mark = "\xE2\x96\x81";
    float score = -1.0f;
    for (const char* piece : {"a", "b", "c", "ab", "bc", "abc", "ca", "<", ">", "s", "<s", "s>", "\xC3\xA9"}) {
        add(piece, score, TokenType::Normal);
        add(mark + piece, score - 0.5f, TokenType::Normal);
        score -= 1.0f;
    }
    add(mark, -100.0f, TokenType::Normal);
    add(mark + mark, -50.0f, TokenType::Normal);
    add("<|u|>", 0, TokenType::UserDefined);
    add("<c>", 0, TokenType::Control);
    add("zz", 0, TokenType::Unused);
    return v;
}

const Tokenizer& tokenizer() {
    static const Tokenizer tok = [] {
#ifdef SPECD_FUZZ_HAVE_GGUF
        if (const char* path = std::getenv("SPECD_FUZZ_GGUF"); path && *path) {
            return Tokenizer::from_gguf(specd::gguf::File::open(path));
        }
#endif
        return Tokenizer(small_vocab());
    }();
    return tok;
}

struct SpecialText {
    std::string text;
    bool user_defined;
};

const std::vector<SpecialText>& special_texts() {
    static const std::vector<SpecialText> texts = [] {
        std::vector<SpecialText> out;
        const Tokenizer& tok = tokenizer();
        for (int32_t id = 0; id < tok.n_vocab(); ++id) {
            const TokenType type = tok.token_type(id);
            if (type != TokenType::Control && type != TokenType::Unknown && type != TokenType::UserDefined) continue;
            if (!tok.token_text(id).empty()) out.push_back({tok.token_text(id), type == TokenType::UserDefined});
        }
        return out;
    }();
    return texts;
}

bool contains_special_text(std::string_view text, bool user_defined_only) {
    for (const SpecialText& s : special_texts()) {
        if ((s.user_defined || !user_defined_only) && text.find(s.text) != std::string_view::npos) return true;
    }
    return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const Tokenizer& tok = tokenizer();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const bool utf8 = specd::fuzz::is_utf8(text);
    const bool has_mark = text.find("\xE2\x96\x81") != std::string_view::npos;
    const bool has_user_defined = contains_special_text(text, true);
    const bool has_special = has_user_defined || contains_special_text(text, false);

    for (const bool bos : {true, false}) {
        std::vector<int32_t> by_parse[2];
        for (const bool parse_special : {false, true}) {
            std::vector<int32_t> ids;
            try {
                ids = tok.encode(text, bos, parse_special);
            } catch (const specd::Error&) {
                fail("encode threw on a vocabulary with byte tokens");
            }
            for (const int32_t id : ids) {
                if (id < 0 || id >= tok.n_vocab()) fail("encode produced an id out of range");
            }
            const std::string decoded = tok.decode(ids);
            if (!specd::fuzz::is_utf8(decoded)) fail("decode produced invalid UTF-8");
            if (!parse_special && utf8 && !has_mark && !has_user_defined && decoded != text) {
                fail("decode(encode(x)) != x");
            }
            by_parse[parse_special ? 1 : 0] = std::move(ids);
        }
        if (!has_special && by_parse[0] != by_parse[1]) fail("parse_special changed text without special tokens");
    }

    // The input's bytes as token ids, two bytes each.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < size; i += 2) {
        ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % static_cast<uint32_t>(tok.n_vocab())));
    }
    for (const DecodeAt at : {DecodeAt::Start, DecodeAt::Continuation}) {
        Tokenizer::StreamDecoder stream(tok, at);
        std::string streamed;
        for (const int32_t id : ids) {
            const std::string piece = stream.push(id);
            if (!specd::fuzz::is_utf8(piece)) fail("StreamDecoder::push returned invalid UTF-8");
            streamed += piece;
        }
        streamed += stream.flush();
        if (streamed != tok.decode(ids, at)) fail("StreamDecoder output != decode()");
    }
    return 0;
}
