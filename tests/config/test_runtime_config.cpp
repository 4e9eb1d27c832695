// ConfigLoader: for every field, a JSON file beats the defaults, the
// environment beats the file and a flag beats the environment, and source()
// says which; every kind of bad value stops loading with one line naming the
// key, the value, where it came from and what is allowed; secrets never
// appear in describe(); typos of environment names are caught.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/runtime_config.h"
#include "engine/error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using specd::ConfigField;
using specd::ConfigLoader;
using Kind = ConfigField::Kind;

namespace {

struct ScratchDir {
    fs::path path;
    ScratchDir() {
        static int serial = 0;
        path = fs::temp_directory_path() / ("specd-config-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string file(const std::string& name, const std::string& content = "x") const {
        std::ofstream(path / name) << content;
        return (path / name).string();
    }
};

// The message of the specd::Error `fn` throws; fails the test if none.
template <class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const specd::Error& e) {
        return e.what();
    }
    FAIL("no specd::Error thrown");
    return "";
}

ConfigLoader::EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

// The current value of every field as `describe_json` reports it (secrets
// read through the struct, since the table shows them as ***).
std::map<std::string, std::string> values_of(const ConfigLoader& loader) {
    std::map<std::string, std::string> out;
    for (const json& f : json::parse(loader.describe_json())) out[f["key"].get<std::string>()] = f["value"].get<std::string>();
    out["api_key"] = loader.config().api_key;
    out["admin_key"] = loader.config().admin_key;
    return out;
}

std::string default_text(const ConfigField& f) { return values_of(ConfigLoader{}).at(f.key); }

// Three valid values for `f`, each different from its default and (where the
// kind has room) from each other: stage 0 for the file, 1 the environment,
// 2 a flag. Booleans only have two values, so stages 0 and 2 share one; the
// source tells them apart.
std::vector<std::string> stage_values(const ConfigField& f, const ScratchDir& dir) {
    const std::string def = default_text(f);
    std::vector<std::string> v;
    switch (f.kind) {
        case Kind::boolean: {
            const std::string other = def == "true" ? "false" : "true";
            return {other, def, other};
        }
        case Kind::integer: {
            const auto lo = static_cast<long long>(f.min), hi = static_cast<long long>(f.max);
            for (long long c : {lo, lo + 1, lo + 2, lo + 3, hi - 1, hi})
                if (c >= lo && c <= hi && std::to_string(c) != def && std::find(v.begin(), v.end(), std::to_string(c)) == v.end())
                    v.push_back(std::to_string(c));
            break;
        }
        case Kind::number:
            for (double share : {0.2, 0.4, 0.6}) {
                char buf[32];
                std::snprintf(buf, sizeof buf, "%.15g", f.min + (f.max - f.min) * share);
                v.push_back(buf);
            }
            break;
        case Kind::text:
            for (const char* s : {"from-file", "from-env", "from-flag"}) v.push_back(std::string(f.key) + "-" + s);
            break;
        case Kind::path:
            for (const char* s : {"file.gguf", "env.gguf", "flag.gguf"}) v.push_back(dir.file(std::string(f.key) + "-" + s));
            break;
        case Kind::choice:
            for (const char* c : f.choices)
                if (c != def) v.push_back(c);
            while (v.size() < 3) v.push_back(v.front());
            break;
        case Kind::sha256:
            for (char c : {'a', 'b', 'c'}) v.push_back(std::string(64, c));
            break;
    }
    REQUIRE(v.size() >= 3);
    v.resize(3);
    return v;
}

// The value as a typed JSON member of a config file.
json typed(const ConfigField& f, const std::string& text) {
    switch (f.kind) {
        case Kind::boolean: return text == "true";
        case Kind::integer: return std::stoll(text);
        case Kind::number: return std::stod(text);
        default: return text;
    }
}

}  // namespace

