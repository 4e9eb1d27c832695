#include "gpu/device_model.h"

#include <cmath>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "gpu/kernels.h"

namespace specd::gpu {

namespace {

// An f32 vector in device memory; an empty vector gives an empty buffer
// (an absent bias or norm).
DeviceBuffer upload_floats(const std::vector<float>& v) {
    if (v.empty()) return DeviceBuffer();
    DeviceBuffer buf(v.size() * sizeof(float));
    buf.upload(v.data(), buf.bytes());
    return buf;
}

// bq | bk | bv as one vector (the q | k | v rows' order), empty without biases.
std::vector<float> stacked_biases(const LlamaLayer& L) {
    std::vector<float> b;
    if (L.bq.empty()) return b;
    b.reserve(L.bq.size() + L.bk.size() + L.bv.size());
    b.insert(b.end(), L.bq.begin(), L.bq.end());
    b.insert(b.end(), L.bk.begin(), L.bk.end());
    b.insert(b.end(), L.bv.begin(), L.bv.end());
    return b;
}

// The features of LlamaModel::graph_beyond_llama2 that the kernels run
// (its exact wording; tests/engine/test_model_families.cpp pins it). A
// feature the engine adds later is refused until it is listed here.
constexpr std::string_view kCudaRuns[] = {
    "NEOX RoPE",                                   // HeadShape::neox in rope_store_kv
    "partial rotary",                              // HeadShape::rope_half < head_dim / 2
    "Q/K/V biases",                                // QkvExtras::bias
    "Q/K norms",                                   // QkvExtras::q_norm / k_norm
    "a head size other than dim/heads",            // q_dim-wide buffers and wo
    "GeGLU",                                       // GateActivation::GeluTanh
    "post-norms",                                  // launch_add_rms_norm
    "sliding-window layers",                       // paged attention's window, the windowed RoPE tables
    "a scaled embedding",                          // launch_embed_gather's scale
    "logit soft-capping",                          // launch_softcap
    "a query scale other than 1/sqrt(head_dim)",   // paged attention's scale
};

// Several matrices with the same column count, stacked by rows, as one
// 16-bit device matrix. Converted one matrix at a time (host memory stays
// at the largest part).
DeviceBuffer upload_stacked(std::initializer_list<const WeightMatrix*> parts, HalfType type) {
    int64_t rows = 0;
    const int64_t cols = (*parts.begin())->cols;
    for (const WeightMatrix* w : parts) {
        if (w->cols != cols) throw Error("device model: stacked matrices differ in columns");
        rows += w->rows;
    }
    DeviceBuffer buf(static_cast<size_t>(rows * cols) * sizeof(uint16_t));
    size_t offset = 0;
    for (const WeightMatrix* w : parts) {
        const std::vector<uint16_t> half = convert_to_half(*w, type);
        buf.upload(half.data(), half.size() * sizeof(uint16_t), offset);
        offset += half.size() * sizeof(uint16_t);
    }
    return buf;
}

DeviceBuffer random_matrix(int64_t rows, int64_t cols, HalfType type, uint64_t seed, cudaStream_t stream) {
    DeviceBuffer buf(static_cast<size_t>(rows * cols) * sizeof(uint16_t));
    // Uniform with the variance of a 1/sqrt(cols)-scaled init, so activations
    // stay finite through many layers.
    launch_fill_random_half(buf.as<uint16_t>(), static_cast<size_t>(rows * cols), seed, std::sqrt(3.0f / static_cast<float>(cols)),
                            type, stream);
    return buf;
}

DeviceBuffer ones(int64_t n, cudaStream_t stream) {
    DeviceBuffer buf(static_cast<size_t>(n) * sizeof(float));
    launch_fill_float(buf.as<float>(), static_cast<size_t>(n), 1.0f, stream);
    return buf;
}

}  // namespace

std::string cuda_unsupported_features(const LlamaModel& model) {
    const std::string beyond = model.graph_beyond_llama2();
    std::string out;
    for (size_t start = 0; start < beyond.size();) {
        const size_t comma = beyond.find(", ", start);
        const std::string_view feature = std::string_view(beyond).substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        bool runs = false;
        for (std::string_view known : kCudaRuns) runs = runs || feature == known;
        if (!runs) out += (out.empty() ? "" : ", ") + std::string(feature);
        if (comma == std::string::npos) break;
        start = comma + 2;
    }
    return out;
}

std::shared_ptr<DeviceModel> DeviceModel::upload(const LlamaModel& model, int device, HalfType type) {
    // RoPE frequencies (base, scaling, factors, attention factor) come in
    // through the tables; what a family adds to the graph, through the
    // per-layer extras and the kernels' options.
    if (const std::string missing = cuda_unsupported_features(model); !missing.empty()) {
        throw Error(model.path() + ": the CUDA backend does not run " + missing + " (" + std::string(model.family().arch) +
                    "); run it with --device cpu");
    }
    DeviceGuard guard(device);
    const LlamaHparams& hp = model.hparams();
    std::shared_ptr<DeviceModel> dm(new DeviceModel(hp, device, type));
    for (const LlamaLayer& L : model.layers()) {
        DeviceLayer d;
        d.attn_norm = upload_floats(L.attn_norm);
        d.ffn_norm = upload_floats(L.ffn_norm);
        d.wqkv = upload_stacked({&L.wq, &L.wk, &L.wv}, type);
        d.bqkv = upload_floats(stacked_biases(L));
        d.q_norm = upload_floats(L.q_norm);
        d.k_norm = upload_floats(L.k_norm);
        d.wo = upload_stacked({&L.wo}, type);
        d.post_attn_norm = upload_floats(L.post_attn_norm);
        d.w_gate_up = upload_stacked({&L.w_gate, &L.w_up}, type);
        d.w_down = upload_stacked({&L.w_down}, type);
        d.post_ffn_norm = upload_floats(L.post_ffn_norm);
        d.windowed = L.windowed;
        dm->layers_.push_back(std::move(d));
    }
    dm->token_embd_ = upload_stacked({&model.token_embedding()}, type);
    if (!model.classifier_tied()) dm->classifier_ = upload_stacked({&model.classifier()}, type);
    dm->output_norm_ = upload_floats(model.output_norm());
    dm->upload_rope_tables();
    return dm;
}

std::shared_ptr<DeviceModel> DeviceModel::random(const LlamaHparams& hp, int device, HalfType type, uint64_t seed) {
    DeviceGuard guard(device);
    std::shared_ptr<DeviceModel> dm(new DeviceModel(hp, device, type));
    Stream stream;
    const int64_t dim = hp.dim, qd = hp.q_dim(), kvd = hp.kv_dim(), ffn = hp.ffn_dim;
    for (int32_t l = 0; l < hp.n_layers; ++l) {
        const uint64_t s = seed * 1000003ull + static_cast<uint64_t>(l) * 16;
        DeviceLayer d;
        d.attn_norm = ones(dim, stream.get());
        d.ffn_norm = ones(dim, stream.get());
        d.wqkv = random_matrix(qd + 2 * kvd, dim, type, s + 1, stream.get());
        d.wo = random_matrix(dim, qd, type, s + 2, stream.get());
        d.w_gate_up = random_matrix(2 * ffn, dim, type, s + 3, stream.get());
        d.w_down = random_matrix(dim, ffn, type, s + 4, stream.get());
        dm->layers_.push_back(std::move(d));
    }
    dm->token_embd_ = random_matrix(hp.n_vocab, dim, type, seed + 7, stream.get());
    dm->classifier_ = random_matrix(hp.n_vocab, dim, type, seed + 11, stream.get());
    dm->output_norm_ = ones(dim, stream.get());
    stream.synchronize();
    dm->upload_rope_tables();
    return dm;
}

void DeviceModel::upload_rope_tables() {
    std::vector<float> c, s;
    rope_tables(hparams_, hparams_.n_ctx_train, c, s);
    rope_cos_ = upload_floats(c);
    rope_sin_ = upload_floats(s);
    if (hparams_.sliding_window > 0) {
        rope_tables(hparams_, hparams_.n_ctx_train, c, s, true);
        rope_cos_swa_ = upload_floats(c);
        rope_sin_swa_ = upload_floats(s);
    }
}

bool DeviceModel::post_norms() const {
    for (const DeviceLayer& d : layers_) {
        if (!d.post_attn_norm.empty() || !d.post_ffn_norm.empty()) return true;
    }
    return false;
}

namespace {

// Bytes of a layer's buffers (every one a step reads).
size_t layer_bytes(const DeviceLayer& d) {
    return d.attn_norm.bytes() + d.ffn_norm.bytes() + d.wqkv.bytes() + d.bqkv.bytes() + d.q_norm.bytes() + d.k_norm.bytes() +
           d.wo.bytes() + d.post_attn_norm.bytes() + d.w_gate_up.bytes() + d.w_down.bytes() + d.post_ffn_norm.bytes();
}

}  // namespace

const uint16_t* DeviceModel::classifier() const {
    return classifier_.empty() ? token_embd_.as<uint16_t>() : classifier_.as<uint16_t>();
}

size_t DeviceModel::step_weight_bytes() const {
    size_t bytes = output_norm_.bytes() + static_cast<size_t>(hparams_.n_vocab) * hparams_.dim * sizeof(uint16_t);
    for (const DeviceLayer& d : layers_) bytes += layer_bytes(d);
    return bytes;
}

size_t DeviceModel::total_bytes() const {
    size_t bytes = token_embd_.bytes() + classifier_.bytes() + output_norm_.bytes() + rope_cos_.bytes() + rope_sin_.bytes() +
                   rope_cos_swa_.bytes() + rope_sin_swa_.bytes();
    for (const DeviceLayer& d : layers_) bytes += layer_bytes(d);
    return bytes;
}

}  // namespace specd::gpu
