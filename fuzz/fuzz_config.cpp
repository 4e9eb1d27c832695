// libFuzzer target for the config loader: config file text (arbitrary
// bytes, as `--config FILE`, SPECD_CONFIG or a SIGHUP reload reads it)
// through ConfigLoader::load_json. finish() is not called: it checks that
// the model paths exist, which no fuzzed file names.
//
// Properties checked on every input:
//  1. load_json either returns or throws specd::Error (any other exception
//     is uncaught here and libFuzzer reports it), and the Error's message
//     starts "config: ", is valid UTF-8 (it goes to the log and the
//     terminal), does not quote the JSON library, and is one line when the
//     text is not JSON.
//  2. A loaded config can be shown: describe() is valid UTF-8 and
//     describe_json() (`specd config --json`) parses as JSON; validate()
//     throws nothing but specd::Error; changed_fields() against the
//     defaults names only keys the file set.
// Built by tools/fuzz.sh (clang-14, ASan + UBSan); seeds in fuzz/corpus/config/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "config/runtime_config.h"
#include "engine/error.h"
#include "fuzz/reply_checks.h"

namespace {

using specd::fuzz::fail;

constexpr const char* kTarget = "fuzz_config";

void check_error(const specd::Error& e, std::string_view input) {
    const std::string message = e.what();
    if (message.rfind("config: ", 0) != 0) fail(kTarget, "config error not starting \"config: \": " + message);
    specd::fuzz::check_message(kTarget, message, input, !nlohmann::json::accept(input));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    specd::ConfigLoader loader;
    try {
        loader.load_json(text, "fuzz");
    } catch (const specd::Error& e) {
        check_error(e, text);
        return 0;
    }
    if (!specd::fuzz::is_utf8(loader.describe())) fail(kTarget, "describe() is not valid UTF-8");
    specd::fuzz::parse_reply(kTarget, loader.describe_json());
    try {
        loader.config().validate();
    } catch (const specd::Error& e) {
        check_error(e, text);
    }
    // Only keys the file named can differ from the defaults.
    for (const std::string& key : specd::changed_fields(specd::RuntimeConfig{}, loader.config())) {
        if (loader.source(key) != "fuzz") fail(kTarget, key + " changed but its source is " + loader.source(key));
    }
    return 0;
}