TEST_CASE("every field has a distinct key, environment variable and flag, and documents what it allows", "[config]") {
    std::map<std::string, int> seen;
    for (const ConfigField& f : specd::config_fields()) {
        INFO(f.key);
        CHECK(++seen[f.key] == 1);
        CHECK(++seen[f.env] == 1);
        CHECK(std::string(f.help).size() > 5);
        CHECK(specd::find_config_field(f.key) == specd::find_config_field(f.env));
        if (f.kind == Kind::integer || f.kind == Kind::number) CHECK(f.min < f.max);
    }
    // The deployment guide's names, exactly.
    for (const char* env : {"MAIN_MODEL_PATH", "DRAFT_MODEL_PATH", "MAX_DRAFT_TOKENS", "KV_CACHE_RATIO", "ENABLE_SPECULATIVE_DECODING",
                            "SPECD_HOST", "SPECD_PORT", "SPECD_API_KEY", "SPECD_THREADS", "SPECD_CTX_SIZE", "SPECD_MAX_SESSIONS",
                            "SPECD_QUEUE_LENGTH", "SPECD_LOG_LEVEL", "SPECD_LOG_FORMAT"}) {
        INFO(env);
        CHECK(specd::find_config_field(env) != nullptr);
    }
    const specd::RuntimeConfig defaults;
    CHECK(defaults.draft_max == 8);
    CHECK(defaults.kv_cache_ratio == Approx(0.85));
    CHECK(defaults.enable_speculative);
    CHECK(defaults.port == 8080);
}

TEST_CASE("for every field: file beats default, environment beats file, flag beats environment", "[config]") {
    ScratchDir dir;
    for (const ConfigField& f : specd::config_fields()) {
        SECTION(f.key) {
            const std::vector<std::string> v = stage_values(f, dir);
            ConfigLoader loader;
            CHECK(loader.source(f.key) == "default");

            loader.load_json(json{{f.key, typed(f, v[0])}}.dump(), "file test.json");
            CHECK(values_of(loader).at(f.key) == v[0]);
            CHECK(loader.source(f.key) == "file test.json");

            loader.load_environment(env_of({{f.env, v[1]}}));
            CHECK(values_of(loader).at(f.key) == v[1]);
            CHECK(loader.source(f.key) == std::string("env ") + f.env);
            CHECK(loader.source(f.env) == std::string("env ") + f.env);  // asked by env name: the same field

            loader.set(f.key, v[2], "flag --x");
            CHECK(values_of(loader).at(f.key) == v[2]);
            CHECK(loader.source(f.key) == "flag --x");

            // Only this field moved away from "default".
            for (const ConfigField& other : specd::config_fields())
                if (std::string(other.key) != f.key) CHECK(loader.source(other.key) == "default");
        }
    }
}

TEST_CASE("all fields at once: environment over file, flags over both, and finish() returns them", "[config]") {
    ScratchDir dir;
    json file = json::object();
    std::map<std::string, std::string> env;
    std::map<std::string, std::vector<std::string>> values;
    for (const ConfigField& f : specd::config_fields()) {
        auto v = stage_values(f, dir);
        if (std::string(f.key) == "ngram_min") v = {"2", "3", "4"};  // keep ngram_min <= ngram_max at every stage
        if (std::string(f.key) == "ngram_max") v = {"5", "6", "7"};
        values[f.key] = v;
        file[f.env] = typed(f, v[0]);  // the file may use environment names as keys too
        env[f.env] = v[1];
    }
    ConfigLoader loader;
    loader.load_json(file.dump(), "file all.json");
    loader.load_environment(env_of(env));
    for (const ConfigField& f : specd::config_fields()) {
        INFO(f.key);
        CHECK(values_of(loader).at(f.key) == values[f.key][1]);
        CHECK(loader.source(f.key) == std::string("env ") + f.env);
    }
    for (const ConfigField& f : specd::config_fields()) loader.set(f.key, values[f.key][2], std::string("flag ") + f.flag);
    const specd::RuntimeConfig c = loader.finish();
    CHECK(c.draft_max == std::stoi(values["draft_max"][2]));
    CHECK(c.target_model == values["model"][2]);
    CHECK(c.api_key == values["api_key"][2]);
    for (const ConfigField& f : specd::config_fields()) CHECK(loader.source(f.key) == std::string("flag ") + f.flag);
}

