// `specd inflate`: a benchmark construct, not a model. It widens a llama
// model (more residual dimensions, heads and FFN units, optionally more
// layers) so that it computes the same logits as the original: the result
// has the size, memory traffic and KV cache of a large model but the text
// (and a small draft model's acceptance) of the small one, which is what a
// memory-bound speculative-decoding benchmark with real text needs.
//
// With d, f the model's widths and D, F the new ones (head size unchanged):
//  * new residual dimensions stay exactly zero: token_embd's new columns,
//    and the new output rows of attn_output and ffn_down, are zero;
//  * RMS norms see D dimensions instead of d, so their weights scale by
//    sqrt(d/D) and the epsilon by d/D (then norm(x) is unchanged);
//  * new heads (query, key and value rows) and new FFN units (gate and up
//    rows) get random weights, but attn_output's and ffn_down's columns for
//    them are zero, so they add nothing;
//  * extra layers get random weights with zero attn_output and ffn_down:
//    each adds exactly zero to the residual stream.
// The logits agree up to float rounding (the norms' sums run over more
// terms); greedy text agrees. New columns of the old rows are zero, and
// when d, f and the old heads' width are multiples of 32 the q8_0 blocks of
// the old weights are the original's, so the q8_0 construct also agrees
// with the q8_0 original. Every tensor is written as f32 (quantize the
// result with `specd quantize`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace specd {

struct InflateOptions {
    int64_t dim = 0;           // D: new embedding length, >= the model's, a multiple of its head size
    int64_t ffn = 0;           // F: new feed-forward length, >= the model's
    int32_t extra_layers = 0;  // layers appended after the last one (each adds nothing)
    uint64_t seed = 0x5eed;    // the random weights (per tensor: seed and its name)
};

struct InflateProgress {
    size_t tensor = 0;         // tensors built so far (1..n_tensors)
    size_t n_tensors = 0;      // tensors in the output
    uint64_t bytes_done = 0;   // output tensor bytes built so far
    uint64_t bytes_total = 0;  // output tensor bytes in all
};

struct InflateStats {
    uint64_t bytes_in = 0;    // input file size
    uint64_t bytes_out = 0;   // output file size
    size_t n_tensors = 0;     // tensors written
    int64_t params_in = 0;    // elements of all input tensors
    int64_t params_out = 0;   // elements of all output tensors
};

// Reads the llama GGUF at in_gguf (any tensor type specd reads) and writes
// the inflated f32 GGUF at out_gguf; progress (if set) is called after each
// tensor is built, before the file is written. Throws specd::Error with one
// line naming the problem: not a llama model, D or F smaller than the
// model's, D not a multiple of the head size or not giving whole KV-head
// groups, a tensor it does not know how to widen, or a tensor whose shape
// disagrees with the metadata.
InflateStats inflate_model(const std::string& in_gguf, const std::string& out_gguf, const InflateOptions& options,
                           const std::function<void(const InflateProgress&)>& progress = {});

}  // namespace specd
