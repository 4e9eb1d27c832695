// One configuration for specd, with the deployment guide's names and
// defaults. Every field has one entry in config_fields(): its JSON key, its
// environment variable, its command-line flag and its allowed values.
//
// Loading order, later wins: built-in defaults, a JSON file (--config FILE
// or SPECD_CONFIG), the environment, command-line flags. ConfigLoader keeps
// where each value came from (`specd config` prints it).
//
//   ConfigLoader loader;                      // defaults
//   loader.load_file("specd.json");           // keys as below (or their env names)
//   loader.load_environment();                // MAIN_MODEL_PATH, MAX_DRAFT_TOKENS, ...
//   loader.set("draft_max", "4", "flag --draft-max");
//   RuntimeConfig cfg = loader.finish();      // cross-field checks, paths exist
//
// Every bad value throws specd::Error with one line naming the key, the
// value, where it came from and what is allowed, e.g.
//   config: draft_max = 99 (from env MAX_DRAFT_TOKENS): must be an integer in 0..64
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/load_policy.h"

namespace specd {

struct RuntimeConfig {
    // ---- models (JSON key / environment variable)
    std::string target_model;          // "model" / MAIN_MODEL_PATH: the target GGUF (required; must exist)
    std::string draft_model;           // "model_draft" / DRAFT_MODEL_PATH: the draft GGUF; empty: the n-gram proposer drafts
    std::string target_sha256;         // "model_sha256" / MAIN_MODEL_SHA256: expected sha256 (64 hex); empty: MODEL.sha256 if present
    std::string draft_sha256;          // "model_draft_sha256" / DRAFT_MODEL_SHA256: the same for the draft
    std::string model_name;            // "model_name" / SPECD_MODEL_NAME: the name clients use; empty: the target file's stem
    bool require_draft = false;        // "require_draft" / SPECD_REQUIRE_DRAFT: refuse to start when the draft can't be loaded
                                       //   (false: start in plain mode and say so)
    // ---- speculation
    bool enable_speculative = true;    // "speculative" / ENABLE_SPECULATIVE_DECODING: the default for requests that don't say
    int32_t draft_max = 8;             // "draft_max" / MAX_DRAFT_TOKENS: tokens drafted per step at most (4-8 recommended)
    bool adaptive = true;              // "adaptive" / SPECD_ADAPTIVE_DRAFT: per-request draft length from measured acceptance and cost
    int32_t verify_token_budget = 10;  // "spec_token_budget" / SPECD_SPEC_TOKEN_BUDGET: tokens per verify step the load policy
                                       //   aims at (k <= budget / requests - 1, off below 3) until the verifier has measured
                                       //   its step cost; then k maximises the modelled tokens/s (engine/load_policy.h); 0: no cap
    int32_t ngram_min = 1;             // "ngram_min" / SPECD_NGRAM_MIN: n-gram proposer's shortest match
    int32_t ngram_max = 4;             // "ngram_max" / SPECD_NGRAM_MAX: and longest
    int32_t draft_vocab = 4096;        // "draft_vocab" / SPECD_DRAFT_VOCAB: a CPU draft model's output head covers only the
                                       //   N token ids fed to it most often (learned as it serves; ~2x cheaper draft tokens
                                       //   on stories15M, drafts can't propose other tokens); 0: the full head
    // ---- capacity
    int32_t n_ctx = 0;                 // "ctx_size" / SPECD_CTX_SIZE: context per request (at most the trained length); 0: the trained
                                       // length capped by what kv_cache_ratio of the budget holds for max_sequences full
                                       // sequences, never below 4096 (or the trained length if shorter): engine/context_plan.h
    int32_t max_sequences = 64;        // "max_sessions" / SPECD_MAX_SESSIONS: requests decoding at once (KV sequence slots)
    int32_t max_waiting = 256;         // "queue_length" / SPECD_QUEUE_LENGTH: requests queued for KV blocks before new ones are refused
    double kv_cache_ratio = 0.85;      // "kv_cache_ratio" / KV_CACHE_RATIO: share of the memory budget the KV pools may take
    std::string kv_cache_type = "f16"; // "kv_cache_type" / SPECD_KV_CACHE_TYPE: element type of the CPU's KV pools: f16
                                       //   (as llama.cpp's default: twice the positions per budget, faster at many
                                       //   sessions) or f32 (exact); a GPU stores 16-bit keys and values either way
    int64_t memory_budget_bytes = 0;   // "memory_budget_bytes" / SPECD_MEMORY_BUDGET: 0: the machine's available RAM
    int32_t threads_target = 0;        // "threads" / SPECD_THREADS: target compute threads; 0: all hardware threads
    int32_t threads_draft = 0;         // "threads_draft" / SPECD_THREADS_DRAFT: draft compute threads (its own pool); 0: as many as the target's in a pool of its own when both fit the machine's hardware threads, else the target's pool, shared (the phases take turns)
    int32_t compute_nice = 5;          // "compute_nice" / SPECD_COMPUTE_NICE: nice value of the compute threads (pool workers,
                                       //   verifier, draft; 0..19, 0: unchanged), so that the network and session
                                       //   threads' short bursts preempt them at once instead of waiting for a time slice
    std::string cpu_affinity = "auto"; // "cpu_affinity" / SPECD_CPU_AFFINITY: pin each compute thread to a core of its own
                                       //   (the verifier and draft threads to their pool's first core): "on", "off", or
                                       //   "auto": on when the compute threads number exactly the CPUs this process may use
                                       //   and no CPU quota (cgroup cpu.max) caps it (a machine given over to the server),
                                       //   off otherwise; a shared pool with pipeline_drafts "on" is never pinned
    std::string device = "auto";       // "device" / SPECD_DEVICE: auto (CUDA GPU 0 when usable, else the CPU), cpu or cuda
                                       //   (cuda without a usable GPU refuses to start)
    int32_t prefill_chunk = 128;       // "prefill_chunk" / SPECD_PREFILL_CHUNK: prompt tokens per verifier step
    bool prefix_cache = true;          // "prefix_cache" / SPECD_PREFIX_CACHE: keep finished requests' KV blocks so a prompt that
                                       //   starts with an earlier prompt or reply (the next turn of a chat, a shared system
                                       //   prompt) prefills only the rest; evicted least recently used when the pool is short
                                       //   (engine/prefix_cache.h; llama-server's cache_prompt, vLLM's prefix caching)
    int32_t max_step_tokens = 512;     // "batch_size" / SPECD_BATCH_SIZE: tokens per verifier step
    int32_t run_ahead = 16;            // "run_ahead" / SPECD_RUN_AHEAD: plain steps the verifier may run for a request on its
                                       //   own, feeding back the token it sampled, before the session answers (saves a
                                       //   round trip through the session per token; a speculative request runs ahead
                                       //   only while the load policy keeps it plain); 0: the session confirms every
                                       //   step; not across nodes
    // ---- front end (read by `specd serve`; the embedded runtime ignores them)
    std::string host = "127.0.0.1";    // "host" / SPECD_HOST: address to listen on (0.0.0.0 in containers)
    int32_t port = 8080;               // "port" / SPECD_PORT: 0 picks a free port
    std::string api_key;               // "api_key" / SPECD_API_KEY: "Authorization: Bearer KEY" on all but /health; empty: open
    std::string admin_key;             // "admin_key" / SPECD_ADMIN_KEY: bearer key of /admin/*; empty: the api_key; both empty: /admin is off
    std::string cors_origin;           // "cors_origin" / SPECD_CORS_ORIGIN: Access-Control-Allow-Origin; empty: no CORS headers
    int32_t io_threads = 0;            // "io_threads" / SPECD_IO_THREADS: network threads (they only parse, route and
                                       // write); 0: auto, one per 8 CPUs, 1 to 4 (net::ServerOptions::io_threads)
    int32_t max_connections = 512;     // "max_connections" / SPECD_MAX_CONNECTIONS: open connections at once (503 beyond)
    int64_t max_body_bytes = 1 << 20;  // "max_body_bytes" / SPECD_MAX_BODY_BYTES: largest HTTP body (413 beyond)
    int64_t max_message_bytes = 1 << 20;  // "max_message_bytes" / SPECD_MAX_MESSAGE_BYTES: largest WebSocket message (close 1009)
    int32_t max_tokens_limit = 4096;   // "max_tokens_limit" / SPECD_MAX_TOKENS_LIMIT: largest max_tokens a request may ask for
    int32_t read_timeout_s = 30;       // "read_timeout_s" / SPECD_READ_TIMEOUT: a request's header and body must arrive within this
    int32_t idle_timeout_s = 120;      // "idle_timeout_s" / SPECD_IDLE_TIMEOUT: an idle WebSocket is closed after this
    int32_t drain_timeout_s = 30;      // "drain_timeout_s" / SPECD_DRAIN_TIMEOUT: on SIGTERM, how long running generations may finish
    // ---- multi-node (read by `specd serve` and `specd node`; see README "Multi-node")
    std::string target_nodes;          // "target_nodes" / SPECD_TARGET_NODES: "host:port,..." of `specd node --role target`
                                       //   processes; empty: the target runs in this process (the default)
    std::string draft_nodes;           // "draft_nodes" / SPECD_DRAFT_NODES: "host:port,..." of draft nodes; only with target_nodes
                                       //   (empty then: plain decoding)
    int32_t cluster_port = -1;         // "cluster_port" / SPECD_CLUSTER_PORT: gateway: CAF port where nodes `--join`; -1: none
                                       //   (0: any free port, printed at start)
    int32_t node_timeout_ms = 5000;    // "node_timeout_ms" / SPECD_NODE_TIMEOUT_MS: a node that doesn't answer a request or a
                                       //   health check within this is taken as down
    int32_t health_interval_ms = 500;  // "health_interval_ms" / SPECD_HEALTH_INTERVAL_MS: how often the gateway checks its nodes
                                       //   and retries the ones that are down (a restarted node rejoins within this)
    std::string pipeline_drafts = "auto";  // "pipeline_drafts" / SPECD_PIPELINE_DRAFTS: draft step t+1 while step t verifies,
                                       //   assuming full acceptance (discarded otherwise); auto: on with draft nodes, off in
                                       //   one process (where draft and target share the cores); on; off
    // ---- observability
    std::string log_level = "info";    // "log_level" / SPECD_LOG_LEVEL: trace, debug, info, warn, error, off
    std::string log_format = "text";   // "log_format" / SPECD_LOG_FORMAT: text or json (one object per line)
    double low_acceptance_rate = 0.3;  // "low_acceptance_rate" / SPECD_LOW_ACCEPTANCE_RATE: warn when acceptance over a window is below
    int32_t low_acceptance_window = 1024;  // "low_acceptance_window" / SPECD_LOW_ACCEPTANCE_WINDOW: drafted tokens per window; 0: off

