// The forward pass of every model family (engine/model_family.h) on a CUDA
// GPU, behind the engine's ForwardBackend interface, in engine/forward.cpp's
// order: own kernels for the element-wise parts (norms, biases, Q/K norms,
// RoPE in either pairing, post-norms, the gate activation, soft-capping)
// and attention over the paged KV cache (windowed on sliding-window
// layers) (gpu/kernels.h), and matrix products (16-bit in, f32
// accumulate) for the projections and the classifier: for steps of at most
// kGemvMaxRows tokens (decode, verification) an own tensor-core kernel that
// streams each weight once and gives a row the same bits whatever the batch
// (launch_gemv; gate | up with its activation, and, for Llama's graph,
// q | k | v with RoPE and the K/V stores, fused), for larger batches cuBLAS.
// SPECD_CUDA_GEMV=0 (or set_small_batch_gemv(false)) sends every product to
// cuBLAS. Each instance owns one stream and one cuBLAS handle: it is one
// "GPU compute actor". Two instances (the draft's and the verifier's) on one
// device run side by side, each host thread waiting only on its own
// stream's event. The weights are shared
// (DeviceModel, uploaded once per device); the K/V storage of the cache this
// backend made lives in VRAM, indexed by the host cache's block ids.
// All device memory is allocated in the constructor and make_kv_cache();
// forward() allocates nothing.
// Steps of at most GraphPolicy::max_rows tokens (decode, verification) run
// as CUDA graphs: the second time a batch shape is seen its step is captured,
// and later steps of that shape replay it with one launch (gpu/graph_cache.h).
// On by default; SPECD_CUDA_GRAPHS=0 (or set_graphs(false)) turns them off.
// A capture that fails turns them off for this backend, with one line on
// stderr, and the step runs without a graph.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "gpu/batch_layout.h"
#include "gpu/cuda_handles.h"
#include "gpu/device_model.h"
#include "gpu/graph_cache.h"

namespace specd::gpu {

class CudaForward : public ForwardBackend {
public:
    // `model` is the LlamaModel the weights came from; null for a synthetic
    // DeviceModel (then model() throws: only the device-side entry points work).
    CudaForward(std::shared_ptr<const DeviceModel> weights, const LlamaModel* model, ForwardOptions options = {});
    ~CudaForward() override;

    std::span<const float> forward(PagedKvCache& kv, std::span<const BatchItem> items) override;
    // Block tables on the host, K/V storage in VRAM (16-bit). One cache per
    // backend: a second call replaces the first (whose cache must be gone).
    std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheShape& shape) override;
    const LlamaModel& model() const override;
    const ForwardOptions& options() const override { return options_; }
    std::string name() const override { return "cuda:" + std::to_string(weights_->device()); }

    // ForwardBackend's greedy capability: forward_argmax into the caller's
    // span (`argmax_out`: at least the batch's rows; checked before running).
    // Always true: this backend has it.
    bool forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) override;

    // Device-side sampling: runs the batch and brings back only the argmax
    // token of each logit row (greedy decoding), `out` (n_rows).
    void forward_argmax(PagedKvCache& kv, std::span<const BatchItem> items, std::vector<int32_t>& out);

    // Bytes of one KV block (K and V, 16-bit) of a model: what the KV budget divides by.
    static size_t kv_block_bytes(const LlamaHparams& hparams, int32_t block_size);

    const DeviceModel& weights() const { return *weights_; }
    const Stream& stream() const { return stream_; }
    // Events recorded around the device work of the latest forward call
    // (for overlap measurements and timing without host clocks).
    const Event& last_start() const { return start_; }
    const Event& last_end() const { return end_; }

    // CUDA graphs for small steps (see above). Turning them off or on drops
    // the cached graphs. graphs_off_reason() says why a capture failure
    // turned them off ("" otherwise).
    void set_graphs(bool on);
    // Which steps get graphs (GraphPolicy's defaults unless set); drops the cached graphs.
    void set_graph_policy(const GraphPolicy& policy);
    bool graphs() const { return graphs_on_; }
    const GraphStats& graph_stats() const { return graph_stats_; }
    const std::string& graphs_off_reason() const { return graphs_off_reason_; }
    // SPECD_CUDA_GRAPHS from the environment: false for "0", "off", "false"; true otherwise (also unset).
    static bool graphs_from_environment();

    // The small-batch kernel for products of <= kGemvMaxRows rows (on by
    // default where the device has mma.sync, compute capability >= 8.0);
    // off, cuBLAS runs every product. Drops the cached graphs.
    void set_small_batch_gemv(bool on);
    bool small_batch_gemv() const { return gemv_on_; }
    // SPECD_CUDA_GEMV from the environment: false for "0", "off", "false"; true otherwise (also unset).
    static bool gemv_from_environment();
    // Whether `device` runs the small-batch kernel's mma.sync (compute capability >= 8.0).
    static bool mma_supported(int device);

