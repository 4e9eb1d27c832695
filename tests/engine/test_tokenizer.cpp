// The SPM tokenizer: merge order, byte fallback and special tokens on small
// hand-made vocabularies, then llama.cpp's known tokenizations on the real
// Llama-2 vocabulary (stories15M), round trips and streaming.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/tokenizer.h"
#include "support/models.h"

#if __has_include("engine/gguf.h")
#include "engine/gguf.h"
#define SPECD_HAVE_GGUF 1
#endif

using specd::DecodeAt;
using specd::Tokenizer;
using specd::TokenType;
using specd::VocabData;
using Ids = std::vector<int32_t>;

namespace {

struct Entry {
    std::string text;
    float score = 0.0f;
    TokenType type = TokenType::Normal;
};

// ids: 0 <unk>, 1 <s>, 2 </s>, then `entries` in order from 3.
VocabData make_vocab(const std::vector<Entry>& entries, bool with_specials = true) {
    VocabData v;
    if (with_specials) {
        v.tokens = {"<unk>", "<s>", "</s>"};
        v.scores = {0.0f, 0.0f, 0.0f};
        v.token_types = {2, 3, 3};
    } else {
        v.bos_id = v.eos_id = v.unk_id = -1;
        v.add_bos = false;
    }
    for (const Entry& e : entries) {
        v.tokens.push_back(e.text);
        v.scores.push_back(e.score);
        v.token_types.push_back(static_cast<int32_t>(e.type));
    }
    return v;
}

// All 256 byte tokens "<0x00>".."<0xFF>".
std::vector<Entry> byte_entries() {
    std::vector<Entry> entries;
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        entries.push_back({std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0.0f, TokenType::Byte});
    }
    return entries;
}

Ids ids_of(const Tokenizer& tok, const std::vector<std::string>& texts) {
    Ids ids;
    for (const std::string& t : texts) {
        const int32_t id = tok.find_token(t);
        REQUIRE(id >= 0);
        ids.push_back(id);
    }
    return ids;
}

// ---------------------------------------------------------------- real vocab

// llama2.c's tokenizer.bin: int32 max_len, then per token f32 score, int32
// len, bytes. That export wrote '▁' as ' ', BOS/EOS as "\n<s>\n"/"\n</s>\n"
// and byte token i (ids 3..258) as the byte's Latin-1 character in UTF-8.
std::optional<VocabData> vocab_from_llama2c(const std::vector<char>& blob) {
    VocabData v;
    size_t off = 4;
    const auto read = [&](void* dst, size_t n) {
        if (off + n > blob.size()) throw std::runtime_error("truncated tokenizer.bin");
        std::memcpy(dst, blob.data() + off, n);
        off += n;
    };
    while (off < blob.size()) {
        float score = 0;
        int32_t len = 0;
        read(&score, 4);
        read(&len, 4);
        std::string text(static_cast<size_t>(len), '\0');
        read(text.data(), static_cast<size_t>(len));
        const auto id = static_cast<int32_t>(v.tokens.size());
        TokenType type = TokenType::Normal;
        if (id == 0) {
            text = "<unk>";
            type = TokenType::Unknown;
        } else if (id == 1) {
            text = "<s>";
            type = TokenType::Control;
        } else if (id == 2) {
            text = "</s>";
            type = TokenType::Control;
        } else if (id >= 3 && id < 259) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", id - 3);
            text = buf;
            type = TokenType::Byte;
        } else {
            std::string mapped;
            for (const char c : text) {
                if (c == ' ') {
                    mapped += "\xE2\x96\x81";
                } else {
                    mapped += c;
                }
            }
            text = mapped;
        }
        v.tokens.push_back(text);
        v.scores.push_back(score);
        v.token_types.push_back(static_cast<int32_t>(type));
    }
    return v;
}

std::optional<VocabData> load_llama2c_vocab() {
    const char* env = std::getenv("SPECD_LLAMA2_DATA");
    const std::string path = env && *env ? env : "/tmp/npmpkg/package/dist/llama2.data";
    // tokenizer.bin's place in the Emscripten bundle (llama2.js).
    constexpr size_t kBegin = 60816028, kEnd = 61248745;
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    in.seekg(static_cast<std::streamoff>(kBegin));
    std::vector<char> blob(kEnd - kBegin);
    if (!in.read(blob.data(), static_cast<std::streamsize>(blob.size()))) return std::nullopt;
    return vocab_from_llama2c(blob);
}

