// Byte-level BPE and the pre-tokenizers: small hand-made vocabularies, then
// llama.cpp's own tokenizer test vectors (test-tokenizer-0: every case of
// models/ggml-vocab-NAME.gguf.inp must give the ids of .gguf.out) on the
// real vocabularies of Llama 3, Qwen 2/3.5, GPT-2, DeepSeek, StarCoder, ...
// and on the SentencePiece ones (Llama 2, Phi-3), with round trips.
//
// The vocabularies come from tools/fetch-llama-cpp-vocab.sh, found in
// $SPECD_LLAMA_VOCAB_DIR or its default cache directory; without them these
// tests print "skipped: llama.cpp vocabulary files not fetched" (ctest then
// reports them as skipped).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"

using specd::DecodeAt;
using specd::PreTokenizer;
using specd::TextSpan;
using specd::Tokenizer;
using specd::TokenType;
using specd::VocabData;
using specd::VocabKind;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

namespace {

// ------------------------------------------------------------- helpers ---

std::string vocab_dir() {
    if (const char* env = std::getenv("SPECD_LLAMA_VOCAB_DIR"); env && *env) return env;
    std::string cache;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
        cache = xdg;
    } else if (const char* home = std::getenv("HOME"); home && *home) {
        cache = std::string(home) + "/.cache";
    } else {
        return "";
    }
    return cache + "/specd/llama-cpp-vocab-3.22.1";
}

std::string vocab_path(const std::string& name) { return vocab_dir() + "/ggml-vocab-" + name + ".gguf"; }