private:
    // Validates and plans the batch, runs it; logits stay on the device
    // (logits_, n_out rows). Returns n_out.
    int32_t run(PagedKvCache& kv, std::span<const BatchItem> items);
    // C (m_rows, n_out) f32 = A (m_rows, k) 16-bit · W (n_out, k)^T 16-bit + beta * C.
    void gemm(const uint16_t* a, const uint16_t* w, float* c, int32_t m_rows, int32_t n_out, int32_t k, float beta);
    void finish(PagedKvCache& kv, std::span<const BatchItem> items);
    // Enqueues the layers and the classifier of the planned batch (layout_,
    // already uploaded to packed_) on the stream; `positions` >= layout_.max_positions
    // sizes the attention's shared memory.
    void enqueue_forward(const KvCacheShape& shape, int32_t positions);
    // enqueue_forward under stream capture, instantiated. Nothing runs.
    GraphExec capture(const KvCacheShape& shape, int32_t positions);
    // Runs the planned batch: a cached graph, a new capture, or eagerly.
    void dispatch(const KvCacheShape& shape);
    // After a failed capture or replay (`what`): graphs off, cache dropped, one line on stderr.
    void turn_graphs_off(const char* what, const std::string& reason);

    std::shared_ptr<const DeviceModel> weights_;
    const LlamaModel* model_;
    ForwardOptions options_;
    int device_;
    Stream stream_;
    CublasHandle cublas_;
    Event start_, end_;

    // Scratch, M = max_batch_tokens, R = max_logit_rows.
    DeviceBuffer x_;         // (M, dim) f32 residual stream
    DeviceBuffer act_;       // (M, max(dim, q_dim, ffn_dim)) 16-bit: GEMM inputs (normed rows, attention output, gated FFN output)
    DeviceBuffer qkv_;       // (M, q_dim + 2*kv_dim) f32 q | k | v
    DeviceBuffer proj_;      // (M, dim) f32 wo / w_down products before their post-norm (models with post-norms), else empty
    DeviceBuffer gate_up_;   // (M, 2*ffn_dim) f32 gate | up
    DeviceBuffer ffn_act_;   // (min(M, kGemvMaxRows), ffn_dim) 16-bit gated FFN output of launch_gemv_gated
    DeviceBuffer out_act_;   // (R, dim) 16-bit normed rows that need logits
    DeviceBuffer logits_;    // (R, n_vocab) f32
    DeviceBuffer tokens_;    // (R) int32 argmax per row
    PinnedBuffer logits_host_;    // (R, n_vocab) f32
    PinnedBuffer tokens_host_;    // (R) int32

    // The cache this backend made (set by make_kv_cache).
    const PagedKvCache* kv_owner_ = nullptr;
    DeviceBuffer k_pool_;        // (n_blocks, n_layers, block_size, kv_dim) 16-bit
    DeviceBuffer v_pool_;        // (n_blocks, n_layers, block_size, kv_dim) 16-bit
    DeviceBuffer packed_;        // (packed_capacity) int32: the batch layout
    PinnedBuffer packed_host_;   // (packed_capacity) int32 staging for the one upload
    BatchLayout layout_;

    // CUDA graphs of small steps; they point into the buffers above, so
    // make_kv_cache() clears them.
    GraphPolicy graph_policy_;
    GraphCache<GraphExec> graphs_{GraphPolicy{}.capacity};
    GraphStats graph_stats_;
    bool graphs_on_ = graphs_from_environment();
    bool gemv_on_ = gemv_from_environment();
    std::string graphs_off_reason_;
};

}  // namespace specd::gpu