const std::string kModelFile = "stories15M-f32.gguf";

// The real Llama-2 vocabulary: from the GGUF if present, else the raw
// llama2.c tokenizer.bin mapped back; nullopt (with a warning) if neither.
std::optional<Tokenizer> real_tokenizer() {
#ifdef SPECD_HAVE_GGUF
    if (specd::test::model_exists(kModelFile)) {
        return Tokenizer::from_gguf(specd::gguf::File::open(specd::test::model_path(kModelFile)));
    }
#endif
    if (auto v = load_llama2c_vocab()) return Tokenizer(std::move(*v));
    return std::nullopt;
}

#define REQUIRE_REAL_TOKENIZER(tok)                                                                   \
    std::optional<Tokenizer> tok = real_tokenizer();                                                  \
    if (!tok) {                                                                                       \
        WARN("no Llama-2 vocabulary: " << specd::test::model_path(kModelFile)                         \
                                       << " is missing (run tools/fetch-model.sh); skipping");        \
        return;                                                                                       \
    }

}  // namespace

// ------------------------------------------------------------ merge order ---

TEST_CASE("the pair whose merged token scores highest is merged first", "[tokenizer]") {
    VocabData v = make_vocab({{"a"}, {"b"}, {"c"}, {"ab", -2.0f}, {"bc", -1.0f}});
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    CHECK(tok.encode("abc", false) == ids_of(tok, {"a", "bc"}));

    v = make_vocab({{"a"}, {"b"}, {"c"}, {"ab", -1.0f}, {"bc", -2.0f}});
    v.add_space_prefix = false;
    const Tokenizer flipped(v);
    CHECK(flipped.encode("abc", false) == ids_of(flipped, {"ab", "c"}));
}

TEST_CASE("equal scores merge the leftmost pair first", "[tokenizer]") {
    VocabData v = make_vocab({{"a"}, {"aa", -1.0f}});
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    CHECK(tok.encode("aaa", false) == ids_of(tok, {"aa", "a"}));
    CHECK(tok.encode("aaaa", false) == ids_of(tok, {"aa", "aa"}));
    CHECK(tok.encode("aaaaa", false) == ids_of(tok, {"aa", "aa", "a"}));
}

TEST_CASE("merges chain into longer tokens, and a blocked pair stays apart", "[tokenizer]") {
    VocabData v = make_vocab({{"a"}, {"b"}, {"c"}, {"d"}, {"ab", -1.0f}, {"cd", -1.0f}, {"abcd", -3.0f}, {"bc", -0.5f}});
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    // "bc" (the best pair) is merged first and blocks "ab" and "cd": abcd is unreachable.
    CHECK(tok.encode("abcd", false) == ids_of(tok, {"a", "bc", "d"}));

    VocabData w = make_vocab({{"a"}, {"b"}, {"c"}, {"d"}, {"ab", -1.0f}, {"cd", -1.0f}, {"abcd", -3.0f}});
    w.add_space_prefix = false;
    const Tokenizer chained(w);
    CHECK(chained.encode("abcd", false) == ids_of(chained, {"abcd"}));
}

TEST_CASE("the space prefix and every space become the SentencePiece mark", "[tokenizer]") {
    VocabData v = make_vocab({{"\xE2\x96\x81"}, {"a"}, {"b"}, {"\xE2\x96\x81" "a", -1.0f}, {"\xE2\x96\x81" "b", -1.0f}});
    const Tokenizer tok(v);
    CHECK(tok.encode("a b", false) == ids_of(tok, {"▁a", "▁b"}));
    CHECK(tok.encode("a  b", false) == ids_of(tok, {"▁a", "▁", "▁b"}));
    CHECK(tok.encode(" a", false) == ids_of(tok, {"▁", "▁a"}));

    v.add_space_prefix = false;
    const Tokenizer no_prefix(v);
    CHECK(no_prefix.encode("a b", false) == ids_of(no_prefix, {"a", "▁b"}));
    CHECK(no_prefix.decode(no_prefix.encode("a b", false)) == "a b");
}

