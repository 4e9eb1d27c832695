#include "config/runtime_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "config/json_text.h"
#include "engine/error.h"
#include "engine/speculative_params.h"
#include "engine/utf8.h"

namespace specd {

namespace {

using Kind = ConfigField::Kind;
using Member = std::variant<bool RuntimeConfig::*, int32_t RuntimeConfig::*, int64_t RuntimeConfig::*, double RuntimeConfig::*,
                            std::string RuntimeConfig::*>;

struct Entry {
    ConfigField field;
    Member member;
};

constexpr double kInt32Max = 2147483647.0;

// The one table: JSON key, environment variable, flags, help, type and range.
// Boolean flags use CLI11's "--name{value}" form: the word after the flag
// name is the value it sets.
const std::vector<Entry>& entries() {
    static const std::vector<Entry> table = [] {
        std::vector<Entry> t;
        auto add = [&t](ConfigField f, Member m) { t.push_back(Entry{std::move(f), m}); };
        add({.key = "model", .env = "MAIN_MODEL_PATH", .flag = "-m,--model", .help = "target GGUF model", .kind = Kind::path,
             .required = true},
            &RuntimeConfig::target_model);
        add({.key = "model_draft", .env = "DRAFT_MODEL_PATH", .flag = "--model-draft",
             .help = "draft GGUF model (also -md; default: the n-gram lookup drafts)", .kind = Kind::path},
            &RuntimeConfig::draft_model);
        add({.key = "model_sha256", .env = "MAIN_MODEL_SHA256", .flag = "--model-sha256",
             .help = "expected sha256 of the target (default: MODEL.sha256 when present)", .kind = Kind::sha256},
            &RuntimeConfig::target_sha256);
        add({.key = "model_draft_sha256", .env = "DRAFT_MODEL_SHA256", .flag = "--model-draft-sha256",
             .help = "expected sha256 of the draft (default: DRAFT.sha256 when present)", .kind = Kind::sha256},
            &RuntimeConfig::draft_sha256);
        add({.key = "model_name", .env = "SPECD_MODEL_NAME", .flag = "-a,--alias", .help = "model name clients use (default: the file's stem)",
             .kind = Kind::text},
            &RuntimeConfig::model_name);
        add({.key = "require_draft", .env = "SPECD_REQUIRE_DRAFT", .flag = "--require-draft{true}",
             .help = "refuse to start when the draft model can't be loaded (default: serve in plain mode)", .kind = Kind::boolean},
            &RuntimeConfig::require_draft);
        add({.key = "speculative", .env = "ENABLE_SPECULATIVE_DECODING", .flag = "--speculative{true},--no-spec{false}",
             .help = "speculative decoding for requests that don't say (--no-spec: plain)", .kind = Kind::boolean, .reloadable = true},
            &RuntimeConfig::enable_speculative);
        add({.key = "draft_max", .env = "MAX_DRAFT_TOKENS", .flag = "--draft-max", .help = "tokens drafted per step at most",
             .kind = Kind::integer, .min = 0, .max = kMaxDraftTokens, .reloadable = true},
            &RuntimeConfig::draft_max);
        add({.key = "adaptive", .env = "SPECD_ADAPTIVE_DRAFT", .flag = "--adaptive{true},--no-adaptive{false}",
             .help = "per-request draft length from measured acceptance", .kind = Kind::boolean, .reloadable = true},
            &RuntimeConfig::adaptive);
        add({.key = "spec_token_budget", .env = "SPECD_SPEC_TOKEN_BUDGET", .flag = "--spec-token-budget",
             .help = "load policy: tokens per verify step (k <= budget / requests - 1, speculation off below 3); 0: off", .kind = Kind::integer, .min = 0,
             .max = 65536},
            &RuntimeConfig::verify_token_budget);
        add({.key = "ngram_min", .env = "SPECD_NGRAM_MIN", .flag = "--ngram-min", .help = "n-gram proposer's shortest match",
             .kind = Kind::integer, .min = 1, .max = 16},
            &RuntimeConfig::ngram_min);
        add({.key = "ngram_max", .env = "SPECD_NGRAM_MAX", .flag = "--ngram-max", .help = "n-gram proposer's longest match",
             .kind = Kind::integer, .min = 1, .max = 16},
            &RuntimeConfig::ngram_max);
        add({.key = "draft_vocab", .env = "SPECD_DRAFT_VOCAB", .flag = "--draft-vocab",
             .help = "a CPU draft's output head: the N token ids fed most often (0: full head)", .kind = Kind::integer, .min = 0,
             .max = 1 << 24},
            &RuntimeConfig::draft_vocab);
        add({.key = "ctx_size", .env = "SPECD_CTX_SIZE", .flag = "-c,--ctx-size", .help = "context per request (0: the trained length, capped by what the KV budget holds for max_sessions sequences)",
             .kind = Kind::integer, .min = 0, .max = 1 << 20},
            &RuntimeConfig::n_ctx);
        add({.key = "max_sessions", .env = "SPECD_MAX_SESSIONS", .flag = "--parallel", .help = "requests decoding at once",
             .kind = Kind::integer, .min = 1, .max = 1024},
            &RuntimeConfig::max_sequences);
        add({.key = "queue_length", .env = "SPECD_QUEUE_LENGTH", .flag = "--queue-length",
             .help = "requests waiting for KV blocks before new ones get 429", .kind = Kind::integer, .min = 0, .max = 1000000},
            &RuntimeConfig::max_waiting);
        add({.key = "kv_cache_ratio", .env = "KV_CACHE_RATIO", .flag = "--kv-cache-ratio",
             .help = "share of the memory budget the KV pools may take", .kind = Kind::number, .min = 0.01, .max = 1.0},
            &RuntimeConfig::kv_cache_ratio);
        add({.key = "kv_cache_type", .env = "SPECD_KV_CACHE_TYPE", .flag = "--cache-type",
             .help = "element type of the CPU's KV cache: f16 (half the memory) or f32 (exact); a GPU stores 16 bits either way",
             .kind = Kind::choice, .choices = {"f16", "f32"}},
            &RuntimeConfig::kv_cache_type);
        add({.key = "memory_budget_bytes", .env = "SPECD_MEMORY_BUDGET", .flag = "--memory-budget",
             .help = "memory budget in bytes (0: available RAM; on a GPU the VRAM free after the weights)", .kind = Kind::integer, .min = 0, .max = 9.0e15},
            &RuntimeConfig::memory_budget_bytes);
        add({.key = "threads", .env = "SPECD_THREADS", .flag = "-t,--threads", .help = "target compute threads (0: all)",
             .kind = Kind::integer, .min = 0, .max = 256},
            &RuntimeConfig::threads_target);
        add({.key = "threads_draft", .env = "SPECD_THREADS_DRAFT", .flag = "--threads-draft",
             .help = "draft compute threads (0: as the target's; sharing its pool when both would exceed the machine's threads)", .kind = Kind::integer, .min = 0, .max = 256},
            &RuntimeConfig::threads_draft);
        add({.key = "compute_nice", .env = "SPECD_COMPUTE_NICE", .flag = "--compute-nice",
             .help = "nice value of the compute threads, so network threads preempt them (0: unchanged)", .kind = Kind::integer,
             .min = 0, .max = 19},
            &RuntimeConfig::compute_nice);
        add({.key = "cpu_affinity", .env = "SPECD_CPU_AFFINITY", .flag = "--cpu-affinity",
             .help = "pin each compute thread to a core: on, off, or auto (on when the compute threads number the CPUs this process may use and no CPU quota applies)",
             .kind = Kind::choice, .choices = {"auto", "on", "off"}},
            &RuntimeConfig::cpu_affinity);
        add({.key = "device", .env = "SPECD_DEVICE", .flag = "--device",
             .help = "where the models run: auto (a CUDA GPU when one is usable, else the CPU), cpu or cuda", .kind = Kind::choice,
             .choices = {"auto", "cpu", "cuda"}},
            &RuntimeConfig::device);
        add({.key = "prefill_chunk", .env = "SPECD_PREFILL_CHUNK", .flag = "--prefill-chunk", .help = "prompt tokens per verifier step",
             .kind = Kind::integer, .min = 1, .max = 4096},
            &RuntimeConfig::prefill_chunk);
        add({.key = "prefix_cache", .env = "SPECD_PREFIX_CACHE", .flag = "--prefix-cache{true},--no-prefix-cache{false}",
             .help = "reuse the KV blocks of earlier prompts and replies a new prompt starts with", .kind = Kind::boolean},
            &RuntimeConfig::prefix_cache);
        add({.key = "batch_size", .env = "SPECD_BATCH_SIZE", .flag = "-b,--batch-size", .help = "tokens per verifier step",
             .kind = Kind::integer, .min = 16, .max = 4096},
            &RuntimeConfig::max_step_tokens);
        add({.key = "run_ahead", .env = "SPECD_RUN_AHEAD", .flag = "--run-ahead",
             .help = "plain steps the verifier may run for a request before its session answers (0: every step)",
             .kind = Kind::integer, .min = 0, .max = 4096},
            &RuntimeConfig::run_ahead);
        add({.key = "host", .env = "SPECD_HOST", .flag = "--host", .help = "address to listen on", .kind = Kind::text},
            &RuntimeConfig::host);
        add({.key = "port", .env = "SPECD_PORT", .flag = "--port", .help = "port (0: any free one)", .kind = Kind::integer, .min = 0,
             .max = 65535},
            &RuntimeConfig::port);
        add({.key = "api_key", .env = "SPECD_API_KEY", .flag = "--api-key",
             .help = "require Authorization: Bearer KEY on every endpoint but /health", .kind = Kind::text, .secret = true},
            &RuntimeConfig::api_key);
        add({.key = "admin_key", .env = "SPECD_ADMIN_KEY", .flag = "--admin-key",
             .help = "bearer key of /admin/* (default: the API key; neither: /admin is off)", .kind = Kind::text, .secret = true},
            &RuntimeConfig::admin_key);
        add({.key = "cors_origin", .env = "SPECD_CORS_ORIGIN", .flag = "--cors-origin",
             .help = "Access-Control-Allow-Origin value (empty: no CORS)", .kind = Kind::text},
            &RuntimeConfig::cors_origin);
        add({.key = "io_threads", .env = "SPECD_IO_THREADS", .flag = "--io-threads", .help = "network threads (0: one per 8 CPUs, 1 to 4)",
             .kind = Kind::integer, .min = 0, .max = 64},
            &RuntimeConfig::io_threads);
        add({.key = "max_connections", .env = "SPECD_MAX_CONNECTIONS", .flag = "--max-connections", .help = "open connections at most",
             .kind = Kind::integer, .min = 1, .max = 1000000},
            &RuntimeConfig::max_connections);
        add({.key = "max_body_bytes", .env = "SPECD_MAX_BODY_BYTES", .flag = "--max-body", .help = "largest request body in bytes",
             .kind = Kind::integer, .min = 1024, .max = 1 << 30},
            &RuntimeConfig::max_body_bytes);
        add({.key = "max_message_bytes", .env = "SPECD_MAX_MESSAGE_BYTES", .flag = "--max-message",
             .help = "largest WebSocket message in bytes", .kind = Kind::integer, .min = 1024, .max = 1 << 30},
            &RuntimeConfig::max_message_bytes);
        add({.key = "max_tokens_limit", .env = "SPECD_MAX_TOKENS_LIMIT", .flag = "--max-tokens-limit",
             .help = "largest max_tokens a request may ask for", .kind = Kind::integer, .min = 1, .max = 1 << 20},
            &RuntimeConfig::max_tokens_limit);
        add({.key = "read_timeout_s", .env = "SPECD_READ_TIMEOUT", .flag = "--read-timeout",
             .help = "seconds a request's header and body may take to arrive", .kind = Kind::integer, .min = 1, .max = 3600},
            &RuntimeConfig::read_timeout_s);
        add({.key = "idle_timeout_s", .env = "SPECD_IDLE_TIMEOUT", .flag = "--idle-timeout",
             .help = "seconds before an idle WebSocket is closed", .kind = Kind::integer, .min = 1, .max = 86400},
            &RuntimeConfig::idle_timeout_s);
        add({.key = "drain_timeout_s", .env = "SPECD_DRAIN_TIMEOUT", .flag = "--drain-timeout",
             .help = "seconds running generations may finish after SIGTERM before they are cancelled", .kind = Kind::integer, .min = 0,
             .max = 3600},
            &RuntimeConfig::drain_timeout_s);
        add({.key = "target_nodes", .env = "SPECD_TARGET_NODES", .flag = "--target-nodes",
             .help = "gateway: host:port,... of `specd node --role target` processes (empty: the target runs here)", .kind = Kind::text},
            &RuntimeConfig::target_nodes);
        add({.key = "draft_nodes", .env = "SPECD_DRAFT_NODES", .flag = "--draft-nodes",
             .help = "gateway: host:port,... of `specd node --role draft` processes", .kind = Kind::text},
            &RuntimeConfig::draft_nodes);
        add({.key = "cluster_port", .env = "SPECD_CLUSTER_PORT", .flag = "--cluster-port",
             .help = "gateway: CAF port where nodes --join (-1: none, 0: any)", .kind = Kind::integer, .min = -1, .max = 65535},
            &RuntimeConfig::cluster_port);
        add({.key = "node_timeout_ms", .env = "SPECD_NODE_TIMEOUT_MS", .flag = "--node-timeout",
             .help = "ms a node may take to answer before it counts as down", .kind = Kind::integer, .min = 50, .max = 600000},
            &RuntimeConfig::node_timeout_ms);
        add({.key = "health_interval_ms", .env = "SPECD_HEALTH_INTERVAL_MS", .flag = "--health-interval",
             .help = "ms between the gateway's node health checks and reconnects", .kind = Kind::integer, .min = 10, .max = 600000},
            &RuntimeConfig::health_interval_ms);
        add({.key = "pipeline_drafts", .env = "SPECD_PIPELINE_DRAFTS", .flag = "--pipeline-drafts",
             .help = "draft step t+1 while step t verifies (auto: with draft nodes)", .kind = Kind::choice,
             .choices = {"auto", "on", "off"}},
            &RuntimeConfig::pipeline_drafts);
        add({.key = "log_level", .env = "SPECD_LOG_LEVEL", .flag = "--log-level", .help = "log level", .kind = Kind::choice,
             .choices = {"trace", "debug", "info", "warn", "error", "off"}, .reloadable = true},
            &RuntimeConfig::log_level);
        add({.key = "log_format", .env = "SPECD_LOG_FORMAT", .flag = "--log-format", .help = "log lines as text or JSON objects",
             .kind = Kind::choice, .choices = {"text", "json"}},
            &RuntimeConfig::log_format);
        add({.key = "low_acceptance_rate", .env = "SPECD_LOW_ACCEPTANCE_RATE", .flag = "--low-acceptance-rate",
             .help = "warn when the acceptance rate over a window is below this", .kind = Kind::number, .min = 0.0, .max = 1.0,
             .reloadable = true},
            &RuntimeConfig::low_acceptance_rate);
        add({.key = "low_acceptance_window", .env = "SPECD_LOW_ACCEPTANCE_WINDOW", .flag = "--low-acceptance-window",
             .help = "drafted tokens per acceptance window (0: no warning)", .kind = Kind::integer, .min = 0, .max = kInt32Max,
             .reloadable = true},
            &RuntimeConfig::low_acceptance_window);
        return t;
    }();
    return table;
}

const Entry* find_entry(const std::string& name) {
    for (const Entry& e : entries())
        if (name == e.field.key || name == e.field.env) return &e;
    return nullptr;
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string format_number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.15g", v);
    return buf;
}

// "an integer in 0..64", "one of text, json", ...
std::string allowed(const ConfigField& f) {
    switch (f.kind) {
        case Kind::boolean: return "true or false (also 1/0, yes/no, on/off)";
        case Kind::integer: return "an integer in " + format_number(f.min) + ".." + format_number(f.max);
        case Kind::number: return "a number in " + format_number(f.min) + ".." + format_number(f.max);
        case Kind::text: return "text";
        case Kind::path: return "the path of an existing file";
        case Kind::sha256: return "64 hex digits (a sha256) or empty";
        case Kind::choice: {
            std::string s = "one of ";
            for (size_t i = 0; i < f.choices.size(); ++i) s += (i ? ", " : "") + std::string(f.choices[i]);
            return s;
        }
    }
    return "";
}

[[noreturn]] void bad_value(const ConfigField& f, const std::string& shown, const std::string& source, const std::string& why) {
    throw Error("config: " + std::string(f.key) + " = " + shown + " (from " + source + "): " + why);
}

std::string shown_value(const ConfigField& f, const std::string& text) {
    if (f.secret && !text.empty()) return "***";
    return text.empty() ? "\"\"" : text;
}

// Parses `text` as field `e` wants and stores it; errors name key, value, source.
void store_text(RuntimeConfig& c, const Entry& e, const std::string& text, const std::string& source) {
    const ConfigField& f = e.field;
    auto fail = [&]() { bad_value(f, shown_value(f, text), source, "must be " + allowed(f)); };
    switch (f.kind) {
        case Kind::boolean: {
            const std::string s = lower(text);
            bool v = false;
            if (s == "true" || s == "1" || s == "yes" || s == "on") v = true;
            else if (s == "false" || s == "0" || s == "no" || s == "off") v = false;
            else fail();
            c.*std::get<bool RuntimeConfig::*>(e.member) = v;
            return;
        }
        case Kind::integer: {
            if (text.empty()) fail();
            errno = 0;
            char* end = nullptr;
            const long long v = std::strtoll(text.c_str(), &end, 10);
            if (errno != 0 || end == text.c_str() || *end != 0) fail();
            if (static_cast<double>(v) < f.min || static_cast<double>(v) > f.max) fail();
            if (auto* m = std::get_if<int32_t RuntimeConfig::*>(&e.member)) c.*(*m) = static_cast<int32_t>(v);
            else c.*std::get<int64_t RuntimeConfig::*>(e.member) = static_cast<int64_t>(v);
            return;
        }
        case Kind::number: {
            if (text.empty()) fail();
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != 0 || !std::isfinite(v) || v < f.min || v > f.max) fail();
            c.*std::get<double RuntimeConfig::*>(e.member) = v;
            return;
        }
        case Kind::choice: {
            const std::string s = lower(text);
            if (std::none_of(f.choices.begin(), f.choices.end(), [&](const char* w) { return s == w; })) fail();
            c.*std::get<std::string RuntimeConfig::*>(e.member) = s;
            return;
        }
        case Kind::sha256: {
            const std::string s = lower(text);
            if (!s.empty() && (s.size() != 64 || !std::all_of(s.begin(), s.end(), [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); })))
                fail();
            c.*std::get<std::string RuntimeConfig::*>(e.member) = s;
            return;
        }
        case Kind::text:
        case Kind::path:
            c.*std::get<std::string RuntimeConfig::*>(e.member) = text;
            return;
    }
}

