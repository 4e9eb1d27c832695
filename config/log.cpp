#include "config/log.h"

#include <atomic>
#include <memory>
#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/json_text.h"
#include "engine/utf8.h"

namespace specd::log {

namespace {

std::atomic<bool> g_json{false};

spdlog::level::level_enum to_spdlog(Level l) {
    switch (l) {
        case Level::trace: return spdlog::level::trace;
        case Level::debug: return spdlog::level::debug;
        case Level::info: return spdlog::level::info;
        case Level::warn: return spdlog::level::warn;
        case Level::error: return spdlog::level::err;
        case Level::off: return spdlog::level::off;
    }
    return spdlog::level::info;
}

spdlog::level::level_enum parse_level(const std::string& s) {
    if (s == "trace") return spdlog::level::trace;
    if (s == "debug") return spdlog::level::debug;
    if (s == "warn") return spdlog::level::warn;
    if (s == "error") return spdlog::level::err;
    if (s == "off") return spdlog::level::off;
    return spdlog::level::info;
}

const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%eZ %l %v";
const char* kJsonPattern = "{\"time\":\"%Y-%m-%dT%H:%M:%S.%eZ\",\"level\":\"%l\",%v}";

// The logger, made on first use so that events before configure() still go out.
spdlog::logger& logger() {
    static std::shared_ptr<spdlog::logger> instance = [] {
        auto l = std::make_shared<spdlog::logger>("specd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        l->set_pattern(kTextPattern, spdlog::pattern_time_type::utc);
        l->set_level(spdlog::level::info);
        l->flush_on(spdlog::level::trace);  // every line at once: logs are read live by operators and tests
        return l;
    }();
    return *instance;
}

bool needs_quotes(const std::string& s) {
    if (s.empty()) return true;
    for (char c : s)
        if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t') return true;
    return false;
}

}  // namespace

void configure(const std::string& level, const std::string& format) {
    g_json = format == "json";
    logger().set_pattern(g_json ? kJsonPattern : kTextPattern, spdlog::pattern_time_type::utc);
    set_level(level);
}

void set_level(const std::string& level) { logger().set_level(parse_level(level)); }

bool enabled(Level level) { return logger().should_log(to_spdlog(level)); }

std::string render_text(std::string_view message, const nlohmann::json& fields) {
    std::string line = valid_utf8(message);
    if (!fields.is_object()) return line;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
        line += ' ';
        line += valid_utf8(it.key());
        line += '=';
        if (it.value().is_string()) {
            const std::string s = valid_utf8(it.value().get_ref<const std::string&>());
            line += needs_quotes(s) ? dump_json(s) : s;
        } else {
            line += dump_json(it.value());
        }
    }
    return line;
}

std::string render_json_members(std::string_view message, const nlohmann::json& fields) {
    std::string members = "\"msg\":" + dump_json(std::string(message));
    if (!fields.is_object()) return members;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
        // Appended piece by piece: "," + string trips GCC 12's -Wrestrict false positive.
        members += ',';
        members += dump_json(it.key());
        members += ':';
        members += dump_json(it.value());
    }
    return members;
}

void event(Level level, std::string_view message, const nlohmann::json& fields) {
    spdlog::logger& l = logger();
    const auto lvl = to_spdlog(level);
    if (!l.should_log(lvl)) return;
    const std::string body = g_json ? render_json_members(message, fields) : render_text(message, fields);
    l.log(lvl, spdlog::string_view_t(body.data(), body.size()));
}

}  // namespace specd::log