// False (after saying so, in words ctest's SKIP_REGULAR_EXPRESSION knows)
// when the vocabulary or its vectors were not fetched.
bool have_vocab(const std::string& name) {
    const std::string path = vocab_path(name);
    if (fs::exists(path) && fs::exists(path + ".inp") && fs::exists(path + ".out")) return true;
    WARN("skipped: llama.cpp vocabulary files not fetched (" << path << "; run tools/fetch-llama-cpp-vocab.sh)");
    std::cout << "skipped: llama.cpp vocabulary files not fetched (" << path << ")\n";
    return false;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

struct Case {
    std::string text;
    Ids ids;
};

// llama.cpp's read_tests: inputs separated by "\n__ggml_vocab_test__\n", one
// line of space-separated ids per input.
std::vector<Case> read_cases(const std::string& name) {
    const std::string raw = read_file(vocab_path(name) + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (size_t pos = 0; pos < raw.size();) {
        const size_t next = raw.find(sep, pos);
        if (next == std::string::npos) {
            inputs.push_back(raw.substr(pos));
            break;
        }
        inputs.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream out(vocab_path(name) + ".out");
    REQUIRE(out);
    std::vector<Case> cases;
    std::string line;
    for (size_t i = 0; std::getline(out, line); ++i) {
        REQUIRE(i < inputs.size());
        Case c{inputs[i], {}};
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    REQUIRE(cases.size() == inputs.size());
    return cases;
}

// Control characters and bytes of invalid UTF-8 written as \xNN, so that
// two texts that differ print differently.
std::string printable(const std::string& s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        std::string ignored;
        const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
        const bool valid = len > 0 && i + len <= s.size() && !specd::sanitize_utf8(s.substr(i, len), ignored);
        if (b == '\n') {
            out += "\\n";
        } else if (valid && (b >= 0x20 && b != 0x7F)) {
            out.append(s, i, len);
            i += len;
            continue;
        } else {
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 15];
        }
        ++i;
    }
    return out;
}

std::string ids_text(const Ids& ids) {
    std::ostringstream s;
    for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
    return s.str();
}

Tokenizer load(const std::string& name) { return Tokenizer::from_gguf(specd::gguf::File::open(vocab_path(name))); }

// Every case of llama.cpp's vectors: the same ids (add_special = false,
// parse_special = false, as test-tokenizer-0), and the ids decode back to
// the input. Returns the number of cases.
size_t check_vectors(const std::string& name) {
    const Tokenizer tok = load(name);
    const std::vector<Case> cases = read_cases(name);
    size_t n_equal = 0, n_round_trips = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const Ids ids = tok.encode(c.text, false, false);
        INFO(name << " case " << i << ": '" << printable(c.text) << "'");
        CHECK(ids_text(ids) == ids_text(c.ids));
        n_equal += ids == c.ids;
        const std::string decoded = tok.decode(ids);
        CHECK(printable(decoded) == printable(c.text));
        n_round_trips += decoded == c.text;
    }
    std::cout << name << ": " << n_equal << "/" << cases.size() << " cases give llama.cpp's ids, " << n_round_trips
              << "/" << cases.size() << " decode back to their text\n";
    return cases.size();
}

// The queue merge (long words) and the scan merge (short ones) agree on
// every word of the vectors and on long runs.
void check_merge_strategies(const std::string& name) {
    const Tokenizer tok = load(name);
    REQUIRE(tok.kind() == VocabKind::Bpe);
    const VocabData& v = tok.vocab();
    const PreTokenizer pre(v.pre);
    const specd::bpe::Merger merger(v.tokens, v.merges, [&](std::string_view t) { return tok.find_token(t); },
                                    pre.traits().byte_level ? specd::bpe::Alphabet::Bytes : specd::bpe::Alphabet::Utf8);
    std::vector<std::string> words;
    for (const Case& c : read_cases(name)) {
        std::string text = c.text;
        if (pre.traits().escape_spaces) {
            text.clear();
            for (const char ch : c.text) text += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
        }
        std::vector<TextSpan> spans;
        pre.split(text, spans);
        for (const TextSpan s : spans) words.push_back(text.substr(s.offset, s.size));
    }
    words.push_back(std::string(300, 'a'));
    words.push_back("supercalifragilisticexpialidocious" + std::string(200, 'z') + "tokenization");
    std::string mixed;
    for (int i = 0; i < 400; ++i) mixed += static_cast<char>("abcdefghij"[(i * 7) % 10]);
    words.push_back(mixed);
    for (const std::string& w : words) {
        Ids scan, queue;
        merger.encode_word_scan(w, scan);
        merger.encode_word_queue(w, queue);
        INFO(name << " word '" << printable(w) << "'");
        CHECK(scan == queue);
    }
}

// A byte-level vocabulary: the 256 byte characters (ids 0..255 in byte
// order), then `extra` tokens, then "<|endoftext|>" (Control).
VocabData byte_vocab(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                     const std::string& pre = "gpt-2") {
    VocabData v;
    v.kind = VocabKind::Bpe;
    for (int b = 0; b < 256; ++b) v.tokens.emplace_back(specd::bpe::byte_to_text(static_cast<uint8_t>(b)));
    for (const std::string& e : extra) v.tokens.push_back(e);
    v.tokens.push_back("<|endoftext|>");
    v.token_types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
    v.token_types.back() = static_cast<int32_t>(TokenType::Control);
    v.merges = merges;
    v.pre = pre;
    v.bos_id = v.eos_id = static_cast<int32_t>(v.tokens.size()) - 1;
    v.unk_id = -1;
    v.add_bos = false;
    v.add_space_prefix = false;
    return v;
}

std::vector<std::string> words_of(const PreTokenizer& pre, const std::string& text) {
    std::vector<TextSpan> spans;
    pre.split(text, spans);
    std::vector<std::string> words;
    for (const TextSpan s : spans) words.push_back(text.substr(s.offset, s.size));
    return words;
}

}  // namespace

// ------------------------------------------------------ byte mapping ----

TEST_CASE("byte-level text maps every byte to one character and back", "[tokenizer_bpe]") {
    CHECK(specd::bpe::byte_to_text(' ') == "\xC4\xA0");   // "Ġ"
    CHECK(specd::bpe::byte_to_text('\n') == "\xC4\x8A");  // "Ċ"
    CHECK(specd::bpe::byte_to_text('a') == "a");
    CHECK(specd::bpe::byte_to_text(0xE9) == "\xC3\xA9");  // "é" stands for itself
    std::string all;
    for (int b = 0; b < 256; ++b) all += specd::bpe::byte_to_text(static_cast<uint8_t>(b));
    std::string bytes;
    REQUIRE(specd::bpe::text_to_bytes(all, bytes));
    REQUIRE(bytes.size() == 256);
    for (int b = 0; b < 256; ++b) CHECK(static_cast<unsigned char>(bytes[static_cast<size_t>(b)]) == b);
    std::string none;
    CHECK_FALSE(specd::bpe::text_to_bytes("\xE4\xB8\x80", none));  // "一" stands for no byte
}

// ---------------------------------------------------- pre-tokenizers ----

