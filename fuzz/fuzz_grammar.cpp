// libFuzzer target for GBNF grammars (llama-server's `grammar`, and the
// grammars response_format and tool_choice compile to): the input is
// grammar text, then a NUL byte, then text fed to a matcher of it.
//
// Properties checked on every input:
//  1. Grammar::parse returns or throws specd::Error (anything else is
//     uncaught and reported), whose message starts "grammar: ", is one line
//     and valid UTF-8 (it goes into a 400 reply).
//  2. A parsed grammar's matcher takes the text in pieces of 1-7 bytes:
//     a refused piece changes nothing (feeding it again is refused again),
//     and must_end() implies can_end().
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/grammar/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/grammar.h"
#include "fuzz/utf8_oracle.h"

namespace {
[[noreturn]] void fail(const char* what, std::string_view input) {
    std::fprintf(stderr, "fuzz_grammar: property violated: %s (%zu bytes)\n", what, input.size());
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const std::string_view gbnf = input.substr(0, nul);
    const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
    std::shared_ptr<const specd::Grammar> grammar;
    try {
        grammar = specd::Grammar::parse(gbnf);
    } catch (const specd::Error& e) {
        const std::string_view message = e.what();
        if (message.substr(0, 9) != "grammar: ") fail("error without the grammar: prefix", message);
        if (message.find('\n') != std::string_view::npos) fail("error message spans lines", message);
        if (!specd::fuzz::is_utf8(message)) fail("error message is not valid UTF-8", message);
        return 0;
    }
    specd::GrammarMatcher matcher(grammar);
    size_t at = 0, step = 1;
    while (at < text.size()) {
        const std::string_view piece = text.substr(at, step);
        if (!matcher.accept_bytes(piece) && matcher.accept_bytes(piece)) fail("a refused piece was accepted on a second try", piece);
        if (matcher.must_end() && !matcher.can_end()) fail("must_end without can_end", piece);
        at += piece.size();
        step = step % 7 + 1;
    }
    return 0;
}