// The field's current value as text (what store_text would read back).
std::string value_text(const RuntimeConfig& c, const Entry& e) {
    return std::visit(
        [&](auto member) -> std::string {
            const auto& v = c.*member;
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
            else if constexpr (std::is_same_v<T, double>) return format_number(v);
            else if constexpr (std::is_same_v<T, std::string>) return v;
            else return std::to_string(v);
        },
        e.member);
}

std::string default_lookup_value(const ConfigLoader::EnvLookup& lookup, const char* name, bool& found) {
    std::optional<std::string> v;
    if (lookup) v = lookup(name);
    else if (const char* s = std::getenv(name)) v = std::string(s);
    found = v.has_value() && !v->empty();
    return found ? *v : std::string();
}

void check_path(const ConfigField& f, const std::string& path, const std::string& source) {
    if (path.empty()) {
        if (f.required) throw Error(std::string("config: ") + f.key + " is required (the target GGUF: --model, " + f.env + " or \"" + f.key +
                                    "\" in the config file)");
        return;
    }
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) bad_value(f, path, source, "no such file");
    if (std::filesystem::is_directory(status)) bad_value(f, path, source, "is a directory, not a GGUF file");
}

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::boolean: return "boolean";
        case Kind::integer: return "integer";
        case Kind::number: return "number";
        case Kind::text: return "text";
        case Kind::path: return "path";
        case Kind::choice: return "choice";
        case Kind::sha256: return "sha256";
    }
    return "";
}

