#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/grammar.h"
#include "engine/token_trie.h"
#include "engine/tokenizer.h"
#include "support/models.h"

using namespace specd;
using namespace specd::test;

namespace {
bool matches_whole(const std::shared_ptr<const Grammar>& g, const std::string& text) {
    GrammarMatcher m(g);
    return m.accept_bytes(text) && m.can_end();
}
bool is_prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
    GrammarMatcher m(g);
    return m.accept_bytes(text);
}
}  // namespace

TEST_CASE("grammar: literals, classes, groups, alternatives and repetitions match as GBNF defines them", "[grammar]") {
    const auto g = Grammar::parse(R"(
# a comment
root  ::= greet " " name ("!" | "?")? tail
greet ::= "hi" | "hello"
name  ::= [A-Z] [a-z]* # capitalised
tail  ::= [0-9]{2,3} | "-"+
)");
    CHECK(matches_whole(g, "hi Bob!12"));
    CHECK(matches_whole(g, "hello Al123"));
    CHECK(matches_whole(g, "hi X---"));
    CHECK_FALSE(matches_whole(g, "hi Bob!1"));       // {2,3}: one digit is too few
    CHECK_FALSE(is_prefix(g, "hi Bob!1234"));        // four is too many
    CHECK_FALSE(is_prefix(g, "hey"));
    CHECK(is_prefix(g, "hel"));                      // a prefix is fine, not complete
    CHECK_FALSE(matches_whole(g, "hel"));
    CHECK_FALSE(is_prefix(g, "hi bob"));             // lower-case first letter
}

TEST_CASE("grammar: empty alternatives under a repetition reach each stack once (a fuzzer's grammar took 2 GB), and still match", "[grammar]") {
    std::string empties;
    for (int i = 0; i < 60; ++i) empties += "|";
    const auto g = Grammar::parse("root ::= \"a\" [b-d]* (\"x\" | \"y\"" + empties + "){7,33}\n");
    CHECK(matches_whole(g, "a"));  // every copy may be empty
    CHECK(matches_whole(g, "abcdxyxyxyxyxyxyxyxyxyxyx"));
    CHECK(matches_whole(g, "a" + std::string(33, 'x')));
    CHECK_FALSE(is_prefix(g, "a" + std::string(34, 'x')));
    CHECK_FALSE(is_prefix(g, "axb"));
}

