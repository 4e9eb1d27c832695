#include "gpu/cuda_forward.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "engine/batch_check.h"
#include "gpu/kernels.h"

namespace specd::gpu {

namespace {

cudaDataType_t cuda_type(HalfType type) { return type == HalfType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

// Makes `device` current before the stream and handle members are created on it.
int make_current(int device) {
    SPECD_CUDA_CHECK(cudaSetDevice(device));
    return device;
}

}  // namespace

size_t CudaForward::kv_block_bytes(const LlamaHparams& hp, int32_t block_size) {
    return 2 * static_cast<size_t>(hp.n_layers) * static_cast<size_t>(block_size) * static_cast<size_t>(hp.kv_dim()) *
           sizeof(uint16_t);
}

CudaForward::CudaForward(std::shared_ptr<const DeviceModel> weights, const LlamaModel* model, ForwardOptions options)
    : weights_(std::move(weights)),
      model_(model),
      options_(options),
      device_(make_current(weights_->device())),
      cublas_(stream_) {
    const LlamaHparams& hp = weights_->hparams();
    if (options_.max_batch_tokens <= 0 || options_.max_logit_rows <= 0) {
        throw Error("forward: max_batch_tokens and max_logit_rows must be positive");
    }
    options_.max_logit_rows = std::min(options_.max_logit_rows, options_.max_batch_tokens);
    const size_t M = static_cast<size_t>(options_.max_batch_tokens), R = static_cast<size_t>(options_.max_logit_rows);
    const size_t dim = static_cast<size_t>(hp.dim), qd = static_cast<size_t>(hp.q_dim()), kvd = static_cast<size_t>(hp.kv_dim());
    const size_t ffn = static_cast<size_t>(hp.ffn_dim), vocab = static_cast<size_t>(hp.n_vocab);
    x_ = DeviceBuffer(M * dim * sizeof(float));
    act_ = DeviceBuffer(M * std::max({dim, qd, ffn}) * sizeof(uint16_t));
    qkv_ = DeviceBuffer(M * (qd + 2 * kvd) * sizeof(float));
    if (weights_->post_norms()) proj_ = DeviceBuffer(M * dim * sizeof(float));
    gate_up_ = DeviceBuffer(M * 2 * ffn * sizeof(float));
    ffn_act_ = DeviceBuffer(std::min(M, static_cast<size_t>(kGemvMaxRows)) * ffn * sizeof(uint16_t));
    out_act_ = DeviceBuffer(R * dim * sizeof(uint16_t));
    logits_ = DeviceBuffer(R * vocab * sizeof(float));
    tokens_ = DeviceBuffer(R * sizeof(int32_t));
    logits_host_ = PinnedBuffer(R * vocab * sizeof(float));
    tokens_host_ = PinnedBuffer(R * sizeof(int32_t));
    gemv_on_ = gemv_on_ && mma_supported(device_);
}

CudaForward::~CudaForward() = default;

const LlamaModel& CudaForward::model() const {
    if (!model_) throw Error("cuda forward: a synthetic model has no LlamaModel (file, tokenizer)");
    return *model_;
}

std::unique_ptr<PagedKvCache> CudaForward::make_kv_cache(const KvCacheShape& shape) {
    const LlamaHparams& hp = weights_->hparams();
    if (shape.n_layers != hp.n_layers || shape.kv_dim != hp.kv_dim()) {
        throw Error("cuda forward: the KV cache shape is for another model");
    }
    SPECD_CUDA_CHECK(cudaSetDevice(device_));
    // First: the graphs point at the pools and the layout buffer about to be
    // freed, and the old cache must not pass as this backend's if an allocation fails.
    graphs_.clear();
    kv_owner_ = nullptr;
    auto kv = std::make_unique<PagedKvCache>(shape, KvStorage::None);
    const size_t elements = static_cast<size_t>(shape.n_blocks) * shape.n_layers * shape.block_size * shape.kv_dim;
    k_pool_ = DeviceBuffer();  // free the previous pool first: two would not fit where one is sized to the budget
    v_pool_ = DeviceBuffer();
    k_pool_ = DeviceBuffer(elements * sizeof(uint16_t));
    v_pool_ = DeviceBuffer(elements * sizeof(uint16_t));
    BatchLimits limits{hp.n_vocab, hp.n_ctx_train, options_.max_batch_tokens, options_.max_logit_rows};
    const size_t capacity = packed_capacity(shape, limits);
    packed_ = DeviceBuffer(capacity * sizeof(int32_t));
    packed_host_ = PinnedBuffer(capacity * sizeof(int32_t));
    layout_.packed.reserve(capacity);
    kv_owner_ = kv.get();
    return kv;
}

void CudaForward::gemm(const uint16_t* a, const uint16_t* w, float* c, int32_t m_rows, int32_t n_out, int32_t k, float beta) {
    // Row-major C (m_rows, n_out) is column-major C^T (n_out, m_rows) = W · A^T:
    // W row-major (n_out, k) read as column-major (k, n_out) and transposed,
    // A row-major (m_rows, k) read as column-major (k, m_rows).
    if (gemv_on_ && gemv_fits(a, w, m_rows, k)) {  // gemv_on_ only where the tensor cores' mma.sync runs
        launch_gemv(a, w, weights_->type(), c, m_rows, n_out, k, beta, stream_.get());
        return;
    }
    const float alpha = 1.0f;
    const cudaDataType_t t = cuda_type(weights_->type());
    SPECD_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, n_out, m_rows, k, &alpha, w, t, k, a, t, k, &beta, c,
                                    CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int32_t CudaForward::run(PagedKvCache& kv, std::span<const BatchItem> items) {
    const LlamaHparams& hp = weights_->hparams();
    if (&kv != kv_owner_) throw Error("cuda forward: this KV cache was not made by this backend (make_kv_cache)");
    SPECD_CUDA_CHECK(cudaSetDevice(device_));
    const BatchLimits limits{hp.n_vocab, hp.n_ctx_train, options_.max_batch_tokens, options_.max_logit_rows};
    plan_batch(kv, items, limits, layout_);
    const int32_t m = layout_.n_rows, r = layout_.n_out;
    if (m == 0) return 0;

    const size_t packed_bytes = layout_.packed.size() * sizeof(int32_t);
    std::memcpy(packed_host_.as(), layout_.packed.data(), packed_bytes);
    cudaStream_t s = stream_.get();
    start_.record(stream_);
    SPECD_CUDA_CHECK(cudaMemcpyAsync(packed_.as(), packed_host_.as(), packed_bytes, cudaMemcpyHostToDevice, s));
    dispatch(kv.shape());
    return r;
}

namespace {

// An on/off switch from the environment: off for "0", "off", "false"; on otherwise (also unset).
bool switch_from_environment(const char* name) {
    const char* value = std::getenv(name);
    if (!value) return true;
    const std::string_view v(value);
    return !(v == "0" || v == "off" || v == "false");
}

}  // namespace

bool CudaForward::graphs_from_environment() { return switch_from_environment("SPECD_CUDA_GRAPHS"); }

bool CudaForward::gemv_from_environment() { return switch_from_environment("SPECD_CUDA_GEMV"); }

bool CudaForward::mma_supported(int device) {
    int major = 0;
    SPECD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 8;
}

void CudaForward::set_small_batch_gemv(bool on) {
    gemv_on_ = on && mma_supported(device_);
    graphs_.clear();  // captured steps hold the other kernels
}

void CudaForward::set_graphs(bool on) {
    graphs_on_ = on;
    graphs_.clear();
    if (on) graphs_off_reason_.clear();
}

void CudaForward::set_graph_policy(const GraphPolicy& policy) {
    graph_policy_ = policy;
    graphs_ = GraphCache<GraphExec>(policy.capacity);
}

void CudaForward::dispatch(const KvCacheShape& shape) {
    // The attention's shared memory, (head_dim + positions + 32) floats, within the default 48 KiB.
    const int32_t max_graph_positions = 48 * 1024 / static_cast<int32_t>(sizeof(float)) - weights_->hparams().head_dim - 32;
    const std::optional<GraphKey> key =
        graphs_on_ ? graph_key(layout_, shape.max_seq_len, graph_policy_, max_graph_positions) : std::nullopt;
    if (!key) {
        ++graph_stats_.eager;
        enqueue_forward(shape, layout_.max_positions);
        return;
    }
    switch (graphs_.plan(*key)) {
        case GraphCache<GraphExec>::Action::Replay:
            try {
                graphs_.find(*key)->launch(stream_);
            } catch (const std::exception& e) {
                // Not enqueued: drop the graphs and run the step eagerly (a sticky error fails that too).
                turn_graphs_off("replay", e.what());
                enqueue_forward(shape, layout_.max_positions);
                return;
            }
            ++graph_stats_.replays;
            return;
        case GraphCache<GraphExec>::Action::Warmup:
            ++graph_stats_.warmups;
            enqueue_forward(shape, key->positions);
            return;
        case GraphCache<GraphExec>::Action::Capture:
            break;
    }
    GraphExec exec;
    try {
        exec = capture(shape, key->positions);
        exec.launch(stream_);
    } catch (const std::exception& e) {
        // Nothing of this step has run: turn graphs off and run it eagerly.
        turn_graphs_off("capture", e.what());
        enqueue_forward(shape, layout_.max_positions);
        return;
    }
    ++graph_stats_.captures;
    if (graphs_.insert(*key, std::move(exec))) ++graph_stats_.evictions;
}

void CudaForward::turn_graphs_off(const char* what, const std::string& reason) {
    (void)cudaGetLastError();  // a failed capture or launch must not fail the eager launches' checks
    graphs_on_ = false;
    graphs_.clear();
    graphs_off_reason_ = std::string(what) + ": " + reason;
    ++graph_stats_.eager;
    std::cerr << "specd: " << name() << ": CUDA graph " << what << " failed, running without graphs: " << reason << "\n";
}

GraphExec CudaForward::capture(const KvCacheShape& shape, int32_t positions) {
    cudaStream_t s = stream_.get();
    // Relaxed: the attention launcher may set a kernel attribute (not a
    // stream operation) while capturing; other threads' streams are not affected.
    SPECD_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    try {
        enqueue_forward(shape, positions);
    } catch (...) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(s, &partial);  // leaves capture mode whatever happened
        if (partial) (void)cudaGraphDestroy(partial);
        (void)cudaGetLastError();
        throw;
    }
    cudaGraph_t graph = nullptr;
    SPECD_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    struct GraphOwner {
        cudaGraph_t graph;
        ~GraphOwner() { (void)cudaGraphDestroy(graph); }
    } owner{graph};  // the instantiated exec does not need the graph afterwards
    return GraphExec(graph);
}

void CudaForward::enqueue_forward(const KvCacheShape& ks, int32_t positions) {
    // engine/forward.cpp's run_layers, step by step; what a family adds is
    // switched by the model's hparams and each layer's (possibly empty) extras.
    const LlamaHparams& hp = weights_->hparams();
    const int32_t m = layout_.n_rows, r = layout_.n_out;
    cudaStream_t s = stream_.get();
    const int32_t* packed = packed_.as<int32_t>();

    const int32_t dim = hp.dim, qd = hp.q_dim(), kvd = hp.kv_dim(), ffn = hp.ffn_dim, qkv_ld = qd + 2 * kvd;
    const HalfType ht = weights_->type();
    RowsView rows;
    rows.n_rows = m;
    rows.row_pos = packed + layout_.at.row_pos;
    rows.row_item = packed + layout_.at.row_item;
    rows.block_table = packed + layout_.at.block_table;
    rows.table_stride = layout_.table_stride;
    const bool neox = hp.family->rope_pairing == RopePairing::Neox;
    const HeadShape heads{hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.rope_dim / 2, neox};
    const KvPoolView pool{k_pool_.as<uint16_t>(), v_pool_.as<uint16_t>(), ht, ks.n_layers, ks.block_size, ks.kv_dim};
    const float score_scale = hp.score_scale();
    const GateActivation gate_act =
        hp.family->ffn_activation == FfnActivation::GeluTanh ? GateActivation::GeluTanh : GateActivation::Silu;

    float* x = x_.as<float>();
    uint16_t* act = act_.as<uint16_t>();
    float* qkv = qkv_.as<float>();
    float* gate_up = gate_up_.as<float>();
    float* proj = proj_.as<float>();  // null without post-norms
    // out (m, dim) of a block (wo or w_down, input width k): added to the
    // residual stream by the GEMM itself, or, with a post-norm, written to
    // proj and added normed.
    auto block_output = [&](const uint16_t* in, const DeviceBuffer& w, int32_t k, const DeviceBuffer& post_norm) {
        if (post_norm.empty()) {
            gemm(in, w.as<uint16_t>(), x, m, dim, k, 1.0f);  // x += in · w^T
        } else {
            gemm(in, w.as<uint16_t>(), proj, m, dim, k, 0.0f);
            launch_add_rms_norm(proj, post_norm.as<float>(), m, dim, hp.rms_eps, x, s);  // x += rmsnorm(in · w^T)
        }
    };

    launch_embed_gather(weights_->token_embedding(), ht, packed + layout_.at.row_token, m, dim, hp.embedding_scale, x, s);
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const DeviceLayer& L = weights_->layers()[static_cast<size_t>(l)];
        const float* rope_cos = weights_->rope_cos(L.windowed);
        const float* rope_sin = weights_->rope_sin(L.windowed);
        launch_rms_norm_to_half(x, L.attn_norm.as<float>(), nullptr, m, dim, hp.rms_eps, ht, act, s);
        const QkvExtras extras{L.bqkv.as<float>(), L.q_norm.as<float>(), L.k_norm.as<float>(), hp.rms_eps};
        const bool plain_qkv = !neox && !extras.bias && !extras.q_norm;  // Llama's graph: the fused kernel's case
        if (plain_qkv && gemv_on_ && gemv_fits(act, L.wqkv.as<uint16_t>(), m, dim)) {
            // Decode and verification sizes: q | k | v, RoPE and the K/V stores in one kernel.
            launch_gemv_qkv_rope(act, L.wqkv.as<uint16_t>(), qkv, qkv_ld, dim, rows, heads, rope_cos, rope_sin, pool, l, s);
        } else {
            gemm(act, L.wqkv.as<uint16_t>(), qkv, m, qkv_ld, dim, 0.0f);
            launch_rope_store_kv(qkv, qkv_ld, rows, heads, rope_cos, rope_sin, pool, l, extras, s);
        }
        launch_paged_attention(qkv, qkv_ld, rows, heads, pool, l, positions, score_scale, L.windowed ? hp.sliding_window : 0, ht,
                               act, s);
        block_output(act, L.wo, qd, L.post_attn_norm);  // the attention output (m, q_dim) through wo
        launch_rms_norm_to_half(x, L.ffn_norm.as<float>(), nullptr, m, dim, hp.rms_eps, ht, act, s);
        if (gemv_on_ && gemv_fits(act, L.w_gate_up.as<uint16_t>(), m, dim)) {
            // Decode and verification sizes: gate | up and the activation in one kernel, into their own buffer.
            launch_gemv_gated(act, L.w_gate_up.as<uint16_t>(), ht, gate_act, m, ffn, dim, ffn_act_.as<uint16_t>(), s);
            block_output(ffn_act_.as<uint16_t>(), L.w_down, ffn, L.post_ffn_norm);
        } else {
            gemm(act, L.w_gate_up.as<uint16_t>(), gate_up, m, 2 * ffn, dim, 0.0f);
            launch_gated_to_half(gate_up, m, ffn, gate_act, ht, act, s);
            block_output(act, L.w_down, ffn, L.post_ffn_norm);
        }
    }
    launch_rms_norm_to_half(x, weights_->output_norm(), packed + layout_.at.out_row, r, dim, hp.rms_eps, ht,
                            out_act_.as<uint16_t>(), s);
    gemm(out_act_.as<uint16_t>(), weights_->classifier(), logits_.as<float>(), r, hp.n_vocab, dim, 0.0f);
    if (hp.final_logit_softcap > 0.0f) {
        launch_softcap(logits_.as<float>(), static_cast<size_t>(r) * static_cast<size_t>(hp.n_vocab), hp.final_logit_softcap, s);
    }
}

void CudaForward::finish(PagedKvCache& kv, std::span<const BatchItem> items) {
    end_.record(stream_);
    end_.synchronize();  // this thread waits for its own stream only
    for (const BatchItem& item : items) {
        kv.set_length(item.seq, kv.length(item.seq) + static_cast<int32_t>(item.tokens.size()));
    }
}

std::span<const float> CudaForward::forward(PagedKvCache& kv, std::span<const BatchItem> items) {
    const int32_t r = run(kv, items);
    if (r == 0) return {};
    const size_t bytes = static_cast<size_t>(r) * static_cast<size_t>(weights_->hparams().n_vocab) * sizeof(float);
    SPECD_CUDA_CHECK(cudaMemcpyAsync(logits_host_.as(), logits_.as(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    finish(kv, items);
    return {logits_host_.as<const float>(), bytes / sizeof(float)};
}

void CudaForward::forward_argmax(PagedKvCache& kv, std::span<const BatchItem> items, std::vector<int32_t>& out) {
    out.clear();
    const int32_t r = run(kv, items);
    if (r == 0) return;
    launch_argmax_rows(logits_.as<float>(), r, weights_->hparams().n_vocab, tokens_.as<int32_t>(), stream_.get());
    SPECD_CUDA_CHECK(cudaMemcpyAsync(tokens_host_.as(), tokens_.as(), static_cast<size_t>(r) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_.get()));
    finish(kv, items);
    out.assign(tokens_host_.as<int32_t>(), tokens_host_.as<int32_t>() + r);
}

bool CudaForward::forward_greedy(PagedKvCache& kv, std::span<const BatchItem> items, std::span<int32_t> argmax_out) {
    // Before running, so a short span fails with nothing appended to any sequence.
    check_argmax_slots(items, argmax_out.size());
    const int32_t r = run(kv, items);
    if (r == 0) return true;
    if (static_cast<size_t>(r) > argmax_out.size()) {  // run() and the count above disagree: never copy past the span
        throw Error("cuda forward: " + std::to_string(r) + " logit rows, more than the " + std::to_string(argmax_out.size()) +
                    " argmax slots");
    }
    launch_argmax_rows(logits_.as<float>(), r, weights_->hparams().n_vocab, tokens_.as<int32_t>(), stream_.get());
    SPECD_CUDA_CHECK(cudaMemcpyAsync(tokens_host_.as(), tokens_.as(), static_cast<size_t>(r) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_.get()));
    finish(kv, items);
    std::copy_n(tokens_host_.as<int32_t>(), r, argmax_out.begin());
    return true;
}

}  // namespace specd::gpu