TEST_CASE("the gpt-2 pre-tokenizer splits words, numbers, punctuation and spaces as GPT-2's regex", "[tokenizer_bpe]") {
    const PreTokenizer pre("gpt-2");
    CHECK(words_of(pre, "Hello world") == std::vector<std::string>{"Hello", " world"});
    CHECK(words_of(pre, "I'm 42 years!!  ok") ==
          std::vector<std::string>{"I", "'m", " 42", " years", "!!", " ", " ok"});
    CHECK(words_of(pre, "a\n\nb") == std::vector<std::string>{"a", "\n", "\n", "b"});
    CHECK(words_of(pre, "tail   ") == std::vector<std::string>{"tail", "   "});
}

TEST_CASE("the llama3 pre-tokenizer groups digits by three and keeps newlines with spaces", "[tokenizer_bpe]") {
    const PreTokenizer pre("llama-bpe");
    CHECK(pre.traits().name == "llama3");
    CHECK(pre.traits().ignore_merges);
    CHECK(words_of(pre, "1234567") == std::vector<std::string>{"123", "456", "7"});
    CHECK(words_of(pre, "HELLO'S  \n\nx") == std::vector<std::string>{"HELLO", "'S", "  \n\n", "x"});
    CHECK(words_of(pre, "(hi)") == std::vector<std::string>{"(hi", ")"});
}

TEST_CASE("qwen2 splits every digit, and deepseek-coder splits CJK from letters", "[tokenizer_bpe]") {
    CHECK(words_of(PreTokenizer("qwen2"), "2024年") == std::vector<std::string>{"2", "0", "2", "4", "年"});
    CHECK(words_of(PreTokenizer("deepseek-coder"), "ab一二 cd") == std::vector<std::string>{"ab", "一二", " cd"});
}

TEST_CASE("an unknown pre-tokenizer name is one error naming it and the known ones", "[tokenizer_bpe]") {
    try {
        PreTokenizer pre("no-such-pre");
        FAIL("no error");
    } catch (const specd::Error& e) {
        const std::string msg = e.what();
        CHECK(msg.find("no-such-pre") != std::string::npos);
        CHECK(msg.find("llama-bpe") != std::string::npos);
        CHECK(msg.find('\n') == std::string::npos);
    }
}