TEST_CASE("grammar: negated classes, any character, escapes and multi-byte UTF-8 split across feeds", "[grammar]") {
    const auto g = Grammar::parse(R"(root ::= "\"" [^"\n]* "\"" . "\u00e9" [\x41-\x43])");
    CHECK(matches_whole(g, "\"abc\"xéB"));
    CHECK(matches_whole(g, "\"日本\"😀éA"));
    CHECK_FALSE(is_prefix(g, "\"a\nb"));
    GrammarMatcher m(g);
    REQUIRE(m.accept_bytes("\"\"x"));
    const std::string e_acute = "é";  // 2 bytes
    REQUIRE(m.accept_bytes(e_acute.substr(0, 1)));  // half a character: possible
    CHECK_FALSE(m.can_end());
    REQUIRE(m.accept_bytes(e_acute.substr(1)));
    CHECK_FALSE(m.accept_bytes("D"));                // outside [A-C]; state unchanged
    CHECK(m.accept_bytes("C"));
    CHECK(m.can_end());
    CHECK(m.must_end());
    // A lead byte that can only become a character the grammar refuses.
    GrammarMatcher n(Grammar::parse(R"(root ::= [a-z]+)"));
    CHECK_FALSE(n.accept_bytes("\xe6"));
    CHECK_FALSE(n.accept_bytes("\xff"));      // never valid UTF-8
    CHECK_FALSE(n.accept_bytes("\xc1\xa1"));  // an overlong 'a'
    CHECK_FALSE(n.accept_bytes("\xc0"));      // can only start an overlong form
}

TEST_CASE("grammar: the JSON object grammar accepts JSON objects and nothing else", "[grammar]") {
    const auto g = Grammar::json_object();
    for (const char* ok : {R"({})", R"({"a": 1})", R"({"a": [1, -2.5e3, true, null, "x\n\u00e9"], "b": {"c": {}}})", "{\n  \"k\": \"v\"\n}"}) {
        INFO(ok);
        CHECK(matches_whole(g, ok));
    }
    for (const char* bad : {R"([1])", R"({"a": 01})", R"({'a': 1})", R"({"a" 1})", R"({"a": tru})", "\"x\""}) {
        INFO(bad);
        CHECK_FALSE(matches_whole(g, bad));
    }
    CHECK_FALSE(is_prefix(g, std::string("{") + std::string(40, ' ')));  // whitespace is bounded
}

TEST_CASE("grammar: bad grammars are one-line errors naming the line, column or rule", "[grammar]") {
    auto message = [](const char* text) {
        try {
            Grammar::parse(text);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message("root ::= \"abc") == "grammar: line 1, column 14: unterminated string literal");
    CHECK(message("root ::= [a-") .find("unterminated character class") != std::string::npos);
    CHECK(message("root ::= foo") == "grammar: rule 'foo' is used but never defined");
    CHECK(message("start ::= \"a\"") == "grammar: no root rule 'root'");
    CHECK(message("root ::= root \"a\" | \"b\"") == "grammar: left recursion through rule 'root' (not supported, as in llama.cpp)");
    CHECK(message("root ::= x \"a\"\nx ::= \"\" | root") .find("left recursion") != std::string::npos);
    CHECK(message("root ::= \"a\"{3,2}").find("maximum below its minimum") != std::string::npos);
    CHECK(message("root ::= \"ab\"{1000}{1000}").find("repetition too large") != std::string::npos);
    CHECK(message("root ::= \"a\"\nroot ::= \"b\"").find("defined twice") != std::string::npos);
    CHECK(message("root ::= \"\\q\"").find("unknown escape") != std::string::npos);
    CHECK(message("root ::= *").find("line 1") != std::string::npos);
}

TEST_CASE("grammar: the token mask admits exactly the tokens whose pieces keep the text in the grammar", "[grammar][tokenizer]") {
    auto model = load("stories15M-f32.gguf");
    const Tokenizer& tok = model->tokenizer();
    const auto g = Grammar::parse(R"(root ::= " Once upon a time" ("," | ".") " " [a-z]+ "." )");
    GrammarMatcher m(g);
    const TokenTrie trie(tok);
    std::vector<uint8_t> allowed;
    m.allowed_tokens(trie, allowed);
    REQUIRE(allowed.size() == static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        INFO("token " << id << " '" << tok.token_text(id) << "'");
        CHECK(static_cast<bool>(allowed[static_cast<size_t>(id)]) == m.allows_token(tok, id));
        const std::string_view piece = tok.piece_view(id);
        const bool want = !piece.empty() && !tok.is_end_of_generation(id) &&
                          std::string_view(" Once upon a time").substr(0, piece.size()) == piece;
        CHECK(static_cast<bool>(allowed[static_cast<size_t>(id)]) == want);
    }
    // Feeding the tokens of the text reaches the end, where only EOS may follow.
    for (int32_t id : tok.encode("Once upon a time, there.", false)) {  // SentencePiece adds the leading space
        INFO("token " << id << " '" << tok.token_text(id) << "'");
        REQUIRE(m.accept_token(tok, id));
    }
    CHECK(m.can_end());
    m.allowed_tokens(trie, allowed);
    CHECK(allowed[static_cast<size_t>(tok.eos_id())] == 1);
    int others = 0;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) others += allowed[static_cast<size_t>(id)] && id != tok.eos_id();
    CHECK(others == 0);
}

TEST_CASE("grammar: cached masks equal masks computed afresh at every step of a JSON reply", "[grammar][tokenizer]") {
    auto model = load("stories15M-f32.gguf");
    const Tokenizer& tok = model->tokenizer();
    const TokenTrie trie(tok);
    const auto g = Grammar::json_object();
    const std::vector<int32_t> ids = tok.encode(R"({"name": "Lily", "toys": ["ball", "doll"], "age": 3, "happy": true})", false);
    GrammarMatcher running(g);
    std::vector<uint8_t> cached, fresh;
    std::string prefix;
    for (const int32_t id : ids) {
        running.allowed_tokens(trie, cached);
        GrammarMatcher afresh(g);
        REQUIRE(afresh.accept_bytes(prefix));
        afresh.allowed_tokens(trie, fresh);
        INFO("after '" << prefix << "'");
        CHECK(cached == fresh);
        CHECK(cached[static_cast<size_t>(id)] == 1);  // the reply's own next token is allowed
        REQUIRE(running.accept_token(tok, id));
        prefix += tok.piece_view(id);
    }
    CHECK(running.can_end());
}

// A benchmark, not a test (hidden: run with "[.bench]"): the cost of one
// token mask over stories15M's 32k vocabulary while a JSON reply is fed,
// with the matcher's caches (one matcher for the reply) and without (a new
// matcher per step, so every state is computed afresh).
TEST_CASE("grammar: mask cost per token, cached and afresh", "[.bench]") {
    auto model = load("stories15M-f32.gguf");
    const Tokenizer& tok = model->tokenizer();
    const TokenTrie trie(tok);
    const auto g = Grammar::json_object();
    const std::vector<int32_t> ids = tok.encode(
        R"({"name": "Lily", "age": 3, "toys": ["ball", "doll", "red car"], "friends": [{"name": "Tom", "happy": true}], "note": "She likes to play in the park every day."})",
        false);
    std::vector<uint8_t> allowed;
    auto median_ms = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::vector<double> cached, afresh;
    GrammarMatcher running(g);
    std::string prefix;
    for (const int32_t id : ids) {
        auto t0 = std::chrono::steady_clock::now();
        running.allowed_tokens(trie, allowed);
        cached.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        GrammarMatcher fresh(g);
        REQUIRE(fresh.accept_bytes(prefix));
        t0 = std::chrono::steady_clock::now();
        fresh.allowed_tokens(trie, allowed);
        afresh.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        REQUIRE(running.accept_token(tok, id));
        prefix += tok.piece_view(id);
    }
    std::printf("grammar mask, json_object, %zu tokens, vocabulary %d: median %.3f ms cached, %.3f ms afresh\n", ids.size(),
                tok.n_vocab(), median_ms(cached), median_ms(afresh));
}