TEST_CASE("bad values stop loading with one line naming key, value, source and what is allowed", "[config]") {
    ScratchDir dir;
    const std::string model = dir.file("model.gguf");
    auto one_line = [](const std::string& m) {
        INFO(m);
        CHECK(m.find('\n') == std::string::npos);
        CHECK(m.rfind("config: ", 0) == 0);
        return m;
    };
    using Catch::Matchers::Contains;

    SECTION("wrong type in the JSON file") {
        for (const auto& [key, value, allowed] : std::vector<std::tuple<std::string, json, std::string>>{
                 {"draft_max", true, "an integer in 0..64"},
                 {"draft_max", 2.5, "an integer in 0..64"},
                 {"draft_max", "eight", "an integer in 0..64"},
                 {"speculative", 1, "true or false"},
                 {"speculative", "maybe", "true or false"},
                 {"kv_cache_ratio", "high", "a number in 0.01..1"},
                 {"host", 5, "must be text"},
                 {"model", json::array({"a"}), "the path of an existing file"},
                 {"log_level", false, "one of trace, debug, info, warn, error, off"}}) {
            const std::string m = one_line(error_of([&] { ConfigLoader().load_json(json{{key, value}}.dump(), "file bad.json"); }));
            CHECK_THAT(m, Contains(key + " = " + (value.is_string() ? value.get<std::string>() : value.dump())));
            CHECK_THAT(m, Contains("(from file bad.json)"));
            CHECK_THAT(m, Contains(allowed));
        }
    }
    SECTION("out of range, for every numeric field, from the environment and from a flag") {
        for (const ConfigField& f : specd::config_fields()) {
            if (f.kind != Kind::integer && f.kind != Kind::number) continue;
            const std::string below = f.kind == Kind::integer ? std::to_string(static_cast<long long>(f.min) - 1) : "-0.5";
            const std::string above = f.kind == Kind::integer ? std::to_string(static_cast<long long>(f.max) + 1) : "1.5";
            const std::string m = one_line(error_of([&] { ConfigLoader().load_environment(env_of({{f.env, below}})); }));
            CHECK_THAT(m, Contains(std::string(f.key) + " = " + below + " (from env " + f.env + "): must be "));
            CHECK_THAT(m, Contains(f.kind == Kind::integer ? "an integer in" : "a number in"));
            const std::string m2 = one_line(error_of([&] { ConfigLoader().set(f.key, above, "flag --x"); }));
            CHECK_THAT(m2, Contains(std::string(f.key) + " = " + above + " (from flag --x)"));
        }
        CHECK_THAT(error_of([] { ConfigLoader().set("port", "99999999999999999999", "flag --port"); }), Contains("0..65535"));
        CHECK_THAT(error_of([] { ConfigLoader().set("port", "80x", "flag --port"); }), Contains("port = 80x"));
        CHECK_THAT(error_of([] { ConfigLoader().set("kv_cache_ratio", "nan", "flag --x"); }), Contains("a number in"));
        CHECK_THAT(error_of([] { ConfigLoader().set("threads", "", "flag --x"); }), Contains("threads = \"\""));
    }
    SECTION("unknown keys: in the file, from a flag, and a typo of an environment name") {
        const std::string m = one_line(error_of([] { ConfigLoader().load_json(R"({"draft_maxx": 4})", "file f.json"); }));
        CHECK_THAT(m, Contains("unknown key \"draft_maxx\"") && Contains("file f.json"));
        CHECK_THAT(one_line(error_of([] { ConfigLoader().set("nope", "1", "flag --nope"); })), Contains("unknown key \"nope\""));
        CHECK_THAT(one_line(error_of([] { ConfigLoader::check_environment_names({"PATH", "SPECD_PROT"}); })),
                   Contains("SPECD_PROT") && Contains("did you mean SPECD_PORT"));
        CHECK_THAT(error_of([] { ConfigLoader::check_environment_names({"MAX_DRAFT_TOKEN"}); }), Contains("did you mean MAX_DRAFT_TOKENS"));
        CHECK_THAT(error_of([] { ConfigLoader::check_environment_names({"KV_CACHE_RATE"}); }), Contains("did you mean KV_CACHE_RATIO"));
    }
    SECTION("a path that does not exist, a directory, and the required model missing") {
        ConfigLoader missing;
        missing.set("model", (dir.path / "absent.gguf").string(), "env MAIN_MODEL_PATH");
        CHECK_THAT(one_line(error_of([&] { missing.finish(); })),
                   Contains("model = " + (dir.path / "absent.gguf").string() + " (from env MAIN_MODEL_PATH): no such file"));
        ConfigLoader draft_missing;
        draft_missing.set("model", model, "flag -m");
        draft_missing.set("model_draft", "/no/such/draft.gguf", "flag --model-draft");
        CHECK_THAT(one_line(error_of([&] { draft_missing.finish(); })), Contains("model_draft = /no/such/draft.gguf") && Contains("no such file"));
        ConfigLoader directory;
        directory.set("model", dir.path.string(), "flag -m");
        CHECK_THAT(one_line(error_of([&] { directory.finish(); })), Contains("is a directory"));
        CHECK_THAT(one_line(error_of([] { ConfigLoader().finish(); })), Contains("model is required") && Contains("MAIN_MODEL_PATH"));
    }
    SECTION("a word that is not one of the choices") {
        const std::string m = one_line(error_of([] { ConfigLoader().load_environment(env_of({{"SPECD_LOG_FORMAT", "yaml"}})); }));
        CHECK_THAT(m, Contains("log_format = yaml (from env SPECD_LOG_FORMAT): must be one of text, json"));
        CHECK_THAT(error_of([] { ConfigLoader().set("log_level", "verbose", "flag --log-level"); }), Contains("one of trace, debug"));
        CHECK_THAT(one_line(error_of([] { ConfigLoader().load_environment(env_of({{"SPECD_KV_CACHE_TYPE", "q8_0"}})); })),
                   Contains("kv_cache_type = q8_0 (from env SPECD_KV_CACHE_TYPE): must be one of f16, f32"));
    }
    SECTION("a sha256 that is not 64 hex digits") {
        for (const std::string& bad : {std::string(63, 'a'), std::string(64, 'g'), std::string(65, 'a')}) {
            const std::string m = one_line(error_of([&] { ConfigLoader().set("model_sha256", bad, "flag --model-sha256"); }));
            CHECK_THAT(m, Contains("model_sha256 = " + bad) && Contains("64 hex digits"));
        }
        ConfigLoader upper;
        upper.set("model_sha256", std::string(64, 'A'), "flag --model-sha256");
        CHECK(upper.config().target_sha256 == std::string(64, 'a'));  // sha256sum prints lower case
    }
    SECTION("malformed JSON, a non-object file, an unreadable file") {
        CHECK_THAT(one_line(error_of([] { ConfigLoader().load_json("{\"port\": ", "file x.json"); })), Contains("x.json: malformed JSON"));
        CHECK_THAT(one_line(error_of([] { ConfigLoader().load_json("[1, 2]", "file x.json"); })), Contains("must be a JSON object"));
        CHECK_THAT(one_line(error_of([&] { ConfigLoader().load_file((dir.path / "none.json").string()); })),
                   Contains("cannot read the config file"));
    }
    SECTION("cross-field checks: ngram_max below ngram_min, an empty host") {
        ConfigLoader ngram;
        ngram.set("model", model, "flag -m");
        ngram.set("ngram_min", "5", "env SPECD_NGRAM_MIN");
        ngram.set("ngram_max", "3", "flag --ngram-max");
        CHECK_THAT(one_line(error_of([&] { ngram.finish(); })),
                   Contains("ngram_max = 3 (from flag --ngram-max) must be >= ngram_min = 5 (from env SPECD_NGRAM_MIN)"));
        ConfigLoader host;
        host.set("model", model, "flag -m");
        host.set("host", "", "env SPECD_HOST");
        CHECK_THAT(one_line(error_of([&] { host.finish(); })), Contains("host = \"\" (from env SPECD_HOST)"));
    }
    SECTION("an embedding application's struct is validated the same way") {
        specd::RuntimeConfig c;
        c.target_model = model;
        c.draft_max = 99;
        CHECK_THAT(one_line(error_of([&] { c.validate(); })), Contains("draft_max = 99") && Contains("0..64"));
        c.draft_max = 4;
        c.validate();
    }
}