// Levenshtein distance; names are short, so the plain two-row table is enough.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
    static const std::vector<ConfigField> fields = [] {
        std::vector<ConfigField> v;
        for (const Entry& e : entries()) v.push_back(e.field);
        return v;
    }();
    return fields;
}

const ConfigField* find_config_field(const std::string& key_or_env) {
    const Entry* e = find_entry(key_or_env);
    return e ? &e->field : nullptr;
}

void RuntimeConfig::validate() const {
    if (target_model.empty()) throw Error("config: model (the target GGUF path) is required");
    RuntimeConfig scratch;
    for (const Entry& e : entries()) {
        if (e.field.kind == Kind::path) continue;  // LlamaModel::load names a missing file
        store_text(scratch, e, value_text(*this, e), "the embedding application");
    }
    if (ngram_max < ngram_min)
        throw Error("config: ngram_max = " + std::to_string(ngram_max) + " must be >= ngram_min = " + std::to_string(ngram_min));
    parse_node_list(target_nodes, "target_nodes");
    if (!parse_node_list(draft_nodes, "draft_nodes").empty() && parse_node_list(target_nodes, "target_nodes").empty())
        throw Error("config: draft_nodes needs target_nodes (a draft node serves a gateway, not a single-process runtime)");
}

std::vector<NodeAddress> parse_node_list(const std::string& list, const std::string& key) {
    std::vector<NodeAddress> out;
    std::string item;
    auto finish = [&]() {
        std::string t;
        for (char c : item)
            if (!std::isspace(static_cast<unsigned char>(c))) t += c;
        item.clear();
        if (t.empty()) return;
        const size_t colon = t.rfind(':');
        auto bad = [&](const char* why) { throw Error("config: " + key + ": \"" + t + "\" " + why + " (want host:port,host:port)"); };
        if (colon == std::string::npos || colon == 0 || colon + 1 == t.size()) bad("is not host:port");
        const std::string port = t.substr(colon + 1);
        if (!std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) || port.size() > 5)
            bad("has a bad port");
        const long p = std::strtol(port.c_str(), nullptr, 10);
        if (p < 1 || p > 65535) bad("has a port outside 1..65535");
        out.push_back(NodeAddress{t.substr(0, colon), static_cast<uint16_t>(p)});
    };
    for (char c : list) {
        if (c == ',') finish();
        else item += c;
    }
    finish();
    return out;
}

