// The process log: structured events on stderr through spdlog, as text
//   2026-12-02T23:50:01.123Z info request done request_id=cmpl-3 tokens_per_s=212.5
// or, with format "json", one object per line
//   {"time":"2026-12-02T23:50:01.123Z","level":"info","msg":"request done","request_id":"cmpl-3",...}
// Thread-safe; until configure() runs, events go out as text at level info.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace specd::log {

enum class Level { trace, debug, info, warn, error, off };

// level: trace, debug, info, warn, error, off; format: text or json
// (RuntimeConfig's log_level / log_format, already validated).
void configure(const std::string& level, const std::string& format);
void set_level(const std::string& level);
bool enabled(Level level);

// One event: a short fixed message and its fields (an object; values of
// any JSON type). Text renders fields as key=value, quoting strings that
// contain spaces, quotes or '='.
void event(Level level, std::string_view message, const nlohmann::json& fields = nlohmann::json::object());
inline void info(std::string_view message, const nlohmann::json& fields = nlohmann::json::object()) { event(Level::info, message, fields); }
inline void warn(std::string_view message, const nlohmann::json& fields = nlohmann::json::object()) { event(Level::warn, message, fields); }
inline void error(std::string_view message, const nlohmann::json& fields = nlohmann::json::object()) { event(Level::error, message, fields); }
inline void debug(std::string_view message, const nlohmann::json& fields = nlohmann::json::object()) { event(Level::debug, message, fields); }

// The line event() writes after the time and level, for tests.
std::string render_text(std::string_view message, const nlohmann::json& fields);
std::string render_json_members(std::string_view message, const nlohmann::json& fields);

}  // namespace specd::log