    // specd::Error naming the first bad field and its allowed values.
    void validate() const;
    LoadPolicy load_policy() const { return LoadPolicy{verify_token_budget}; }
    std::string effective_model_name() const;
};

// A node's address in target_nodes / draft_nodes.
struct NodeAddress {
    std::string host;
    uint16_t port = 0;
    std::string text() const { return host + ":" + std::to_string(port); }
};
// Parses "host:port,host:port" (spaces ignored, empty: none); specd::Error
// naming `key` and the bad entry.
std::vector<NodeAddress> parse_node_list(const std::string& list, const std::string& key);

// One configurable field.
struct ConfigField {
    enum class Kind { boolean, integer, number, text, path, choice, sha256 };
    const char* key;        // JSON key and `specd config` name
    const char* env;        // environment variable
    const char* flag;       // command-line flag(s) as CLI11 names them ("-m,--model"); "" for none
    const char* help;       // one line
    Kind kind;
    double min = 0, max = 0;            // integer / number: inclusive range
    std::vector<const char*> choices = {};  // choice: the allowed words
    bool required = false;              // path: must be given
    bool secret = false;                // printed as *** by describe()
    bool reloadable = false;            // SIGHUP / the admin endpoint may change it while serving
};

// Every field, in the order `specd config` prints them.
const std::vector<ConfigField>& config_fields();
// The field with this JSON key or environment name; nullptr if none.
const ConfigField* find_config_field(const std::string& key_or_env);

class ConfigLoader {
public:
    using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

