// One configuration for the runtime, with the deployment guide's names and
// defaults. Loading from a JSON file and from environment variables lives
// here too; each field documents its default and its key.
#pragma once

#include <cstdint>
#include <string>

#include "engine/session_core.h"

namespace specd {

struct RuntimeConfig {
    std::string target_model;          // "model": path of the target GGUF (required)
    std::string draft_model;           // "model_draft": path of the draft GGUF; empty: the n-gram proposer drafts
    std::string model_name;            // "model_name": the name clients use; default: the target file's stem
    bool enable_speculative = true;    // ENABLE_SPECULATIVE_DECODING: the default for requests that don't say
    int32_t draft_max = 8;             // MAX_DRAFT_TOKENS: tokens drafted per step at most (4-8 recommended)
    bool adaptive = true;              // "adaptive": per-request draft length from measured acceptance and cost
    int32_t n_ctx = 0;                 // "ctx_size": context per request; 0: the model's training context
    int32_t max_sequences = 64;        // "max_sequences": requests decoding at once (KV sequence slots)
    double kv_cache_ratio = 0.85;      // KV_CACHE_RATIO: share of the memory budget the KV pools may take
    int64_t memory_budget_bytes = 0;   // "memory_budget_bytes": 0: the machine's available RAM
    int32_t max_waiting = 256;         // "max_waiting": requests queued for KV blocks before new ones are refused
    int32_t threads_target = 0;        // "threads": target compute threads; 0: all hardware threads
    int32_t threads_draft = 0;         // "threads_draft": draft compute threads (its own pool); 0: as many as the target's
    int32_t prefill_chunk = 128;       // "prefill_chunk": prompt tokens per verifier step
    int32_t max_step_tokens = 512;     // "batch_size": tokens per verifier step
    int32_t verify_token_budget = 4;   // "spec_token_budget": tokens per verify step the load policy aims at (k <= budget / requests - 1); 0: no cap
    int32_t ngram_min = 1;             // "ngram_min" / "ngram_max": n-gram proposer's match lengths
    int32_t ngram_max = 4;

    // specd::Error naming the first bad field and its allowed values.
    void validate() const;
    LoadPolicy load_policy() const { return LoadPolicy{verify_token_budget}; }
    std::string effective_model_name() const;
};

// Reads a JSON object of the keys above into `config` (unknown keys and
// wrong types are errors naming the key). Throws specd::Error.
void load_config_json(const std::string& json_text, RuntimeConfig& config);
void load_config_file(const std::string& path, RuntimeConfig& config);
// Applies MAX_DRAFT_TOKENS, KV_CACHE_RATIO, ENABLE_SPECULATIVE_DECODING
// (true/false/1/0) and SPECD_MODEL / SPECD_MODEL_DRAFT when set.
void apply_environment(RuntimeConfig& config);

}  // namespace specd