std::string RuntimeConfig::effective_model_name() const {
    if (!model_name.empty()) return model_name;
    return std::filesystem::path(target_model).stem().string();
}

void ConfigLoader::load_json(const std::string& text, const std::string& source) {
    nlohmann::json j;
    try {
        j = parse_json_text(text);
    } catch (const JsonTextError& e) {
        throw Error("config: " + valid_utf8(source) + ": " + e.what());
    }
    if (!j.is_object()) throw Error("config: " + source + ": must be a JSON object of keys (see `specd config`)");
    for (auto it = j.begin(); it != j.end(); ++it) {
        const Entry* e = find_entry(it.key());
        if (!e) throw Error("config: " + source + ": unknown key \"" + it.key() + "\" (`specd config` lists the keys)");
        const ConfigField& f = e->field;
        const nlohmann::json& v = it.value();
        std::string text;
        bool typed_ok = false;
        if (v.is_string()) {
            text = v.get<std::string>();  // parsed as the environment's text
            typed_ok = true;
        } else if (f.kind == Kind::boolean && v.is_boolean()) {
            text = v.get<bool>() ? "true" : "false";
            typed_ok = true;
        } else if (f.kind == Kind::integer && v.is_number_integer()) {
            text = v.dump();
            typed_ok = true;
        } else if (f.kind == Kind::number && v.is_number()) {
            text = v.dump();
            typed_ok = true;
        }
        if (!typed_ok) bad_value(f, utf8_excerpt(dump_json(v), 80), source, "must be " + allowed(f));
        store_text(config_, *e, text, source);
        sources_[f.key] = source;
    }
}