TEST_CASE("add_bos puts the BOS first, and add_eos the EOS last", "[tokenizer]") {
    VocabData v = make_vocab({{"\xE2\x96\x81" "a"}});
    const Tokenizer tok(v);
    CHECK(tok.encode("a", true) == Ids{1, 3});
    CHECK(tok.encode("a", false) == Ids{3});
    CHECK(tok.encode("", true) == Ids{1});
    CHECK(tok.encode("", false) == Ids{});
    CHECK(tok.add_bos());

    v.add_eos = true;
    const Tokenizer with_eos(v);
    CHECK(with_eos.encode("a", true) == Ids{1, 3, 2});
    CHECK(with_eos.encode("a", false) == Ids{3});
}

// ---------------------------------------------------------- byte fallback ---

TEST_CASE("characters missing from the vocabulary fall back to byte tokens", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();  // ids 3..258
    entries.push_back({"\xE2\x96\x81"});          // 259
    entries.push_back({"a"});                     // 260
    VocabData v = make_vocab(entries);
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    // é = C3 A9; 😀 = F0 9F 98 80
    CHECK(tok.encode("a\xC3\xA9", false) == Ids{260, 3 + 0xC3, 3 + 0xA9});
    CHECK(tok.encode("\xF0\x9F\x98\x80", false) == Ids{3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
    CHECK(tok.encode("\n", false) == Ids{3 + 0x0A});
    CHECK(tok.decode(tok.encode("a\xC3\xA9\n\xF0\x9F\x98\x80", false)) == "a\xC3\xA9\n\xF0\x9F\x98\x80");
    // Invalid UTF-8 is encoded byte by byte too.
    CHECK(tok.encode("\xFF\x80", false) == Ids{3 + 0xFF, 3 + 0x80});
}

TEST_CASE("without byte tokens an unknown character becomes one <unk>", "[tokenizer]") {
    VocabData v = make_vocab({{"\xE2\x96\x81"}, {"a"}});
    const Tokenizer tok(v);
    CHECK(tok.encode("a\xC3\xA9" "a", false) == Ids{3, 4, 0, 4});
    CHECK(tok.decode(Ids{4, 0, 4}) == "aa");  // <unk> decodes to nothing

    VocabData none = make_vocab({{"a"}}, false);
    none.add_space_prefix = false;
    const Tokenizer no_unk(none);
    CHECK_THROWS_AS(no_unk.encode("ab", false), specd::Error);
    CHECK_THROWS_WITH(no_unk.encode("ab", false), Catch::Contains("'b'"));
}

// --------------------------------------------------------- special tokens ---

TEST_CASE("control tokens in the text are parsed only with parse_special", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();
    entries.push_back({"\xE2\x96\x81"});           // 259
    entries.push_back({"\xE2\x96\x81" "a", -1.0f}); // 260
    entries.push_back({"\xE2\x96\x81" "b", -1.0f}); // 261
    const Tokenizer tok(make_vocab(entries));

    // Text after a special token gets the space prefix again, as in llama.cpp.
    CHECK(tok.encode("a<s>b", false, true) == Ids{260, 1, 261});
    CHECK(tok.encode("<s></s>", true, true) == Ids{1, 1, 2});
    CHECK(tok.encode("<unk>", false, true) == Ids{0});
    // Without parse_special the same text is ordinary characters (bytes here).
    const Ids plain = tok.encode("a<s>b", false, false);
    CHECK(plain.size() > 3);
    CHECK(std::find(plain.begin(), plain.end(), 1) == plain.end());
    CHECK(tok.decode(plain) == "a<s>b");
}

TEST_CASE("merging plain text never forms a control, byte or unused token", "[tokenizer]") {
    // "<s" + ">" would merge into "<s>" in llama.cpp; SentencePiece (and we)
    // only merge into Normal/UserDefined/Unused tokens.
    std::vector<Entry> entries = {{"<"}, {">"}, {"s"}, {"<s", -1.0f}, {"0"}, {"x"}, {"4"}, {"1"},
                                  {"<0", -1.0f}, {"<0x", -1.0f}, {"41", -1.0f}, {"41>", -1.0f},
                                  {"<0x41>", 0.0f, TokenType::Byte}, {"z"}, {"zz", 0.0f, TokenType::Unused}};
    VocabData v = make_vocab(entries);
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    CHECK(tok.encode("<s>", false) == ids_of(tok, {"<s", ">"}));
    CHECK(tok.encode("<s>", false, true) == Ids{1});
    CHECK(tok.encode("<0x41>", false) == ids_of(tok, {"<0x", "41>"}));
    CHECK(tok.encode("zz", false) == ids_of(tok, {"z", "z"}));
}

TEST_CASE("user-defined tokens are matched even without parse_special", "[tokenizer]") {
    std::vector<Entry> entries = {{"\xE2\x96\x81"}, {"\xE2\x96\x81" "a", -1.0f}, {"<|tool|>", 0.0f, TokenType::UserDefined}};
    const Tokenizer tok(make_vocab(entries));
    CHECK(tok.encode("a<|tool|>", false, false) == Ids{4, 5});
    CHECK(tok.encode("a<|tool|>", false, true) == Ids{4, 5});
    CHECK(tok.token_to_piece(5) == "<|tool|>");
    CHECK(tok.decode(Ids{4, 5}) == "a<|tool|>");
}

TEST_CASE("a longer special token wins over a shorter one inside it", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();
    entries.push_back({"<a>", 0.0f, TokenType::Control});   // 259
    entries.push_back({"<a><b>", 0.0f, TokenType::Control});  // 260
    VocabData v = make_vocab(entries);
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    CHECK(tok.encode("<a><b><a>", false, true) == Ids{260, 259});
}

// --------------------------------------------------------------- decoding ---

TEST_CASE("pieces: spaces restored, raw bytes, control tokens only on request", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();
    entries.push_back({"\xE2\x96\x81" "hi" "\xE2\x96\x81" "there"});  // 259
    entries.push_back({"x", 0.0f, TokenType::Unused});                 // 260
    const Tokenizer tok(make_vocab(entries));
    CHECK(tok.token_to_piece(259) == " hi there");
    CHECK(tok.token_to_piece(3 + 0x0A) == "\n");
    CHECK(tok.token_to_piece(3 + 0xF0) == "\xF0");
    CHECK(tok.token_to_piece(1).empty());
    CHECK(tok.token_to_piece(1, true) == "<s>");
    CHECK(tok.token_to_piece(0).empty());
    CHECK(tok.token_to_piece(0, true) == "<unk>");
    CHECK(tok.token_to_piece(260).empty());
    CHECK(tok.token_text(259) == "\xE2\x96\x81" "hi" "\xE2\x96\x81" "there");
    CHECK(tok.token_type(3) == TokenType::Byte);
    CHECK_THROWS_AS(tok.token_to_piece(261), specd::Error);
    CHECK_THROWS_AS(tok.token_to_piece(-1), specd::Error);
}

TEST_CASE("decode at the start removes the space prefix once, and a continuation keeps it", "[tokenizer]") {
    VocabData v = make_vocab({{"\xE2\x96\x81"}, {"\xE2\x96\x81" "a", -1.0f}, {"\xE2\x96\x81" "b", -1.0f}});
    const Tokenizer tok(v);
    const Ids ab = tok.encode("a b", true);
    CHECK(ab == Ids{1, 4, 5});
    CHECK(tok.decode(ab) == "a b");
    CHECK(tok.decode(Ids{4, 5}) == "a b");
    CHECK(tok.decode(Ids{4, 5}, DecodeAt::Continuation) == " a b");
    CHECK(tok.decode(Ids{1, 4, 5, 2}) == "a b");
    CHECK(tok.decode(Ids{}) == "");
    CHECK(tok.decode(tok.encode(" a", true)) == " a");
    CHECK_THROWS_AS(tok.decode(Ids{4, 99}), specd::Error);
}

TEST_CASE("is_end_of_generation is true for eos and eot only", "[tokenizer]") {
    VocabData v = make_vocab({{"a"}, {"<|eot_id|>", 0.0f, TokenType::Control}});
    v.eot_id = 4;
    const Tokenizer tok(v);
    CHECK(tok.is_end_of_generation(2));
    CHECK(tok.is_end_of_generation(4));
    CHECK_FALSE(tok.is_end_of_generation(1));
    CHECK_FALSE(tok.is_end_of_generation(3));
    CHECK_FALSE(tok.is_end_of_generation(-1));
}

// -------------------------------------------------------------- streaming ---

TEST_CASE("the stream decoder holds back an incomplete UTF-8 character", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();
    entries.push_back({"\xE2\x96\x81"});  // 259
    const Tokenizer tok(make_vocab(entries));
    const Ids ids = tok.encode("\xF0\x9F\x98\x80", true);  // BOS, ▁, F0 9F 98 80
    REQUIRE(ids == Ids{1, 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
    Tokenizer::StreamDecoder stream(tok);
    std::string all;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const std::string piece = stream.push(ids[i]);
        CHECK(piece.empty());
        all += piece;
    }
    const std::string last = stream.push(ids.back());
    CHECK(last == "\xF0\x9F\x98\x80");
    all += last + stream.flush();
    CHECK(all == tok.decode(ids));
}

TEST_CASE("the stream decoder replaces invalid UTF-8 by U+FFFD instead of waiting", "[tokenizer]") {
    std::vector<Entry> entries = byte_entries();
    entries.push_back({"a"});  // 259
    VocabData v = make_vocab(entries);
    v.add_space_prefix = false;
    const Tokenizer tok(v);
    const auto byte = [](int b) { return 3 + b; };
    const std::string fffd = "\xEF\xBF\xBD";
    Tokenizer::StreamDecoder stream(tok);
    CHECK(stream.push(byte(0xF0)).empty());
    CHECK(stream.push(259) == fffd + "a");       // a broken-off lead byte
    CHECK(stream.push(byte(0x80)) == fffd);       // a stray continuation byte
    CHECK(stream.push(byte(0xFF)) == fffd);       // never valid
    CHECK(stream.push(byte(0xC0)) == fffd);       // overlong lead
    CHECK(stream.push(byte(0xED)).empty());
    CHECK(stream.push(byte(0xA0)) == fffd + fffd);  // a surrogate: ED then A0 each replaced
    CHECK(stream.push(byte(0xE2)).empty());
    CHECK(stream.flush() == fffd);                // incomplete at the end
    CHECK(stream.flush().empty());

    const Ids mixed{byte(0xF0), 259, byte(0x80), byte(0xE2), byte(0x82), byte(0xAC), byte(0xE2)};
    Tokenizer::StreamDecoder again(tok);
    std::string streamed;
    for (const int32_t id : mixed) again.push(id, streamed);
    again.flush(streamed);
    CHECK(streamed == tok.decode(mixed));
    CHECK(streamed == fffd + "a" + fffd + "\xE2\x82\xAC" + fffd);
}

TEST_CASE("a reset stream decoder starts afresh, a continuation stream keeps the first space", "[tokenizer]") {
    VocabData v = make_vocab({{"\xE2\x96\x81" "a", -1.0f}, {"\xE2\x96\x81" "b", -1.0f}});
    const Tokenizer tok(v);
    Tokenizer::StreamDecoder stream(tok);
    CHECK(stream.push(1).empty());
    CHECK(stream.push(3) == "a");
    CHECK(stream.push(4) == " b");
    stream.reset();
    CHECK(stream.push(4) == "b");

    Tokenizer::StreamDecoder continuation(tok, DecodeAt::Continuation);
    CHECK(continuation.push(4) == " b");
}

// ------------------------------------------------------------- validation ---

TEST_CASE("a malformed vocabulary is rejected with a message naming the problem", "[tokenizer]") {
    CHECK_THROWS_WITH(Tokenizer(VocabData{}), Catch::Contains("empty"));

    VocabData sizes = make_vocab({{"a"}});
    sizes.scores.pop_back();
    CHECK_THROWS_WITH(Tokenizer(sizes), Catch::Contains("scores"));

    VocabData types = make_vocab({{"a"}});
    types.token_types.back() = 9;
    CHECK_THROWS_WITH(Tokenizer(types), Catch::Contains("type 9"));

    VocabData nan = make_vocab({{"a", std::nanf("")}});
    CHECK_THROWS_WITH(Tokenizer(nan), Catch::Contains("NaN"));

    VocabData bytes = make_vocab({{"<0xZZ>", 0.0f, TokenType::Byte}});
    CHECK_THROWS_WITH(Tokenizer(bytes), Catch::Contains("<0xZZ>"));

    VocabData dup = make_vocab({{"a"}, {"a"}});
    CHECK_THROWS_WITH(Tokenizer(dup), Catch::Contains("same text"));

    VocabData bos = make_vocab({{"a"}});
    bos.bos_id = 7;
    CHECK_THROWS_WITH(Tokenizer(bos), Catch::Contains("bos_id 7"));

    VocabData no_bos = make_vocab({{"a"}});
    no_bos.bos_id = -1;
    CHECK_THROWS_WITH(Tokenizer(no_bos), Catch::Contains("add_bos"));

    // Empty score and type lists mean the defaults.
    VocabData defaults;
    defaults.tokens = {"a", "b", "c"};
    const Tokenizer ok(defaults);
    CHECK(ok.token_type(2) == TokenType::Normal);
    CHECK(ok.token_score(2) == 0.0f);
}

TEST_CASE("a copied tokenizer still works after the original is gone", "[tokenizer]") {
    std::optional<Tokenizer> copy;
    {
        const Tokenizer original(make_vocab({{"\xE2\x96\x81" "a", -1.0f}}));
        copy.emplace(original);
        CHECK(copy->encode("a", true) == original.encode("a", true));
    }
    CHECK(copy->encode("a", true) == Ids{1, 3});
}

// ------------------------------------------------------- the real vocabulary

TEST_CASE("the Llama-2 vocabulary tokenizes as llama.cpp does", "[tokenizer][model]") {
    REQUIRE_REAL_TOKENIZER(tok);
    REQUIRE(tok->n_vocab() == 32000);
    CHECK(tok->bos_id() == 1);
    CHECK(tok->eos_id() == 2);
    CHECK(tok->add_bos());

    CHECK(tok->encode("Hello world", true) == Ids{1, 15043, 3186});
    CHECK(tok->encode("Once upon a time", true) == Ids{1, 9038, 2501, 263, 931});

    // llama.cpp's tests/test-tokenizer-0 (llama-spm), without BOS.
    struct Case {
        std::string text;
        Ids ids;
    };
    const std::vector<Case> cases = {
        {"", {}},
        {" ", {259}},
        {"  ", {1678}},
        {"   ", {268}},
        {"\t", {29871, 12}},
        {"\n", {29871, 13}},
        {"\t\n", {29871, 12, 13}},
        {"Hello world", {15043, 3186}},
        {" Hello world", {29871, 15043, 3186}},
        {"Hello World", {15043, 2787}},
        {" Hello World", {29871, 15043, 2787}},
        {" Hello World!", {29871, 15043, 2787, 29991}},
        {"Hello, world!", {15043, 29892, 3186, 29991}},
        {" Hello, world!", {29871, 15043, 29892, 3186, 29991}},
        {" this is \xF0\x9F\xA6\x99.cpp", {29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223}},
        {"w048 7tuijk dsdfhu", {281, 29900, 29946, 29947, 29871, 29955, 9161, 13535, 18031, 2176, 6905}},
        {"\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0 \xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8",
         {1538, 4851, 665, 1386, 29713, 1305}},  // "нещо на Български"
        {"Hello", {15043}},
        {" Hello", {29871, 15043}},
        {"  Hello", {259, 15043}},
        {"   Hello", {1678, 15043}},
        {"    Hello", {268, 15043}},
        {"    Hello\n    Hello", {268, 15043, 13, 1678, 15043}},
    };
    for (const Case& c : cases) {
        INFO("text: '" << c.text << "'");
        CHECK(tok->encode(c.text, false) == c.ids);
    }
}

TEST_CASE("the Llama-2 vocabulary round-trips hard texts through encode and decode", "[tokenizer][model]") {
    REQUIRE_REAL_TOKENIZER(tok);
    const std::vector<std::string> texts = {
        "Hello world",
        "Once upon a time",
        "",
        " leading space",
        "double  space   and three",
        "trailing space ",
        "line one\nline two\n\n",
        "\ttabbed\tcolumns",
        "caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9" "e",  // café crème brûlée
        "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",              // 日本語
        "emoji \xF0\x9F\x98\x80 and \xF0\x9F\xA6\x99!",     // 😀 🦙
        "<s></s>",                                           // special-looking text, not parsed
        "<unk> <s> x",
        "1234567890 +-*/ {}[]()",
    };
    for (const std::string& text : texts) {
        INFO("text: '" << text << "'");
        for (const bool bos : {true, false}) {
            const Ids ids = tok->encode(text, bos);
            CHECK(tok->decode(ids) == text);
            Tokenizer::StreamDecoder stream(*tok);
            std::string streamed;
            for (const int32_t id : ids) streamed += stream.push(id);
            streamed += stream.flush();
            CHECK(streamed == text);
        }
    }
    // A newline alone is byte token <0x0A> = 13.
    CHECK(tok->encode("\n", false) == Ids{29871, 13});
    CHECK(tok->token_type(13) == TokenType::Byte);
    // An emoji without its own token is four byte tokens.
    CHECK(tok->encode("\xF0\x9F\x98\x80", false) == Ids{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80});
}

TEST_CASE("the Llama-2 vocabulary parses special tokens only when asked", "[tokenizer][model]") {
    REQUIRE_REAL_TOKENIZER(tok);
    CHECK(tok->encode("<s></s>", true, true) == Ids{1, 1, 2});
    CHECK(tok->encode("<s>", false, true) == Ids{1});
    const Ids plain = tok->encode("<s></s>", true, false);
    CHECK(std::count(plain.begin(), plain.end(), 1) == 1);  // only the added BOS
    CHECK(std::count(plain.begin(), plain.end(), 2) == 0);
    CHECK(tok->decode(Ids{1, 1, 2}).empty());  // specials decode to nothing
}

TEST_CASE("streaming an emoji made of byte tokens emits it at the fourth byte", "[tokenizer][model]") {
    REQUIRE_REAL_TOKENIZER(tok);
    const Ids ids = tok->encode("Hi \xF0\x9F\x98\x80!", true);
    Tokenizer::StreamDecoder stream(*tok);
    std::vector<std::string> pieces;
    for (const int32_t id : ids) pieces.push_back(stream.push(id));
    const std::string tail = stream.flush();
    // BOS, Hi, ▁, F0, 9F, 98, 80, !
    REQUIRE(ids.size() == 8);
    CHECK(ids[3] == 3 + 0xF0);
    CHECK(pieces[3].empty());
    CHECK(pieces[4].empty());
    CHECK(pieces[5].empty());
    CHECK(pieces[6] == "\xF0\x9F\x98\x80");
    std::string all;
    for (const std::string& p : pieces) all += p;
    CHECK(all + tail == tok->decode(ids));
    CHECK(all + tail == "Hi \xF0\x9F\x98\x80!");
}

#ifdef SPECD_HAVE_GGUF
TEST_CASE("the GGUF vocabulary equals the llama2.c tokenizer mapped back", "[tokenizer][model]") {
    if (!specd::test::model_exists(kModelFile)) {
        WARN(specd::test::model_path(kModelFile) << " is missing (run tools/fetch-model.sh); skipping");
        return;
    }
    const std::optional<VocabData> raw = load_llama2c_vocab();
    if (!raw) {
        WARN("llama2.data not found (set SPECD_LLAMA2_DATA); skipping");
        return;
    }
    const Tokenizer gguf = Tokenizer::from_gguf(specd::gguf::File::open(specd::test::model_path(kModelFile)));
    const VocabData& v = gguf.vocab();
    REQUIRE(v.tokens.size() == raw->tokens.size());
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        INFO("token " << i);
        REQUIRE(v.tokens[i] == raw->tokens[i]);
        REQUIRE(v.scores[i] == raw->scores[i]);
        REQUIRE(v.token_types[i] == raw->token_types[i]);
    }
    CHECK(v.bos_id == 1);
    CHECK(v.eos_id == 2);
    CHECK(v.unk_id == 0);
    CHECK(v.add_bos);
    CHECK(v.add_space_prefix);
}
#endif
