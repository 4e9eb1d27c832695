// libFuzzer target for the JSON Schema → GBNF converter (response_format
// json_schema, llama-server's json_schema): the input is schema text.
//
// Invariants:
//  1. It returns or throws specd::Error (anything else escapes uncaught and
//     is reported), whose message starts "json_schema: " and is one line.
//  2. A returned grammar parses (Grammar::parse), so a schema the API
//     accepts never fails later in the session.
// Built by tools/fuzz.sh (clang-14, ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/grammar.h"
#include "engine/json_schema_grammar.h"

namespace {
[[noreturn]] void fail(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz_json_schema: %s: %s\n", what, detail.c_str());
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    std::string gbnf;
    try {
        gbnf = specd::json_schema_to_grammar(text);
    } catch (const specd::Error& e) {
        const std::string m = e.what();
        if (m.rfind("json_schema: ", 0) != 0) fail("an error not starting with json_schema: ", m);
        if (m.find('\n') != std::string::npos) fail("a multi-line error", m);
        return 0;
    }
    try {
        specd::Grammar::parse(gbnf);
    } catch (const specd::Error& e) {
        fail("a grammar that does not parse", std::string(e.what()) + "\n" + gbnf);
    }
    return 0;
}