void ConfigLoader::load_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error("config: cannot read the config file " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    load_json(ss.str(), "file " + path);
}

void ConfigLoader::load_environment(const EnvLookup& lookup) {
    for (const Entry& e : entries()) {
        bool found = false;
        const std::string v = default_lookup_value(lookup, e.field.env, found);
        if (!found) continue;
        const std::string source = std::string("env ") + e.field.env;
        store_text(config_, e, v, source);
        sources_[e.field.key] = source;
    }
}

void ConfigLoader::check_environment_names(const std::vector<std::string>& names) {
    constexpr size_t kTypoDistance = 2;
    for (const std::string& name : names) {
        if (find_entry(name)) continue;
        const bool specd_prefixed = name.rfind("SPECD_", 0) == 0;
        for (const Entry& e : entries()) {
            const std::string env = e.field.env;
            // A name outside SPECD_ is only compared with the guide's own names
            // (MAIN_MODEL_PATH, ...), never with SPECD_ ones: HOST is not SPECD_HOST.
            if (!specd_prefixed && env.rfind("SPECD_", 0) == 0) continue;
            if (edit_distance(name, env) <= kTypoDistance)
                throw Error("config: environment variable " + name + " is not a setting (did you mean " + env +
                            "? `specd config` lists them)");
        }
    }
}

