// config/log: the text rendering (key=value, quoted where needed), the JSON
// rendering (one parseable object per line with time, level, msg and the
// fields), and level filtering, read back from the real stderr.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/log.h"

using json = nlohmann::json;
namespace slog = specd::log;

namespace {

// Runs `fn` with fd 2 pointing at a scratch file; returns what was written.
template <class Fn>
std::string capture_stderr(Fn&& fn) {
    const std::string path = (std::filesystem::temp_directory_path() / ("specd-log-" + std::to_string(::getpid()))).string();
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
    fn();
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::filesystem::remove(path);
    return ss.str();
}

// "{" + members + "}", appended piece by piece: the operator+ form trips
// GCC 12's -Wrestrict false positive.
json object_of(const std::string& members) {
    std::string text = "{";
    text += members;
    text += '}';
    return json::parse(text);
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

const json kSummary = {{"request_id", "cmpl-7"},  {"transport", "http"}, {"prompt_tokens", 5},
                       {"completion_tokens", 40}, {"drafted", 48},       {"accepted", 39},
                       {"acceptance_rate", 0.813}, {"tokens_per_s", 212.5}, {"ttft_ms", 4.2},
                       {"note", "two words"},     {"empty", ""},         {"eq", "a=b"}};

}  // namespace

TEST_CASE("text rendering: message, then key=value (keys sorted, as nlohmann::json keeps them), strings quoted only when needed", "[log]") {
    CHECK(slog::render_text("request done", kSummary) ==
          "request done acceptance_rate=0.813 accepted=39 completion_tokens=40 drafted=48 empty=\"\" eq=\"a=b\" note=\"two words\" "
          "prompt_tokens=5 request_id=cmpl-7 tokens_per_s=212.5 transport=http ttft_ms=4.2");
    CHECK(slog::render_text("plain", json::object()) == "plain");
    CHECK(slog::render_text("nested", {{"changed", json::array({"draft_max"})}, {"on", true}}) == "nested changed=[\"draft_max\"] on=true");
    CHECK(slog::render_text("newline", {{"error", "line1\nline2"}}) == "newline error=\"line1\\nline2\"");
}

TEST_CASE("JSON rendering: members of one object, the message under msg", "[log]") {
    const json j = object_of(slog::render_json_members("request done", kSummary));
    CHECK(j["msg"] == "request done");
    for (auto it = kSummary.begin(); it != kSummary.end(); ++it) CHECK(j[it.key()] == it.value());
    // Invalid UTF-8 in a field cannot break the line's JSON.
    CHECK_NOTHROW(object_of(slog::render_json_members("bad \"utf8\"", {{"text", std::string("\xff\xfe")}})));
}

TEST_CASE("events on stderr: one JSON object per line in json format, key=value in text, below the level nothing", "[log]") {
    const std::string json_out = capture_stderr([] {
        slog::configure("info", "json");
        slog::info("request done", kSummary);
        slog::warn("low speculative acceptance", {{"acceptance_rate", 0.12}});
        slog::debug("not shown at info", {{"x", 1}});
    });
    const auto lines = lines_of(json_out);
    REQUIRE(lines.size() == 2);
    const json first = json::parse(lines[0]);
    CHECK(first["msg"] == "request done");
    CHECK(first["level"] == "info");
    CHECK(first["request_id"] == "cmpl-7");
    CHECK(first["time"].get<std::string>().size() == std::string("2026-12-02T23:50:01.123Z").size());
    const json second = json::parse(lines[1]);
    CHECK(second["msg"] == "low speculative acceptance");
    CHECK(second["level"].get<std::string>().rfind("warn", 0) == 0);

    const std::string text_out = capture_stderr([] {
        slog::configure("warn", "text");
        slog::info("hidden at warn");
        slog::error("draft model not loaded", {{"model_draft", "d.gguf"}});
        CHECK_FALSE(slog::enabled(slog::Level::info));
        CHECK(slog::enabled(slog::Level::error));
        slog::set_level("off");
        slog::error("hidden when off");
    });
    const auto text_lines = lines_of(text_out);
    REQUIRE(text_lines.size() == 1);
    CHECK(text_lines[0].find(" error draft model not loaded model_draft=d.gguf") != std::string::npos);
    CHECK(text_lines[0].back() != '}');
    slog::configure("info", "text");
}