TEST_CASE("text that is not UTF-8 is read as llama.cpp reads it: bad bytes become U+FFFD", "[tokenizer_bpe]") {
    std::string out;
    CHECK_FALSE(specd::sanitize_utf8("plain \xC3\xA9", out));
    REQUIRE(specd::sanitize_utf8("a\xFF" "b\xC3", out));
    CHECK(out == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
    REQUIRE(specd::sanitize_utf8("\xC0\x80x", out));  // an overlong NUL is read as NUL
    CHECK(out == std::string("\0x", 2));
}

// ------------------------------------------------- small vocabularies ----

TEST_CASE("merges apply lowest rank first, leftmost first, and decode back to the bytes", "[tokenizer_bpe]") {
    // Tokens 256 "ll", 257 "he", 258 "hell", 259 "hello", 260 "Ġh"; merge ranks
    // "l l" 0 < "h e" 1 < "he ll" 2 < "hell o" 3 < "Ġ h" 4. Ids 0..255 are the bytes.
    VocabData v = byte_vocab({"ll", "he", "hell", "hello", "\xC4\xA0h"},
                             {"l l", "h e", "he ll", "hell o", "\xC4\xA0 h"});
    const Tokenizer tok(v);
    CHECK(tok.encode("hello", false) == Ids{259});
    // " hello" is one word; "h e" (1) beats "Ġ h" (4), and "Ġ he" is no merge.
    CHECK(tok.encode(" hello", false) == Ids{' ', 259});
    CHECK(tok.encode("lll", false) == Ids{256, 'l'});
    CHECK(tok.decode(tok.encode(" hello\n\tw\xC3\xA9", false)) == " hello\n\tw\xC3\xA9");
    CHECK(tok.token_to_piece(tok.find_token("\xC4\xA0h")) == " h");
}

TEST_CASE("a merge result that is no token comes out as its characters' tokens", "[tokenizer_bpe]") {
    // "a b" makes "ab", which is not in the vocabulary, then "ab c" makes "abc".
    VocabData v = byte_vocab({"abc"}, {"a b", "ab c"});
    const Tokenizer tok(v);
    CHECK(tok.encode("abc", false) == Ids{256});
    CHECK(tok.encode("ab", false) == Ids{'a', 'b'});
}

TEST_CASE("special tokens: Control only with parse_special, BOS and EOS as the vocabulary says", "[tokenizer_bpe]") {
    VocabData v = byte_vocab({}, {"a b"});
    v.add_bos = true;
    v.add_eos = true;
    const Tokenizer tok(v);
    const int32_t eot = tok.find_token("<|endoftext|>");
    CHECK(tok.encode("x<|endoftext|>", false, true) == Ids{'x', eot});
    CHECK(tok.encode("x<|endoftext|>", false, false).size() > 2);
    CHECK(tok.encode("x", true) == Ids{eot, 'x', eot});
    CHECK(tok.decode(Ids{'x', eot}) == "x");
    CHECK(tok.token_to_piece(eot, true) == "<|endoftext|>");
}

TEST_CASE("a byte-level vocabulary without merges or with an unknown pre-tokenizer is refused", "[tokenizer_bpe]") {
    CHECK_THROWS_WITH(Tokenizer(byte_vocab({}, {})), Catch::Contains("merges"));
    CHECK_THROWS_WITH(Tokenizer(byte_vocab({}, {"a b"}, "qwen9")), Catch::Contains("unknown pre-tokenizer \"qwen9\""));
}

// GGUF files written here: the loader's keys and messages.
namespace {

using KeyValues = std::vector<std::pair<std::string, specd::gguf::Value>>;

std::string write_vocab_gguf(const std::string& file, const KeyValues& kv) {
    const std::string path = (fs::temp_directory_path() / file).string();
    specd::gguf::Writer w;
    for (const auto& [key, value] : kv) w.set(key, value);
    w.write(path);
    return path;
}

std::vector<std::pair<std::string, specd::gguf::Value>> gpt2_keys(bool with_merges, const char* pre) {
    using specd::gguf::Value;
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(specd::bpe::byte_to_text(static_cast<uint8_t>(b)));
    tokens.push_back("ab");
    tokens.push_back("<|im_end|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    std::vector<std::pair<std::string, Value>> kv = {
        {"general.architecture", Value::str("llama")},
        {"tokenizer.ggml.model", Value::str("gpt2")},
        {"tokenizer.ggml.tokens", Value::string_array(tokens)},
        {"tokenizer.ggml.token_type", Value::i32_array(types)},
        {"tokenizer.ggml.eos_token_id", Value::u32(257)},
        {"tokenizer.ggml.bos_token_id", Value::u32(257)},
    };
    if (with_merges) kv.push_back({"tokenizer.ggml.merges", Value::string_array({"a b"})});
    if (pre) kv.push_back({"tokenizer.ggml.pre", Value::str(pre)});
    return kv;
}

}  // namespace

TEST_CASE("from_gguf: gpt2 without merges, an unknown pre-tokenizer and a missing one", "[tokenizer_bpe]") {
    const std::string no_merges = write_vocab_gguf("specd-bpe-no-merges.gguf", gpt2_keys(false, "qwen2"));
    CHECK_THROWS_WITH(Tokenizer::from_gguf(specd::gguf::File::open(no_merges)),
                      Catch::Contains("tokenizer.ggml.merges is missing"));
    const std::string unknown = write_vocab_gguf("specd-bpe-unknown-pre.gguf", gpt2_keys(true, "brand-new"));
    CHECK_THROWS_WITH(Tokenizer::from_gguf(specd::gguf::File::open(unknown)),
                      Catch::Contains("unknown pre-tokenizer \"brand-new\""));
    const std::string missing = write_vocab_gguf("specd-bpe-missing-pre.gguf", gpt2_keys(true, nullptr));
    const Tokenizer tok = Tokenizer::from_gguf(specd::gguf::File::open(missing));
    CHECK(tok.vocab().pre == "default");
    REQUIRE(tok.vocab().warnings.size() == 1);
    CHECK(tok.vocab().warnings[0].find("tokenizer.ggml.pre is missing") != std::string::npos);
    CHECK(tok.encode("ab", false) == Ids{256});
    // "<|im_end|>" ends generation (llama.cpp finds it by its text).
    CHECK(tok.is_end_of_generation(257));
    CHECK_FALSE(tok.is_end_of_generation(256));
    fs::remove(no_merges);
    fs::remove(unknown);
    fs::remove(missing);
}

// ---------------------------------------------- llama.cpp's vectors ----

#define SPECD_VOCAB_VECTOR_TEST(NAME)                                                                  \
    TEST_CASE("llama.cpp's test-tokenizer-0 vectors for ggml-vocab-" NAME " give identical ids and "  \
              "round-trip",                                                                          \
              "[tokenizer_bpe][llama_cpp_vectors]") {                                                 \
        if (!have_vocab(NAME)) return;                                                               \
        CHECK(check_vectors(NAME) > 0);                                                              \
    }

SPECD_VOCAB_VECTOR_TEST("llama-bpe")
SPECD_VOCAB_VECTOR_TEST("qwen2")
SPECD_VOCAB_VECTOR_TEST("qwen35")
SPECD_VOCAB_VECTOR_TEST("gpt-2")
SPECD_VOCAB_VECTOR_TEST("deepseek-coder")
SPECD_VOCAB_VECTOR_TEST("deepseek-llm")
SPECD_VOCAB_VECTOR_TEST("starcoder")
SPECD_VOCAB_VECTOR_TEST("refact")
SPECD_VOCAB_VECTOR_TEST("command-r")
SPECD_VOCAB_VECTOR_TEST("falcon")
SPECD_VOCAB_VECTOR_TEST("mpt")
SPECD_VOCAB_VECTOR_TEST("llama-spm")
SPECD_VOCAB_VECTOR_TEST("phi-3")
SPECD_VOCAB_VECTOR_TEST("gemma-4")

TEST_CASE("the queue and the scan merge give the same tokens on real vocabularies", "[tokenizer_bpe]") {
    for (const char* name : {"llama-bpe", "qwen2", "gpt-2", "deepseek-llm", "gemma-4"}) {
        if (!have_vocab(name)) return;
        check_merge_strategies(name);
    }
}

TEST_CASE("real vocabularies: kind, add_bos and the end-of-generation set as llama.cpp loads them",
          "[tokenizer_bpe]") {
    if (!have_vocab("llama-bpe") || !have_vocab("qwen2")) return;
    const Tokenizer llama3 = load("llama-bpe");
    CHECK(llama3.kind() == VocabKind::Bpe);
    CHECK(llama3.add_bos());  // the llama3 pre-tokenizer implies it
    CHECK(llama3.bos_id() == 128000);
    CHECK(llama3.is_end_of_generation(llama3.find_token("<|eot_id|>")));
    CHECK(llama3.is_end_of_generation(llama3.find_token("<|end_of_text|>")));
    CHECK_FALSE(llama3.is_end_of_generation(llama3.find_token("<|start_header_id|>")));
    CHECK(llama3.encode("<|start_header_id|>user<|end_header_id|>", false, true).size() == 3);
    const Tokenizer qwen = load("qwen2");
    CHECK_FALSE(qwen.add_bos());
    CHECK(qwen.is_end_of_generation(qwen.find_token("<|im_end|>")));
    CHECK(qwen.is_end_of_generation(qwen.find_token("<|endoftext|>")));
    CHECK_FALSE(qwen.is_end_of_generation(qwen.find_token("<|im_start|>")));
    const Ids chat = qwen.encode("<|im_start|>user\nhi<|im_end|>", false, true);
    CHECK(chat.front() == qwen.find_token("<|im_start|>"));
    CHECK(chat.back() == qwen.find_token("<|im_end|>"));
    CHECK(qwen.decode(chat) == "user\nhi");
}

TEST_CASE("Phi-3's special tokens swallow the whitespace after them, as llama.cpp's rstrip", "[tokenizer_bpe]") {
    if (!have_vocab("phi-3")) return;
    const Tokenizer phi3 = load("phi-3");
    const int32_t user = phi3.find_token("<|user|>");
    REQUIRE(user >= 0);
    const Ids stripped = phi3.encode("<|user|>\n  Hello<|end|>", false, true);
    CHECK(stripped == phi3.encode("<|user|>Hello<|end|>", false, true));
    CHECK(stripped.front() == user);
    // "<s>" is left alone: the text after it keeps its space.
    CHECK(phi3.encode("<s> Hi", false, true) != phi3.encode("<s>Hi", false, true));
}

TEST_CASE("Gemma 4: BPE on UTF-8 with spaces as \"▁\", byte tokens for what it lacks", "[tokenizer_bpe]") {
    if (!have_vocab("gemma-4")) return;
    const Tokenizer gemma = load("gemma-4");
    CHECK(gemma.kind() == VocabKind::Bpe);
    CHECK(gemma.vocab().pre == "gemma4");
    CHECK(gemma.add_bos());
    CHECK(gemma.is_end_of_generation(gemma.find_token("<turn|>")));
    const std::string text = " Hello  world\n\n\ttabs \xF0\x9F\xA6\x99 \xE1\x9E\x80";
    CHECK(gemma.decode(gemma.encode(text, false)) == text);
}

TEST_CASE("random text and bytes: ids in range, and decoding gives the text back (bad UTF-8 as U+FFFD) "
          "where the vocabulary has every byte",
          "[tokenizer_bpe]") {
    // Fragments that stress the pre-tokenizers and merges, mixed at random.
    const std::vector<std::string> fragments = {
        " ", "  ", "\n", "\r\n", "\t", "a", "Hello", " world", "'s", "'LL", "123", "4567890", "!?", "((", "\xC3\xA9",
        "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\xA6\x99", "\xE2\x80\x8D", "\xCC\x81", "\xE1\x9E\x80", "\xD7\xA9",
        "<|endoftext|>", "<s>", "\xFF", "\xC3", "\xE2\x82", "\x80", "\xC0\x80", "\xED\xA0\x80", std::string(1, '\0'),
        "\x01", "\xC2\x85", "\xC2\xA0", "\xE3\x80\x80"};
    uint64_t state = 0x9E3779B97F4A7C15ull;
    const auto next = [&] {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state;
    };
    for (const char* name : {"llama-bpe", "qwen2", "deepseek-llm", "falcon", "gemma-4"}) {
        if (!have_vocab(name)) return;
        const Tokenizer tok = load(name);
        // Only a vocabulary with a token for every byte can give every text
        // back (Falcon's lacks 28: llama.cpp drops those bytes, and so do we).
        const bool byte_level = PreTokenizer(tok.vocab().pre).traits().byte_level;
        bool every_byte = true;
        for (int b = 0; b < 256; ++b) {
            static const char* hex = "0123456789ABCDEF";
            const std::string spelled = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
            every_byte &= tok.find_token(byte_level ? std::string(specd::bpe::byte_to_text(static_cast<uint8_t>(b)))
                                                    : spelled) >= 0;
        }
        for (int round = 0; round < 300; ++round) {
            std::string text;
            const size_t n = next() % 40;
            for (size_t i = 0; i < n; ++i) text += fragments[next() % fragments.size()];
            if (round % 7 == 0) {
                for (size_t i = next() % 64; i > 0; --i) text += static_cast<char>(next() & 0xFF);
            }
            INFO(name << " '" << printable(text) << "'");
            const Ids ids = tok.encode(text, false, false);
            for (const int32_t id : ids) REQUIRE((id >= 0 && id < tok.n_vocab()));
            std::string expected = text;
            specd::sanitize_utf8(text, expected);
            const bool escapes_spaces = PreTokenizer(tok.vocab().pre).traits().escape_spaces;
            if (every_byte && (!escapes_spaces || expected.find("\xE2\x96\x81") == std::string::npos)) {
                CHECK(printable(tok.decode(ids)) == printable(expected));
            }
        }
    }
}

// ------------------------------------------------------------- speed ----

TEST_CASE("tokenizing 1 MB of mixed text: tokens per second", "[tokenizer_bpe][speed]") {
    if (!have_vocab("llama-bpe")) return;
    // Mixed text: every input of the vectors (English, code, CJK, emoji,
    // Cyrillic, Khmer, whitespace runs, numbers) over and over.
    std::string text;
    for (const char* name : {"llama-bpe", "qwen2", "deepseek-llm", "starcoder"}) {
        if (!have_vocab(name)) return;
        for (const Case& c : read_cases(name)) text += c.text + "\n";
    }
    const std::string unit = text;
    while (text.size() < (1u << 20)) text += unit;
    text.resize(1u << 20);
    // End on a whole character.
    while (static_cast<unsigned char>(text.back()) >= 0x80) text.pop_back();
    for (const char* name : {"llama-bpe", "qwen2", "gpt-2"}) {
        const Tokenizer tok = load(name);
        tok.encode(text.substr(0, 4096), false);  // warm up (JIT, thread-local buffers)
        const auto t0 = std::chrono::steady_clock::now();
        const Ids ids = tok.encode(text, false);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << "tokenize " << name << ": " << text.size() << " bytes -> " << ids.size() << " tokens in "
                  << seconds * 1e3 << " ms = " << static_cast<double>(ids.size()) / seconds << " tokens/s, "
                  << static_cast<double>(text.size()) / seconds / 1e6 << " MB/s\n";
        CHECK(tok.decode(ids) == text);
    }
}