void ConfigLoader::set(const std::string& key, const std::string& value, const std::string& source) {
    const Entry* e = find_entry(key);
    if (!e) throw Error("config: unknown key \"" + key + "\" (from " + source + ")");
    store_text(config_, *e, value, source);
    sources_[e->field.key] = source;
}

RuntimeConfig ConfigLoader::finish() const {
    for (const Entry& e : entries())
        if (e.field.kind == Kind::path) check_path(e.field, value_text(config_, e), source(e.field.key));
    if (config_.ngram_max < config_.ngram_min)
        throw Error("config: ngram_max = " + std::to_string(config_.ngram_max) + " (from " + source("ngram_max") +
                    ") must be >= ngram_min = " + std::to_string(config_.ngram_min) + " (from " + source("ngram_min") + ")");
    if (config_.host.empty()) throw Error("config: host = \"\" (from " + source("host") + "): must be an address to listen on");
    return config_;
}

std::string ConfigLoader::source(const std::string& key) const {
    const Entry* e = find_entry(key);
    auto it = sources_.find(e ? e->field.key : key);
    return it == sources_.end() ? "default" : it->second;
}

std::string ConfigLoader::describe() const {
    size_t wk = 3, wv = 5, ws = 6;
    std::vector<std::array<std::string, 4>> rows;
    for (const Entry& e : entries()) {
        std::string v = value_text(config_, e);
        v = e.field.secret && !v.empty() ? "***" : (v.empty() ? "\"\"" : v);
        rows.push_back({e.field.key, v, source(e.field.key), e.field.env});
        wk = std::max(wk, rows.back()[0].size());
        wv = std::max(wv, rows.back()[1].size());
        ws = std::max(ws, rows.back()[2].size());
    }
    auto pad = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
    std::string out = pad("key", wk) + "  " + pad("value", wv) + "  " + pad("source", ws) + "  environment\n";
    for (const auto& r : rows) out += pad(r[0], wk) + "  " + pad(r[1], wv) + "  " + pad(r[2], ws) + "  " + r[3] + "\n";
    return out;
}

