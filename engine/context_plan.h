// The context each request gets. ctx_size given: that (at most the model's
// trained length, as before). ctx_size 0: the model's trained length capped
// by what KV_CACHE_RATIO of the memory budget holds when all max_sequences
// sequences are full (real models train at 8k-128k tokens; a 128k context
// for 64 sequences would not fit any machine), never below
// kMinDefaultContext (or the trained length, if shorter): a context too
// short for a conversation is worse than fewer sequences decoding at once
// (the paged pool admits as many as its blocks hold).
#pragma once

#include <cstdint>
#include <string>

#include "engine/model.h"
#include "engine/tensor_type.h"

namespace specd {

// The default context never goes below this (llama.cpp's own default n_ctx).
inline constexpr int32_t kMinDefaultContext = 4096;

struct ContextInputs {
    int32_t requested = 0;          // ctx_size; 0: the default
    int32_t n_ctx_train = 0;        // the (primary) model's trained length, > 0
    double kv_cache_ratio = 0.85;   // KV_CACHE_RATIO: share of the budget for KV
    int64_t budget_bytes = 0;       // the memory budget (RAM, or a GPU's free memory)
    int64_t kv_bytes_per_token = 0; // KV bytes one position takes in every model that caches (target + draft)
    int32_t max_sequences = 64;     // sequences decoding at once
    int32_t block_size = 16;        // KV block positions: a capped default is a multiple of it
    std::string kv_type = "f16";    // for the explanation only
};

struct ContextPlan {
    int32_t n_ctx = 0;
    std::string reason;  // one line: what was chosen and why ("trained 131072, capped to 8192 by KV_CACHE_RATIO ...")
};

// Throws specd::Error for inputs that make no sense (n_ctx_train <= 0,
// max_sequences < 1, kv_bytes_per_token <= 0 with ctx_size 0).
ContextPlan plan_context(const ContextInputs& in);

// KV bytes per position of `model` in host pools of element type `type`
// (PagedKvCache::block_bytes of one position: keys and values, every layer).
int64_t kv_bytes_per_token(const LlamaModel& model, TensorType type);

// MemAvailable of /proc/meminfo (8 GiB where it cannot be read): the
// default memory budget of a CPU runtime.
int64_t available_memory_bytes();

// "7.6 GiB", "36.0 KiB": bytes for people.
std::string format_bytes(int64_t bytes);

}  // namespace specd