    ConfigLoader() = default;
    // Starts from `base` instead of the built-in defaults (sources still say "default").
    explicit ConfigLoader(RuntimeConfig base) : config_(std::move(base)) {}
    // Reads a JSON object of keys (a field's key or its env name), values
    // typed as the field (strings are also accepted and parsed as the
    // environment's). Unknown keys, malformed JSON, bad values: Error.
    void load_file(const std::string& path);
    void load_json(const std::string& json_text, const std::string& source);
    // Every field whose environment variable is set (and not empty).
    // `lookup` defaults to getenv.
    void load_environment(const EnvLookup& lookup = {});
    // Names of the process environment (e.g. from `environ`): a SPECD_*
    // variable, or one of the guide's names, that is not a setting but is
    // within two edits of one (SPECD_PROT, MAX_DRAFT_TOKEN) is a typo that
    // would silently keep the default, so it is an Error naming both. Other
    // unknown SPECD_* names pass: build and test scripts use that prefix too.
    static void check_environment_names(const std::vector<std::string>& names);
    // One value as text, e.g. from a flag; `source` says where from.
    void set(const std::string& key, const std::string& value, const std::string& source);
    // Cross-field checks and existence of paths; the effective config.
    RuntimeConfig finish() const;

    const RuntimeConfig& config() const { return config_; }
    // "default", "file F", "env NAME" or "flag --x".
    std::string source(const std::string& key) const;
    // The table `specd config` prints: key, value, source, env name.
    std::string describe() const;
    // The same as a JSON array, one object per field: key, env, flag, kind,
    // value (text, secrets as "***"), source, and min/max or choices where
    // they apply (`specd config --json`, read by the deploy tests).
    std::string describe_json() const;

private:
    RuntimeConfig config_;
    std::map<std::string, std::string> sources_;
};

// Keys of the fields whose values differ between `a` and `b`.
std::vector<std::string> changed_fields(const RuntimeConfig& a, const RuntimeConfig& b);

// The file named by SPECD_CONFIG (empty if unset).
std::string config_file_from_environment(const ConfigLoader::EnvLookup& lookup = {});

}  // namespace specd