std::string ConfigLoader::describe_json() const {
    nlohmann::json fields = nlohmann::json::array();
    for (const Entry& e : entries()) {
        const ConfigField& f = e.field;
        const std::string v = value_text(config_, e);
        nlohmann::json j = {{"key", f.key},       {"env", f.env},        {"flag", f.flag},
                            {"kind", kind_name(f.kind)}, {"value", f.secret && !v.empty() ? "***" : v},
                            {"source", source(f.key)}, {"secret", f.secret}, {"reloadable", f.reloadable}, {"allowed", allowed(f)}};
        if (f.kind == Kind::integer || f.kind == Kind::number) {
            j["min"] = f.min;
            j["max"] = f.max;
        }
        if (f.kind == Kind::choice) j["choices"] = f.choices;
        if (f.kind == Kind::path) j["required"] = f.required;
        fields.push_back(std::move(j));
    }
    return fields.dump(1) + "\n";
}

std::vector<std::string> changed_fields(const RuntimeConfig& a, const RuntimeConfig& b) {
    std::vector<std::string> keys;
    for (const Entry& e : entries())
        if (value_text(a, e) != value_text(b, e)) keys.push_back(e.field.key);
    return keys;
}

std::string config_file_from_environment(const ConfigLoader::EnvLookup& lookup) {
    bool found = false;
    return default_lookup_value(lookup, "SPECD_CONFIG", found);
}

}  // namespace specd