TEST_CASE("environment names that are settings, or are used by the scripts, pass the typo check", "[config]") {
    std::vector<std::string> names;
    for (const ConfigField& f : specd::config_fields()) names.push_back(f.env);
    ConfigLoader::check_environment_names(names);
    // Other SPECD_ variables of this repository (scripts, tests, kernels) and common ones.
    ConfigLoader::check_environment_names({"SPECD_CONFIG", "SPECD_MODELS_DIR", "SPECD_ISA", "SPECD_SERVE_ARGS", "SPECD_NPM_CACHE",
                                           "SPECD_BUILD_DIR", "SPECD_SANITIZE", "SPECD_FUZZ_SECONDS", "SPECD_BENCH_TYPES", "HOST",
                                           "PATH", "HOME", "PORT", "MODEL_PATH", "LANG"});
}

TEST_CASE("an empty environment value counts as unset", "[config]") {
    ConfigLoader loader;
    loader.load_environment(env_of({{"MAX_DRAFT_TOKENS", ""}}));
    CHECK(loader.config().draft_max == 8);
    CHECK(loader.source("draft_max") == "default");
}

TEST_CASE("describe() and describe_json() show every field and its source, never a secret", "[config]") {
    ConfigLoader loader;
    loader.load_environment(env_of({{"SPECD_API_KEY", "hunter2-api"}, {"MAX_DRAFT_TOKENS", "5"}}));
    loader.set("admin_key", "hunter2-admin", "flag --admin-key");
    const std::string table = loader.describe();
    const std::string as_json = loader.describe_json();
    for (const std::string& out : {table, as_json}) {
        CHECK(out.find("hunter2") == std::string::npos);
        CHECK(out.find("***") != std::string::npos);
    }
    for (const ConfigField& f : specd::config_fields()) CHECK(table.find(std::string("  ") + f.env) != std::string::npos);
    CHECK(table.find("draft_max") != std::string::npos);
    const json fields = json::parse(as_json);
    REQUIRE(fields.size() == specd::config_fields().size());
    for (const json& f : fields) {
        if (f["key"] == "draft_max") {
            CHECK(f["value"] == "5");
            CHECK(f["source"] == "env MAX_DRAFT_TOKENS");
            CHECK(f["min"] == 0);
            CHECK(f["max"] == 64);
        }
        if (f["key"] == "api_key") CHECK(f["value"] == "***");
        if (f["key"] == "port") CHECK(f["source"] == "default");
        if (f["key"] == "log_format") CHECK(f["choices"] == json::array({"text", "json"}));
    }
}

TEST_CASE("changed_fields names exactly the keys whose values differ", "[config]") {
    specd::RuntimeConfig a, b;
    CHECK(specd::changed_fields(a, b).empty());
    b.enable_speculative = false;
    b.draft_max = 3;
    CHECK(specd::changed_fields(a, b) == std::vector<std::string>{"speculative", "draft_max"});
}
