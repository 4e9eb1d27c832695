#include "gpu_checks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>

#include <unistd.h>

#include "engine/batch_verifier.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/proposer.h"
#include "engine/speculative.h"
#include "gpu/batch_layout.h"
#include "gpu/cuda_forward.h"
#include "gpu/cuda_handles.h"
#include "gpu/device_model.h"
#include "gpu/kernels.h"
#include "gpu/weight_convert.h"
#include "tests/support/family_models.h"
#include "tests/support/full_logits_only.h"

namespace specd::gpu::checks {

namespace {

void expect(bool ok, const std::string& message) {
    if (!ok) throw CheckFailed(message);
}

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T));
    b.upload(v.data(), b.bytes());
    return b;
}

template <class T>
std::vector<T> from_device(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    b.download(v.data(), n * sizeof(T));
    return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::vector<uint16_t> to_half(const std::vector<float>& v, HalfType t) {
    std::vector<uint16_t> h(v.size());
    floats_to_half(v.data(), static_cast<int64_t>(v.size()), t, h.data());
    return h;
}

std::vector<float> from_half(const std::vector<uint16_t>& h, HalfType t) {
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = half_to_float(h[i], t);
    return v;
}

// Relative tolerance of one rounding to the 16-bit type, with some slack.
float half_tolerance(HalfType t) { return t == HalfType::F16 ? 2e-3f : 1.6e-2f; }

// |got - want| <= rel * |want| + abs for every element; logs the worst.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, float abs, const std::string& what,
                  std::ostream& log) {
    expect(got.size() == want.size(), what + ": sizes differ");
    float worst = 0.0f;
    size_t worst_at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const float err = std::fabs(got[i] - want[i]);
        const float allowed = rel * std::fabs(want[i]) + abs;
        if (!(err <= allowed)) {
            throw CheckFailed(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                              std::to_string(want[i]) + " (tolerance " + std::to_string(allowed) + ")");
        }
        if (err > worst) {
            worst = err;
            worst_at = i;
        }
    }
    log << "  " << what << ": " << got.size() << " values, max abs error " << worst << " at " << worst_at << "\n";
}

void for_each_half_type(const std::function<void(HalfType)>& fn) {
    fn(HalfType::F16);
    fn(HalfType::BF16);
}

// ------------------------------------------------------------ kernels ---

void check_embed_gather(const Context&, std::ostream& log) {
    for_each_half_type([&](HalfType t) {
        const int32_t vocab = 50, dim = 37;
        const std::vector<uint16_t> table = to_half(random_floats(static_cast<size_t>(vocab * dim), 1), t);
        const std::vector<int32_t> tokens = {3, 0, 49, 3};
        DeviceBuffer d_table = to_device(table), d_tokens = to_device(tokens);
        DeviceBuffer d_x(tokens.size() * dim * sizeof(float));
        // Scale 1 (the overload without one) and Gemma's sqrt(dim) scaling.
        for (const float scale : {1.0f, std::sqrt(static_cast<float>(dim))}) {
            if (scale == 1.0f) {
                launch_embed_gather(d_table.as<uint16_t>(), t, d_tokens.as<int32_t>(), 4, dim, d_x.as<float>(), nullptr);
            } else {
                launch_embed_gather(d_table.as<uint16_t>(), t, d_tokens.as<int32_t>(), 4, dim, scale, d_x.as<float>(), nullptr);
            }
            SPECD_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> want;
            for (int32_t tok : tokens) {
                for (int32_t i = 0; i < dim; ++i) want.push_back(half_to_float(table[static_cast<size_t>(tok * dim + i)], t) * scale);
            }
            expect_close(from_device<float>(d_x, want.size()), want, 0.0f, 0.0f,
                         std::string("embed_gather ") + half_type_name(t) + ", scale " + std::to_string(scale), log);
        }
    });
}

void check_rms_norm(const Context&, std::ostream& log) {
    for_each_half_type([&](HalfType t) {
        const int32_t n_src = 6, dim = 300;
        const float eps = 1e-5f;
        const std::vector<float> x = random_floats(static_cast<size_t>(n_src * dim), 2, -3.0f, 3.0f);
        const std::vector<float> w = random_floats(static_cast<size_t>(dim), 3, 0.5f, 1.5f);
        for (bool picked : {false, true}) {
            const std::vector<int32_t> rows = picked ? std::vector<int32_t>{5, 0, 2} : std::vector<int32_t>{0, 1, 2, 3, 4, 5};
            DeviceBuffer d_x = to_device(x), d_w = to_device(w), d_rows = to_device(rows);
            DeviceBuffer d_out(rows.size() * dim * sizeof(uint16_t));
            launch_rms_norm_to_half(d_x.as<float>(), d_w.as<float>(), picked ? d_rows.as<int32_t>() : nullptr,
                                    static_cast<int32_t>(rows.size()), dim, eps, t, d_out.as<uint16_t>(), nullptr);
            SPECD_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> want;
            for (int32_t r : rows) {  // the CPU engine's formula
                const float* row = &x[static_cast<size_t>(r * dim)];
                float ss = 0.0f;
                for (int32_t i = 0; i < dim; ++i) ss += row[i] * row[i];
                const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
                for (int32_t i = 0; i < dim; ++i) want.push_back(row[i] * scale * w[static_cast<size_t>(i)]);
            }
            expect_close(from_half(from_device<uint16_t>(d_out, want.size()), t), want, half_tolerance(t), 1e-6f,
                         std::string("rms_norm ") + half_type_name(t) + (picked ? " (row list)" : ""), log);
        }
    });
    // A post-norm and the residual add (Gemma): x += rmsnorm(proj) * w, all f32.
    const int32_t rows = 5, dim = 300;
    const float eps = 1e-6f;
    const std::vector<float> x = random_floats(static_cast<size_t>(rows * dim), 31, -3.0f, 3.0f);
    const std::vector<float> proj = random_floats(static_cast<size_t>(rows * dim), 32, -20.0f, 20.0f);
    const std::vector<float> w = random_floats(static_cast<size_t>(dim), 33, 0.5f, 1.5f);
    DeviceBuffer d_x = to_device(x), d_proj = to_device(proj), d_w = to_device(w);
    launch_add_rms_norm(d_proj.as<float>(), d_w.as<float>(), rows, dim, eps, d_x.as<float>(), nullptr);
    SPECD_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> want = x;
    for (int32_t r = 0; r < rows; ++r) {  // engine/forward.cpp add_normed_rows
        const float* p = &proj[static_cast<size_t>(r * dim)];
        float ss = 0.0f;
        for (int32_t i = 0; i < dim; ++i) ss += p[i] * p[i];
        const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
        for (int32_t i = 0; i < dim; ++i) want[static_cast<size_t>(r * dim + i)] += p[i] * scale * w[static_cast<size_t>(i)];
    }
    expect_close(from_device<float>(d_x, want.size()), want, 1e-5f, 1e-5f, "add_rms_norm (post-norm + residual, f32)", log);
}

// A small attention geometry shared by the RoPE and attention checks:
// grouped-query (4 heads over 2 kv heads), blocks of 4 positions, 2 layers.
struct Geometry {
    HeadShape heads{4, 2, 16, 8};
    int32_t n_layers = 2, layer = 1, block_size = 4, n_ctx = 1024;
    int32_t q_dim() const { return heads.n_heads * heads.head_dim; }
    int32_t kv_dim() const { return heads.n_kv_heads * heads.head_dim; }
    int32_t qkv_ld() const { return q_dim() + 2 * kv_dim(); }
    KvCacheShape shape(int32_t n_blocks) const {
        KvCacheShape s;
        s.n_layers = n_layers;
        s.kv_dim = kv_dim();
        s.block_size = block_size;
        s.n_blocks = n_blocks;
        s.max_seq_len = n_ctx;
        s.max_sequences = 4;
        return s;
    }
    size_t pool_index(int32_t block, int32_t pos) const {
        return ((static_cast<size_t>(block) * n_layers + layer) * block_size + pos % block_size) * kv_dim();
    }
};

// Sequences whose blocks interleave in the pool: A (length 8, 5 new
// tokens: a verification), B (length 5, 1 new: a decode step), C (length
// 700, 1 new: a long context).
struct PagedSetup {
    Geometry g;
    PagedKvCache kv{g.shape(260), KvStorage::None};
    explicit PagedSetup(const Geometry& geometry) : g(geometry), kv(g.shape(260), KvStorage::None) { init(); }
    PagedSetup() { init(); }
    BatchLayout layout;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<BatchItem> items;
    int32_t a = -1, b = -1, c = -1;
    void init() {
        a = kv.create_sequence();
        b = kv.create_sequence();
        c = kv.create_sequence();
        kv.reserve(a, 6);
        kv.reserve(b, 5);
        kv.reserve(a, 8);
        kv.reserve(c, 700);
        kv.set_length(a, 8);
        kv.set_length(b, 5);
        kv.set_length(c, 700);
        tokens = {{1, 2, 3, 4, 5}, {6}, {7}};
        items = {BatchItem{a, tokens[0], true}, BatchItem{b, tokens[1], false}, BatchItem{c, tokens[2], false}};
        plan_batch(kv, items, BatchLimits{100, g.n_ctx, 64, 64}, layout);
    }
    RowsView rows(const DeviceBuffer& packed) const {
        const int32_t* p = packed.as<int32_t>();
        return RowsView{layout.n_rows, p + layout.at.row_pos, p + layout.at.row_item, p + layout.at.block_table, layout.table_stride};
    }
    int32_t block_of(int32_t row, int32_t pos) const {
        return layout.block_table(layout.row_item()[static_cast<size_t>(row)])[static_cast<size_t>(pos / g.block_size)];
    }
};

// What rope_store_kv does in one variant: the pairing, the rotated part
// and the extras of a family.
struct RopeVariant {
    const char* name;
    bool neox = false;
    int32_t rope_half = 8;  // of Geometry's 8 pairs
    bool bias = false;
    bool qk_norm = false;
};

void check_rope_store_kv(const Context&, std::ostream& log) {
    const RopeVariant variants[] = {
        {"adjacent (Llama)"},
        {"NEOX + Q/K/V biases (Qwen2)", true, 8, true, false},
        {"NEOX + Q/K norms (Qwen3, Gemma 3)", true, 8, false, true},
        {"NEOX, 12 of 16 rotated (Phi-3)", true, 6, false, false},
        {"adjacent, 12 of 16 rotated, biases and Q/K norms", false, 6, true, true},
    };
    for_each_half_type([&](HalfType t) {
        for (const RopeVariant& var : variants) {
            Geometry geo;
            geo.heads.rope_half = var.rope_half;
            geo.heads.neox = var.neox;
            PagedSetup ps(geo);
            const Geometry& g = ps.g;
            const int32_t hd = g.heads.head_dim, half = g.heads.rope_half;
            LlamaHparams hp;
            hp.head_dim = hd;
            hp.rope_dim = 2 * half;
            hp.rope_freq_base = 10000.0f;
            std::vector<float> cos_t, sin_t;
            rope_tables(hp, g.n_ctx, cos_t, sin_t);
            const int32_t m = ps.layout.n_rows;
            const float eps = 1e-6f;
            const std::vector<float> qkv = random_floats(static_cast<size_t>(m * g.qkv_ld()), 4);
            const std::vector<float> bias = random_floats(static_cast<size_t>(g.qkv_ld()), 41, -0.5f, 0.5f);
            const std::vector<float> q_norm = random_floats(static_cast<size_t>(hd), 42, 0.5f, 1.5f);
            const std::vector<float> k_norm = random_floats(static_cast<size_t>(hd), 43, 0.5f, 1.5f);
            const size_t pool_elems = static_cast<size_t>(ps.kv.shape().n_blocks) * g.n_layers * g.block_size * g.kv_dim();
            DeviceBuffer d_qkv = to_device(qkv), d_cos = to_device(cos_t), d_sin = to_device(sin_t), d_packed = to_device(ps.layout.packed);
            DeviceBuffer d_bias = to_device(bias), d_qn = to_device(q_norm), d_kn = to_device(k_norm);
            DeviceBuffer d_k = to_device(std::vector<uint16_t>(pool_elems, 0)), d_v = to_device(std::vector<uint16_t>(pool_elems, 0));
            const KvPoolView pool{d_k.as<uint16_t>(), d_v.as<uint16_t>(), t, g.n_layers, g.block_size, g.kv_dim()};
            QkvExtras extras;
            extras.bias = var.bias ? d_bias.as<float>() : nullptr;
            extras.q_norm = var.qk_norm ? d_qn.as<float>() : nullptr;
            extras.k_norm = var.qk_norm ? d_kn.as<float>() : nullptr;
            extras.eps = eps;
            launch_rope_store_kv(d_qkv.as<float>(), g.qkv_ld(), ps.rows(d_packed), g.heads, d_cos.as<float>(), d_sin.as<float>(), pool,
                                 g.layer, extras, nullptr);
            SPECD_CUDA_CHECK(cudaDeviceSynchronize());

            // engine/forward.cpp's order: biases, head norms, then RoPE of each head.
            std::vector<float> want_qkv = qkv;
            for (int32_t r = 0; r < m; ++r) {
                const int32_t pos = ps.layout.row_pos()[static_cast<size_t>(r)];
                float* row = &want_qkv[static_cast<size_t>(r * g.qkv_ld())];
                if (var.bias) {
                    for (int32_t j = 0; j < g.qkv_ld(); ++j) row[j] += bias[static_cast<size_t>(j)];
                }
                for (int32_t part = 0; part < 2; ++part) {
                    float* base = part == 0 ? row : row + g.q_dim();
                    const int32_t n_heads = part == 0 ? g.heads.n_heads : g.heads.n_kv_heads;
                    const std::vector<float>& nw = part == 0 ? q_norm : k_norm;
                    for (int32_t h = 0; h < n_heads; ++h) {
                        float* v = base + h * hd;
                        if (var.qk_norm) {
                            float ss = 0.0f;
                            for (int32_t i = 0; i < hd; ++i) ss += v[i] * v[i];
                            const float scale = 1.0f / std::sqrt(ss / static_cast<float>(hd) + eps);
                            for (int32_t i = 0; i < hd; ++i) v[i] = v[i] * scale * nw[static_cast<size_t>(i)];
                        }
                        for (int32_t i = 0; i < half; ++i) {
                            const float c = cos_t[static_cast<size_t>(pos * half + i)];
                            const float s = sin_t[static_cast<size_t>(pos * half + i)];
                            float* x0 = var.neox ? v + i : v + 2 * i;
                            float* x1 = var.neox ? v + i + half : v + 2 * i + 1;
                            const float a0 = *x0, a1 = *x1;
                            *x0 = a0 * c - a1 * s;
                            *x1 = a0 * s + a1 * c;
                        }
                    }
                }
            }
            const std::string what = std::string(var.name) + " " + half_type_name(t);
            expect_close(from_device<float>(d_qkv, want_qkv.size()), want_qkv, 1e-5f, 1e-5f, "rope q|k|v (f32) " + what, log);
            const std::vector<float> k_pool = from_half(from_device<uint16_t>(d_k, pool_elems), t);
            const std::vector<float> v_pool = from_half(from_device<uint16_t>(d_v, pool_elems), t);
            std::vector<float> got, want;
            for (int32_t r = 0; r < m; ++r) {
                const int32_t pos = ps.layout.row_pos()[static_cast<size_t>(r)];
                const size_t at = g.pool_index(ps.block_of(r, pos), pos);
                const float* row = &want_qkv[static_cast<size_t>(r * g.qkv_ld())];
                for (int32_t j = 0; j < g.kv_dim(); ++j) {
                    got.push_back(k_pool[at + static_cast<size_t>(j)]);
                    want.push_back(row[g.q_dim() + j]);
                    got.push_back(v_pool[at + static_cast<size_t>(j)]);
                    want.push_back(row[g.q_dim() + g.kv_dim() + j]);
                }
            }
            expect_close(got, want, half_tolerance(t), 1e-5f, "rope k, v into the paged pool " + what, log);
        }
    });
}

// One attention launch on PagedSetup's rows against a double-precision
// reference: scores q.k * scale over [max(0, pos - window + 1), pos]
// (window 0: [0, pos]). scale 0: the overload without scale and window.
void paged_attention_case(HalfType t, const Geometry& geo, float scale, int32_t window, int32_t max_positions_extra,
                          const std::string& what, std::ostream& log) {
    PagedSetup ps(geo);
    const Geometry& g = ps.g;
    const int32_t m = ps.layout.n_rows, hd = g.heads.head_dim;
    const size_t pool_elems = static_cast<size_t>(ps.kv.shape().n_blocks) * g.n_layers * g.block_size * g.kv_dim();
    const std::vector<uint16_t> k_half = to_half(random_floats(pool_elems, 5), t);
    const std::vector<uint16_t> v_half = to_half(random_floats(pool_elems, 6), t);
    const std::vector<float> k_pool = from_half(k_half, t), v_pool = from_half(v_half, t);
    const std::vector<float> qkv = random_floats(static_cast<size_t>(m * g.qkv_ld()), 7, -2.0f, 2.0f);
    DeviceBuffer d_qkv = to_device(qkv), d_packed = to_device(ps.layout.packed), d_k = to_device(k_half), d_v = to_device(v_half);
    DeviceBuffer d_out(static_cast<size_t>(m * g.q_dim()) * sizeof(uint16_t));
    const KvPoolView pool{d_k.as<uint16_t>(), d_v.as<uint16_t>(), t, g.n_layers, g.block_size, g.kv_dim()};
    const int32_t max_positions = ps.layout.max_positions + max_positions_extra;
    if (scale == 0.0f) {
        launch_paged_attention(d_qkv.as<float>(), g.qkv_ld(), ps.rows(d_packed), g.heads, pool, g.layer, max_positions, t,
                               d_out.as<uint16_t>(), nullptr);
    } else {
        launch_paged_attention(d_qkv.as<float>(), g.qkv_ld(), ps.rows(d_packed), g.heads, pool, g.layer, max_positions, scale, window,
                               t, d_out.as<uint16_t>(), nullptr);
    }
    SPECD_CUDA_CHECK(cudaDeviceSynchronize());
    const double ref_scale = scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(hd)) : scale;

    std::vector<float> want;
    const int32_t group = g.heads.n_heads / g.heads.n_kv_heads;
    for (int32_t r = 0; r < m; ++r) {
        const int32_t pos = ps.layout.row_pos()[static_cast<size_t>(r)];
        const int32_t first = window > 0 ? std::max(0, pos - window + 1) : 0;  // causal, and within the window
        for (int32_t h = 0; h < g.heads.n_heads; ++h) {
            const float* q = &qkv[static_cast<size_t>(r * g.qkv_ld() + h * hd)];
            const size_t kv_off = static_cast<size_t>((h / group) * hd);
            std::vector<double> scores;
            double max_s = -1e300, sum = 0.0;
            for (int32_t p = first; p <= pos; ++p) {
                const size_t at = g.pool_index(ps.block_of(r, p), p) + kv_off;
                double dot = 0.0;
                for (int32_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k_pool[at + static_cast<size_t>(d)];
                scores.push_back(dot * ref_scale);
                max_s = std::max(max_s, scores.back());
            }
            for (double& sc : scores) sum += (sc = std::exp(sc - max_s));
            for (int32_t d = 0; d < hd; ++d) {
                double acc = 0.0;
                for (int32_t p = first; p <= pos; ++p) {
                    acc += scores[static_cast<size_t>(p - first)] *
                           v_pool[g.pool_index(ps.block_of(r, p), p) + kv_off + static_cast<size_t>(d)];
                }
                want.push_back(static_cast<float>(acc / sum));
            }
        }
    }
    expect_close(from_half(from_device<uint16_t>(d_out, want.size()), t), want, half_tolerance(t), 2e-3f,
                 "paged attention (verify T=5, decode, 701 positions) " + what + " " + half_type_name(t), log);
}

void check_paged_attention(const Context&, std::ostream& log) {
    for_each_half_type([&](HalfType t) {
        paged_attention_case(t, Geometry{}, 0.0f, 0, 0, "head size 16", log);
        // Gemma's windowed layers: a window shorter than a block, one that
        // spans blocks, and a query scale of its own.
        paged_attention_case(t, Geometry{}, 0.3f, 3, 0, "window 3, scale 0.3", log);
        paged_attention_case(t, Geometry{}, 0.25f, 37, 0, "window 37", log);
        // Gemma 3's head size 256 (2 heads over 1 kv head), windowed and
        // not; shared memory beyond the default 48 KiB (13000 positions' room).
        Geometry wide;
        wide.heads = HeadShape{2, 1, 256, 128, true};
        paged_attention_case(t, wide, 0.0625f, 0, 0, "head size 256", log);
        paged_attention_case(t, wide, 0.0625f, 512, 0, "head size 256, window 512", log);
        paged_attention_case(t, wide, 0.0625f, 4, 13000 - 701, "head size 256, window 4, 13000 positions of shared memory", log);
    });
}

void check_swiglu(const Context&, std::ostream& log) {
    for_each_half_type([&](HalfType t) {
        const int32_t rows = 3, ffn = 50;
        const std::vector<float> gu = random_floats(static_cast<size_t>(rows * 2 * ffn), 8, -4.0f, 4.0f);
        DeviceBuffer d_gu = to_device(gu), d_out(static_cast<size_t>(rows * ffn) * sizeof(uint16_t));
        for (const bool gelu : {false, true}) {
            if (gelu) {
                launch_gated_to_half(d_gu.as<float>(), rows, ffn, GateActivation::GeluTanh, t, d_out.as<uint16_t>(), nullptr);
            } else {
                launch_swiglu_to_half(d_gu.as<float>(), rows, ffn, t, d_out.as<uint16_t>(), nullptr);
            }
            SPECD_CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> want;
            for (int32_t r = 0; r < rows; ++r) {
                for (int32_t j = 0; j < ffn; ++j) {
                    const double g = gu[static_cast<size_t>(r * 2 * ffn + j)], u = gu[static_cast<size_t>(r * 2 * ffn + ffn + j)];
                    // reference_forward.cpp's expressions, in double
                    const double act = gelu ? 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)))
                                            : g / (1.0 + std::exp(-g));
                    want.push_back(static_cast<float>(act * u));
                }
            }
            expect_close(from_half(from_device<uint16_t>(d_out, want.size()), t), want, half_tolerance(t), 1e-5f,
                         std::string(gelu ? "geglu (GELU tanh) " : "swiglu ") + half_type_name(t), log);
        }
    });
}

void check_gemv(const Context&, std::ostream& log) {
    // Shapes: tails in n_out (not a multiple of a block's 16 rows) and in k
    // (9, 65 and 129 chunks of 32: partial unrolled loads; 4128 > 4096 takes
    // the 16-warp blocks), and rows 1..16.
    struct Shape {
        int32_t n_out, k;
    };
    const Shape shapes[] = {{37, 288}, {300, 2080}, {37, 4128}};
    const int32_t row_counts[] = {1, 2, 5, 9, 16};
    for_each_half_type([&](HalfType t) {
        for (const Shape& sh : shapes) {
            const int32_t max_rows = kGemvMaxRows;
            const std::vector<uint16_t> a = to_half(random_floats(static_cast<size_t>(max_rows * sh.k), 11), t);
            const std::vector<uint16_t> w = to_half(random_floats(static_cast<size_t>(sh.n_out * sh.k), 12), t);
            const std::vector<float> c0 = random_floats(static_cast<size_t>(max_rows * sh.n_out), 13, -10.0f, 10.0f);
            DeviceBuffer d_a = to_device(a), d_w = to_device(w), d_c(c0.size() * sizeof(float));
            // Row r alone (beta 0, c full of NaN: beta 0 must not read it) is the reference bits for every batch below.
            const std::vector<float> nans(c0.size(), std::nanf(""));
            std::vector<float> alone(c0.size());
            for (int32_t r = 0; r < max_rows; ++r) {
                d_c.upload(nans.data(), nans.size() * sizeof(float));
                launch_gemv(d_a.as<uint16_t>() + static_cast<size_t>(r) * sh.k, d_w.as<uint16_t>(), t, d_c.as<float>(), 1, sh.n_out,
                            sh.k, 0.0f, nullptr);
                SPECD_CUDA_CHECK(cudaDeviceSynchronize());
                const std::vector<float> got = from_device<float>(d_c, static_cast<size_t>(sh.n_out));
                std::copy(got.begin(), got.end(), alone.begin() + static_cast<ptrdiff_t>(r) * sh.n_out);
            }
            // Against a double-precision reference: f32 accumulation over k terms.
            double worst = 0.0;
            for (int32_t r = 0; r < max_rows; ++r) {
                for (int32_t o = 0; o < sh.n_out; ++o) {
                    double sum = 0.0, magnitude = 0.0;
                    for (int32_t i = 0; i < sh.k; ++i) {
                        const double p = static_cast<double>(half_to_float(a[static_cast<size_t>(r * sh.k + i)], t)) *
                                         half_to_float(w[static_cast<size_t>(o * sh.k + i)], t);
                        sum += p;
                        magnitude += std::fabs(p);
                    }
                    const double got = alone[static_cast<size_t>(r * sh.n_out + o)];
                    const double err = std::fabs(got - sum);
                    expect(err <= 1e-5 * magnitude + 1e-6, "gemv " + std::string(half_type_name(t)) + " row " + std::to_string(r) +
                                                               " output " + std::to_string(o) + ": " + std::to_string(got) +
                                                               ", expected " + std::to_string(sum));
                    worst = std::max(worst, err);
                }
            }
            for (int32_t m : row_counts) {
                for (float beta : {0.0f, 1.0f}) {
                    if (beta == 0.0f) {
                        d_c.upload(nans.data(), nans.size() * sizeof(float));
                    } else {
                        d_c.upload(c0.data(), c0.size() * sizeof(float));
                    }
                    launch_gemv(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, d_c.as<float>(), m, sh.n_out, sh.k, beta, nullptr);
                    SPECD_CUDA_CHECK(cudaDeviceSynchronize());
                    const std::vector<float> got = from_device<float>(d_c, static_cast<size_t>(m * sh.n_out));
                    for (size_t i = 0; i < got.size(); ++i) {
                        // Bit-equal to the row alone: the sum's order does not depend on the batch.
                        const float want = beta == 0.0f ? alone[i] : alone[i] + c0[i];
                        expect(got[i] == want, "gemv " + std::string(half_type_name(t)) + " with " + std::to_string(m) +
                                                   " rows, beta " + std::to_string(beta) + ": element " + std::to_string(i) + " is " +
                                                   std::to_string(got[i]) + ", the row alone gives " + std::to_string(want));
                    }
                }
            }
            log << "  gemv " << half_type_name(t) << " (" << sh.n_out << " x " << sh.k << "): rows 1, 2, 5, 9, 16, beta 0 and 1, "
                << "each row bit-equal to it alone; max error against f64 " << worst << "\n";
        }
        // The fused gate | up product and its activation: the bits of launch_gemv then launch_gated_to_half.
        for (const GateActivation act : {GateActivation::Silu, GateActivation::GeluTanh}) {
        const char* act_name = act == GateActivation::Silu ? "swiglu" : "geglu";
        for (const auto& [ffn, k] : {std::pair<int32_t, int32_t>{37, 288}, {300, 288}, {37, 4128}}) {
            const std::vector<uint16_t> a = to_half(random_floats(static_cast<size_t>(kGemvMaxRows * k), 14), t);
            const std::vector<uint16_t> w = to_half(random_floats(static_cast<size_t>(2 * ffn * k), 15, -0.3f, 0.3f), t);
            DeviceBuffer d_a = to_device(a), d_w = to_device(w);
            DeviceBuffer d_gu(static_cast<size_t>(kGemvMaxRows * 2 * ffn) * sizeof(float));
            DeviceBuffer d_ref(static_cast<size_t>(kGemvMaxRows * ffn) * sizeof(uint16_t)), d_out(d_ref.bytes());
            for (int32_t m : row_counts) {
                launch_gemv(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, d_gu.as<float>(), m, 2 * ffn, k, 0.0f, nullptr);
                launch_gated_to_half(d_gu.as<float>(), m, ffn, act, t, d_ref.as<uint16_t>(), nullptr);
                if (act == GateActivation::Silu) {
                    launch_gemv_swiglu(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, m, ffn, k, d_out.as<uint16_t>(), nullptr);
                } else {
                    launch_gemv_gated(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, act, m, ffn, k, d_out.as<uint16_t>(), nullptr);
                }
                SPECD_CUDA_CHECK(cudaDeviceSynchronize());
                const std::vector<uint16_t> want = from_device<uint16_t>(d_ref, static_cast<size_t>(m * ffn));
                const std::vector<uint16_t> got = from_device<uint16_t>(d_out, want.size());
                for (size_t i = 0; i < got.size(); ++i) {
                    expect(got[i] == want[i], "gemv_" + std::string(act_name) + " " + half_type_name(t) + " k " + std::to_string(k) + " ffn " + std::to_string(ffn) + ", " +
                                                  std::to_string(m) + " rows: element " + std::to_string(i) + " differs from gemv + " + act_name);
                }
            }
            log << "  gemv_" << act_name << " " << half_type_name(t) << " (k " << k << ", ffn " << ffn << "): rows 1, 2, 5, 9, 16 bit-equal to gemv then " << act_name << "\n";
        }
        }
        // What the kernel does not take goes to cuBLAS; launch_gemv itself refuses it.
        DeviceBuffer d_a(32 * 304 * sizeof(uint16_t)), d_w(304 * 304 * sizeof(uint16_t)), d_c(32 * 304 * sizeof(float));
        expect(!gemv_fits(d_a.as<uint16_t>(), d_w.as<uint16_t>(), kGemvMaxRows + 1, 304), "gemv takes 17 rows");
        expect(!gemv_fits(d_a.as<uint16_t>(), d_w.as<uint16_t>(), 1, 296), "gemv takes k = 296 (not a multiple of 32)");
        expect(!gemv_fits(d_a.as<uint16_t>() + 1, d_w.as<uint16_t>(), 1, 304), "gemv takes a misaligned activation row");
        bool refused = false;
        try {
            launch_gemv(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, d_c.as<float>(), kGemvMaxRows + 1, 304, 304, 0.0f, nullptr);
        } catch (const Error&) {
            refused = true;
        }
        expect(refused, "launch_gemv ran 17 rows");
    });
}

void check_qkv_rope(const Context&, std::ostream& log) {
    // launch_gemv_qkv_rope against its two halves: launch_gemv, then
    // launch_rope_store_kv, on PagedSetup's 7 rows (a verification, a decode,
    // a long context), full and partial RoPE (rope_half 8 and 6 of 8 pairs).
    for_each_half_type([&](HalfType t) {
        for (const int32_t rope_half : {8, 6}) {
            PagedSetup ps;
            ps.g.heads.rope_half = rope_half;
            const Geometry& g = ps.g;
            LlamaHparams hp;
            hp.head_dim = g.heads.head_dim;
            hp.rope_dim = 2 * rope_half;
            hp.rope_freq_base = 10000.0f;
            std::vector<float> cos_t, sin_t;
            rope_tables(hp, g.n_ctx, cos_t, sin_t);
            const int32_t m = ps.layout.n_rows, k = 288;
            const std::vector<uint16_t> a = to_half(random_floats(static_cast<size_t>(m * k), 21), t);
            const std::vector<uint16_t> w = to_half(random_floats(static_cast<size_t>(g.qkv_ld() * k), 22, -0.2f, 0.2f), t);
            const size_t pool_elems = static_cast<size_t>(ps.kv.shape().n_blocks) * g.n_layers * g.block_size * g.kv_dim();
            const std::vector<uint16_t> pool0 = to_half(random_floats(pool_elems, 23), t);  // what the rows do not overwrite must stay
            DeviceBuffer d_a = to_device(a), d_w = to_device(w), d_cos = to_device(cos_t), d_sin = to_device(sin_t),
                         d_packed = to_device(ps.layout.packed);
            DeviceBuffer d_qkv_u(static_cast<size_t>(m * g.qkv_ld()) * sizeof(float)), d_qkv_f(d_qkv_u.bytes());
            DeviceBuffer d_k_u = to_device(pool0), d_v_u = to_device(pool0), d_k_f = to_device(pool0), d_v_f = to_device(pool0);
            const KvPoolView pool_u{d_k_u.as<uint16_t>(), d_v_u.as<uint16_t>(), t, g.n_layers, g.block_size, g.kv_dim()};
            const KvPoolView pool_f{d_k_f.as<uint16_t>(), d_v_f.as<uint16_t>(), t, g.n_layers, g.block_size, g.kv_dim()};
            launch_gemv(d_a.as<uint16_t>(), d_w.as<uint16_t>(), t, d_qkv_u.as<float>(), m, g.qkv_ld(), k, 0.0f, nullptr);
            launch_rope_store_kv(d_qkv_u.as<float>(), g.qkv_ld(), ps.rows(d_packed), g.heads, d_cos.as<float>(), d_sin.as<float>(),
                                 pool_u, g.layer, nullptr);
            launch_gemv_qkv_rope(d_a.as<uint16_t>(), d_w.as<uint16_t>(), d_qkv_f.as<float>(), g.qkv_ld(), k, ps.rows(d_packed), g.heads,
                                 d_cos.as<float>(), d_sin.as<float>(), pool_f, g.layer, nullptr);
            SPECD_CUDA_CHECK(cudaDeviceSynchronize());
            const std::string what = std::string(half_type_name(t)) + ", rope_half " + std::to_string(rope_half);
            const std::vector<float> qkv_u = from_device<float>(d_qkv_u, static_cast<size_t>(m * g.qkv_ld()));
            const std::vector<float> qkv_f = from_device<float>(d_qkv_f, qkv_u.size());
            expect_close(qkv_f, qkv_u, 1e-6f, 1e-6f, "qkv_rope q|k|v (f32) " + what, log);
            size_t differing = 0;
            for (size_t i = 0; i < qkv_u.size(); ++i) differing += qkv_u[i] != qkv_f[i];
            for (const auto& [u, f, name] : {std::tuple{&d_k_u, &d_k_f, "k"}, std::tuple{&d_v_u, &d_v_f, "v"}}) {
                const std::vector<uint16_t> got = from_device<uint16_t>(*f, pool_elems), want = from_device<uint16_t>(*u, pool_elems);
                size_t changed = 0;
                for (size_t i = 0; i < pool_elems; ++i) {
                    changed += want[i] != pool0[i];
                    if (got[i] == want[i]) continue;
                    // A 1-ulp f32 difference can round the 16-bit value the other way; anything more is a bug.
                    const float gv = half_to_float(got[i], t), wv = half_to_float(want[i], t);
                    expect(std::fabs(gv - wv) <= half_tolerance(t) * std::fabs(wv) + 1e-6f,
                           "qkv_rope " + what + ": pool " + name + " element " + std::to_string(i) + " is " + std::to_string(gv) +
                               ", the unfused kernels store " + std::to_string(wv));
                    ++differing;
                }
                expect(changed > 0, "qkv_rope " + what + ": the unfused kernels stored nothing into pool " + name);
            }
            log << "  qkv_rope " << what << ": " << m << " rows, " << differing << " values not bit-equal to gemv + rope_store_kv\n";
        }
    });
    // NEOX pairs (i, i + rope_half) fall into different 16-row blocks: the fused kernel refuses them.
    PagedSetup ps;
    ps.g.heads.neox = true;
    const Geometry& g = ps.g;
    DeviceBuffer d_a(static_cast<size_t>(ps.layout.n_rows * 288) * sizeof(uint16_t)),
        d_w(static_cast<size_t>(g.qkv_ld() * 288) * sizeof(uint16_t)), d_qkv(static_cast<size_t>(ps.layout.n_rows * g.qkv_ld()) * sizeof(float)),
        d_packed = to_device(ps.layout.packed), d_table(static_cast<size_t>(g.n_ctx * g.heads.rope_half) * sizeof(float));
    const KvPoolView pool{nullptr, nullptr, HalfType::F16, g.n_layers, g.block_size, g.kv_dim()};
    bool refused = false;
    try {
        launch_gemv_qkv_rope(d_a.as<uint16_t>(), d_w.as<uint16_t>(), d_qkv.as<float>(), g.qkv_ld(), 288, ps.rows(d_packed), g.heads,
                             d_table.as<float>(), d_table.as<float>(), pool, g.layer, nullptr);
    } catch (const Error&) {
        refused = true;
    }
    expect(refused, "gemv_qkv_rope ran NEOX pairs");
}

void check_sampling(const Context&, std::ostream& log) {
    const int32_t rows = 3, vocab = 1000, k = 5;
    std::vector<float> logits = random_floats(static_cast<size_t>(rows * vocab), 9, -5.0f, 5.0f);
    logits[static_cast<size_t>(vocab + 10)] = 9.0f;   // row 1: a tie at ids 10 and 500; the lower id wins
    logits[static_cast<size_t>(vocab + 500)] = 9.0f;
    for (int32_t i = 0; i < vocab; i += 3) logits[static_cast<size_t>(2 * vocab + i)] = -INFINITY;  // row 2: masked entries
    DeviceBuffer d_logits = to_device(logits), d_argmax(rows * sizeof(int32_t));
    launch_argmax_rows(d_logits.as<float>(), rows, vocab, d_argmax.as<int32_t>(), nullptr);
    const float temperature = 0.7f;
    launch_softmax_rows(d_logits.as<float>(), rows, vocab, temperature, nullptr);
    DeviceBuffer d_ids(static_cast<size_t>(rows * k) * sizeof(int32_t)), d_vals(static_cast<size_t>(rows * k) * sizeof(float));
    launch_top_k_rows(d_logits.as<float>(), rows, vocab, k, d_ids.as<int32_t>(), d_vals.as<float>(), nullptr);
    SPECD_CUDA_CHECK(cudaDeviceSynchronize());

    const std::vector<int32_t> got_argmax = from_device<int32_t>(d_argmax, rows);
    std::vector<float> want_probs;
    std::vector<int32_t> want_ids;
    std::vector<float> want_vals;
    for (int32_t r = 0; r < rows; ++r) {
        const float* row = &logits[static_cast<size_t>(r * vocab)];
        const int32_t best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // first maximum
        expect(got_argmax[static_cast<size_t>(r)] == best,
               "argmax row " + std::to_string(r) + ": " + std::to_string(got_argmax[static_cast<size_t>(r)]) + ", expected " +
                   std::to_string(best));
        double max_v = -1e300, sum = 0.0;
        for (int32_t i = 0; i < vocab; ++i) max_v = std::max(max_v, static_cast<double>(row[i]) / temperature);
        std::vector<float> p(static_cast<size_t>(vocab));
        for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) / temperature - max_v);
        for (int32_t i = 0; i < vocab; ++i) {
            p[static_cast<size_t>(i)] = static_cast<float>(std::exp(static_cast<double>(row[i]) / temperature - max_v) / sum);
        }
        want_probs.insert(want_probs.end(), p.begin(), p.end());
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return p[static_cast<size_t>(x)] > p[static_cast<size_t>(y)]; });
        for (int32_t j = 0; j < k; ++j) {
            want_ids.push_back(order[static_cast<size_t>(j)]);
            want_vals.push_back(p[static_cast<size_t>(order[static_cast<size_t>(j)])]);
        }
    }
    log << "  argmax: " << rows << " rows (a tie, masked entries) agree\n";
    {
        // Gemma's final logit soft-capping, in place: cap * tanh(x / cap).
        const float cap = 30.0f;
        const std::vector<float> x = random_floats(1000, 10, -200.0f, 200.0f);
        DeviceBuffer d_x = to_device(x);
        launch_softcap(d_x.as<float>(), x.size(), cap, nullptr);
        SPECD_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> want;
        for (float v : x) want.push_back(static_cast<float>(cap * std::tanh(static_cast<double>(v) / cap)));
        expect_close(from_device<float>(d_x, want.size()), want, 1e-6f, 1e-5f, "softcap (cap 30)", log);
    }
    expect_close(from_device<float>(d_logits, want_probs.size()), want_probs, 1e-4f, 1e-7f, "softmax (temperature 0.7)", log);
    expect(from_device<int32_t>(d_ids, want_ids.size()) == want_ids, "top-k ids differ from the CPU order");
    expect_close(from_device<float>(d_vals, want_vals.size()), want_vals, 1e-4f, 1e-7f, "top-k values", log);
}

// ------------------------------------------------------- forward pass ---

std::unique_ptr<LlamaModel> load_model(const Context& ctx, const std::string& file) {
    const std::string path = ctx.models_dir + "/" + file;
    try {
        return LlamaModel::load(path);
    } catch (const std::exception& e) {
        throw CheckFailed("cannot load " + path + " (run tools/fetch-model.sh): " + e.what());
    }
}

// Worst |gpu - cpu| over the rows, and argmax agreement up to near-ties.
void compare_logits(std::span<const float> gpu, std::span<const float> cpu, int32_t vocab, float max_abs, const std::string& what,
                    std::ostream& log) {
    expect(gpu.size() == cpu.size(), what + ": logit counts differ");
    const size_t rows = cpu.size() / static_cast<size_t>(vocab);
    float worst = 0.0f, scale = 0.0f;
    int32_t argmax_same = 0;
    for (size_t r = 0; r < rows; ++r) {
        const float* g = gpu.data() + r * static_cast<size_t>(vocab);
        const float* c = cpu.data() + r * static_cast<size_t>(vocab);
        for (int32_t i = 0; i < vocab; ++i) {
            worst = std::max(worst, std::fabs(g[i] - c[i]));
            scale = std::max(scale, std::fabs(c[i]));
        }
        const int32_t ga = static_cast<int32_t>(std::max_element(g, g + vocab) - g);
        const int32_t ca = static_cast<int32_t>(std::max_element(c, c + vocab) - c);
        if (ga == ca) {
            ++argmax_same;
        } else {
            // Only a near-tie on the CPU may flip: the GPU's pick must be within the error bound of the best.
            expect(c[ga] >= c[ca] - 2.0f * max_abs, what + ": row " + std::to_string(r) + " argmax " + std::to_string(ga) +
                                                         " vs CPU " + std::to_string(ca) + " (not a near-tie)");
        }
    }
    log << "  " << what << ": " << rows << " rows, max |gpu - cpu| " << worst << " (logits up to " << scale << "), argmax equal in "
        << argmax_same << "/" << rows << "\n";
    expect(worst <= max_abs, what + ": max logit error " + std::to_string(worst) + " above " + std::to_string(max_abs));
}

void check_forward_logits(const Context& ctx, std::ostream& log) {
    struct Case {
        const char* file;
        HalfType type;
        float max_abs;  // fp16 weights and activations vs the CPU's f32 (q8_0: the CPU also quantises activations to 8 bits)
    };
    for (const Case& c : {Case{"stories15M-f32.gguf", HalfType::F16, 0.15f}, Case{"stories15M-f32.gguf", HalfType::BF16, 0.6f},
                          Case{"stories15M-q8_0.gguf", HalfType::F16, 0.6f}}) {
        auto model = load_model(ctx, c.file);
        const std::vector<int32_t> prompt = model->tokenizer().encode("Once upon a time, there was a little girl named", true);
        ThreadPool pool(2);
        ForwardPass cpu(*model, pool);
        PagedKvCache cpu_kv(cpu.kv_shape(256, 2));
        CudaForward gpu(DeviceModel::upload(*model, 0, c.type), model.get());
        auto gpu_kv = gpu.make_kv_cache(gpu.kv_shape(256, 2));
        const std::string tag = std::string(c.file) + " as " + half_type_name(c.type);
        const int32_t vocab = model->hparams().n_vocab;

        // The whole prompt in one call, every row's logits (a verification / prefill).
        const int32_t s_cpu = cpu_kv.create_sequence(), s_gpu = gpu_kv->create_sequence();
        const BatchItem cpu_item{s_cpu, prompt, true}, gpu_item{s_gpu, prompt, true};
        const std::span<const float> cpu_span = cpu.forward(cpu_kv, std::span(&cpu_item, 1));
        const std::vector<float> cpu_rows(cpu_span.begin(), cpu_span.end());  // copied: the next call reuses the buffer
        const std::span<const float> gpu_rows = gpu.forward(*gpu_kv, std::span(&gpu_item, 1));
        compare_logits(gpu_rows, cpu_rows, vocab, c.max_abs, tag + ", prompt rows", log);

        // Chunked prefill (two calls) then decode steps, two sequences in one batch.
        const int32_t s2_cpu = cpu_kv.create_sequence(), s2_gpu = gpu_kv->create_sequence();
        const std::span<const int32_t> head(prompt.data(), 4), tail(prompt.data() + 4, prompt.size() - 4);
        for (std::span<const int32_t> chunk : {head, tail}) {
            const BatchItem ci{s2_cpu, chunk, false}, gi{s2_gpu, chunk, false};
            const std::span<const float> lc = cpu.forward(cpu_kv, std::span(&ci, 1));
            const std::vector<float> cpu_last(lc.begin(), lc.end());
            compare_logits(gpu.forward(*gpu_kv, std::span(&gi, 1)), cpu_last, vocab, c.max_abs, tag + ", chunk", log);
        }
        const std::vector<int32_t> next1 = {450}, next2 = {278};
        const BatchItem cb[2] = {{s_cpu, next1, false}, {s2_cpu, next2, false}};
        const BatchItem gb[2] = {{s_gpu, next1, false}, {s2_gpu, next2, false}};
        const std::span<const float> lc = cpu.forward(cpu_kv, cb);
        const std::vector<float> cpu_dec(lc.begin(), lc.end());
        compare_logits(gpu.forward(*gpu_kv, gb), cpu_dec, vocab, c.max_abs, tag + ", batched decode of 2 sequences", log);
        expect(gpu_kv->length(s_gpu) == cpu_kv.length(s_cpu) && gpu_kv->length(s2_gpu) == cpu_kv.length(s2_cpu),
               "sequence lengths differ after the same calls");
    }
}

void check_greedy_speculative(const Context& ctx, std::ostream& log) {
    auto target = load_model(ctx, "stories15M-f32.gguf");
    auto draft = load_model(ctx, "stories15M-q8_0.gguf");
    auto target_weights = DeviceModel::upload(*target, 0);
    const std::vector<int32_t> prompt = target->tokenizer().encode("Once upon a time", true);
    GenerationParams gp;
    gp.max_tokens = 96;
    gp.sampling.temperature = 0.0f;

    CudaForward plain_fwd(target_weights, target.get());
    auto plain_kv = plain_fwd.make_kv_cache(plain_fwd.kv_shape(256, 1));
    PlainDecoder plain(plain_fwd, *plain_kv);
    const GenerationResult ref = plain.generate(prompt, gp);

    CudaForward spec_fwd(target_weights, target.get());
    auto spec_kv = spec_fwd.make_kv_cache(spec_fwd.kv_shape(256, 1));
    DraftModelProposer proposer(*target, std::make_unique<CudaForward>(DeviceModel::upload(*draft, 0), draft.get()), 256);
    SpeculativeDecoder spec(spec_fwd, *spec_kv, &proposer);
    SpeculativeParams sp;
    sp.draft_max = 8;
    sp.adaptive = false;
    const SpeculativeResult got = spec.generate(prompt, gp, sp);

    // The same greedy tokens through the device argmax, one token per step.
    CudaForward argmax_fwd(target_weights, target.get());
    auto argmax_kv = argmax_fwd.make_kv_cache(argmax_fwd.kv_shape(256, 1));
    const int32_t seq = argmax_kv->create_sequence();
    std::vector<int32_t> device_greedy, next;
    BatchItem item{seq, prompt, false};
    argmax_fwd.forward_argmax(*argmax_kv, std::span(&item, 1), next);
    while (device_greedy.size() < ref.tokens.size()) {
        device_greedy.push_back(next.at(0));
        item = BatchItem{seq, std::span(&device_greedy.back(), 1), false};
        argmax_fwd.forward_argmax(*argmax_kv, std::span(&item, 1), next);
    }

    log << "  plain:       " << target->tokenizer().decode(ref.tokens) << "\n";
    log << "  speculative: " << got.tokens.size() << " tokens, " << got.stats.n_accepted << " of " << got.stats.n_drafted
        << " drafted accepted\n";
    expect(got.tokens == ref.tokens, "speculative greedy output differs from plain greedy output on the GPU");
    expect(got.stats.n_drafted > 0 && got.stats.n_accepted > 0, "speculation did not draft or accept anything");
    expect(device_greedy == ref.tokens, "greedy through the device argmax differs from greedy over the host logits");
}

void check_verifier_greedy(const Context& ctx, std::ostream& log) {
    auto target = load_model(ctx, "stories15M-f32.gguf");
    auto weights = DeviceModel::upload(*target, 0);
    CudaForward greedy_fwd(weights, target.get());
    CudaForward full_fwd(weights, target.get());
    test::FullLogitsOnly full(full_fwd);  // the full-logits reference on the same device
    auto greedy_kv = greedy_fwd.make_kv_cache(greedy_fwd.kv_shape(256, 2));
    auto full_kv = full.make_kv_cache(full.kv_shape(256, 2));

    // A span shorter than the batch's rows is refused before anything runs.
    {
        const int32_t seq = greedy_kv->create_sequence();
        const std::vector<int32_t> toks = {1, 2, 3};
        const BatchItem item{seq, toks, true};
        std::vector<int32_t> two(2);
        bool threw = false;
        try {
            greedy_fwd.forward_greedy(*greedy_kv, std::span(&item, 1), two);
        } catch (const Error&) {
            threw = true;
        }
        expect(threw && greedy_kv->length(seq) == 0, "forward_greedy ran with a span shorter than the batch");
        greedy_kv->free_sequence(seq);
    }

    BatchVerifier dev(greedy_fwd, *greedy_kv);
    BatchVerifier ref(full, *full_kv);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    const std::vector<std::string> prompts = {"Once upon a time", "The little dog"};
    std::vector<int32_t> pending(2);
    int32_t accepted = 0;
    // Prefill both, then 24 rounds in which each request drafts its own
    // pending token repeated 3 times (some accepted, most rejected): both
    // verifiers see the same jobs and must give the same outcomes.
    for (int round = -1; round < 24; ++round) {
        for (size_t i = 0; i < 2; ++i) {
            VerifyJob j;
            j.request = i + 1;
            j.sampling = greedy;
            if (round < 0) {
                j.prefill = true;
                j.tokens = target->tokenizer().encode(prompts[i], true);
            } else {
                j.tokens = {pending[i], pending[i], pending[i], pending[i]};
                j.n_draft = 3;
            }
            dev.submit(j);
            ref.submit(std::move(j));
        }
        std::vector<VerifyOutcome> a, b;
        while (dev.has_work()) dev.step(a);
        while (ref.has_work()) ref.step(b);
        expect(a.size() == 2 && b.size() == 2, "a step lost an outcome");
        for (size_t i = 0; i < 2; ++i) {
            expect(a[i].ok && b[i].ok, "a verification failed: " + a[i].error + b[i].error);
            expect(a[i].next == b[i].next && a[i].n_accepted == b[i].n_accepted,
                   "round " + std::to_string(round) + ": argmax-only and full-logits verification differ");
            pending[i] = a[i].next;
            accepted += a[i].n_accepted;
        }
    }
    log << "  " << dev.greedy_steps() << " argmax-only steps, " << accepted << " drafted tokens accepted\n";
    expect(dev.greedy_steps() == 25 && ref.greedy_steps() == 0, "the verifier did not take the argmax-only path on the GPU");
}

void check_stream_overlap(const Context& ctx, std::ostream& log) {
    auto model = load_model(ctx, "stories15M-f32.gguf");
    auto weights = DeviceModel::upload(*model, 0);
    ForwardOptions fo;
    fo.max_batch_tokens = 256;
    fo.max_logit_rows = 256;
    // The verifier's and the draft's backends: each owns its stream.
    CudaForward verify_fwd(weights, model.get(), fo), draft_fwd(weights, model.get(), fo);
    auto verify_kv = verify_fwd.make_kv_cache(verify_fwd.kv_shape(256, 16));
    auto draft_kv = draft_fwd.make_kv_cache(draft_fwd.kv_shape(256, 16));
    Event reference, v_begin, v_end, d_begin, d_end;
    reference.record(verify_fwd.stream());
    SPECD_CUDA_CHECK(cudaStreamWaitEvent(draft_fwd.stream().get(), reference.get(), 0));

    std::atomic<int> ready{0};
    auto work = [&](CudaForward& fwd, PagedKvCache& kv, Event& begin, Event& end) {
        std::vector<int32_t> seqs;
        for (int i = 0; i < 16; ++i) seqs.push_back(kv.create_sequence());
        const std::vector<int32_t> tokens(9, 450);  // k + 1 = 9 tokens per sequence, as a verification
        std::vector<BatchItem> items;
        for (int32_t s : seqs) items.push_back(BatchItem{s, tokens, true});
        ++ready;
        while (ready.load() < 2) std::this_thread::yield();
        begin.record(fwd.stream());
        for (int step = 0; step < 40; ++step) {
            fwd.forward(kv, items);
            for (int32_t s : seqs) kv.truncate(s, 0);
        }
        end.record(fwd.stream());
    };
    std::thread verify_thread(work, std::ref(verify_fwd), std::ref(*verify_kv), std::ref(v_begin), std::ref(v_end));
    std::thread draft_thread(work, std::ref(draft_fwd), std::ref(*draft_kv), std::ref(d_begin), std::ref(d_end));
    verify_thread.join();
    draft_thread.join();
    v_end.synchronize();
    d_end.synchronize();
    const float vb = v_begin.ms_since(reference), ve = v_end.ms_since(reference);
    const float db = d_begin.ms_since(reference), de = d_end.ms_since(reference);
    const float overlap = std::min(ve, de) - std::max(vb, db);
    const float shorter = std::min(ve - vb, de - db);
    log << "  verify stream [" << vb << ", " << ve << "] ms, draft stream [" << db << ", " << de << "] ms, overlap " << overlap
        << " ms (" << (shorter > 0 ? 100.0f * overlap / shorter : 0.0f) << "% of the shorter)\n";
    expect(overlap > 0.5f * shorter, "the two streams' work did not overlap by half of the shorter span");
}

// The same calls through two backends on one set of weights, one replaying
// CUDA graphs and one launching every kernel: the logits must agree (same
// kernels, same GEMMs; only the attention's shared-memory size differs).
void check_cuda_graphs(const Context& ctx, std::ostream& log) {
    auto model = load_model(ctx, "stories15M-f32.gguf");
    auto weights = DeviceModel::upload(*model, 0, HalfType::F16);
    CudaForward eager(weights, model.get()), graphed(weights, model.get());
    eager.set_graphs(false);
    graphed.set_graphs(true);
    GraphPolicy policy;
    policy.position_step = 64;  // stories15M's context is 256: small buckets, so decoding crosses several
    graphed.set_graph_policy(policy);
    auto eager_kv = eager.make_kv_cache(eager.kv_shape(256, 2));
    auto graphed_kv = graphed.make_kv_cache(graphed.kv_shape(256, 2));
    const int32_t vocab = model->hparams().n_vocab;
    float worst = 0.0f;
    int32_t calls = 0;
    // Runs `items` (sequence ids are the same in both caches) through both; returns the graphed logits.
    auto both = [&](std::span<const BatchItem> items, const std::string& what) {
        const std::span<const float> e = eager.forward(*eager_kv, items);
        const std::vector<float> want(e.begin(), e.end());
        const std::span<const float> g = graphed.forward(*graphed_kv, items);
        expect(g.size() == want.size(), what + ": logit counts differ");
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(g[i] - want[i]));
        for (size_t r = 0; r < want.size() / static_cast<size_t>(vocab); ++r) {
            const float* gr = g.data() + r * static_cast<size_t>(vocab);
            const float* er = want.data() + r * static_cast<size_t>(vocab);
            expect(std::max_element(gr, gr + vocab) - gr == std::max_element(er, er + vocab) - er,
                   what + ": argmax differs in row " + std::to_string(r) + " at call " + std::to_string(calls));
        }
        ++calls;
        return std::vector<float>(g.begin(), g.end());
    };
    auto argmax = [&](const std::vector<float>& rows, size_t row) {
        const float* p = rows.data() + row * static_cast<size_t>(vocab);
        return static_cast<int32_t>(std::max_element(p, p + vocab) - p);
    };

    const int32_t a = eager_kv->create_sequence();
    expect(graphed_kv->create_sequence() == a, "the two caches gave different sequence ids");
    const std::vector<int32_t> prompt = model->tokenizer().encode("Once upon a time, there was a little girl named", true);
    BatchItem item{a, prompt, false};
    std::vector<float> logits = both(std::span(&item, 1), "prompt");
    // 180 greedy decode steps: through three position buckets, each captured anew.
    std::vector<int32_t> out;
    for (int32_t step = 0; step < 180; ++step) {
        out.push_back(argmax(logits, 0));
        item = BatchItem{a, std::span(&out.back(), 1), false};
        logits = both(std::span(&item, 1), "decode step " + std::to_string(step));
    }
    // A second sequence, then batched decode of both (a new shape: two items).
    const int32_t b = eager_kv->create_sequence();
    expect(graphed_kv->create_sequence() == b, "the two caches gave different sequence ids");
    const std::vector<int32_t> prompt_b = model->tokenizer().encode("The little dog", true);
    item = BatchItem{b, prompt_b, false};
    const std::vector<float> logits_b = both(std::span(&item, 1), "second prompt");
    int32_t next[2] = {argmax(logits, 0), argmax(logits_b, 0)};
    for (int32_t step = 0; step < 20; ++step) {
        const BatchItem batch[2] = {{a, std::span(&next[0], 1), false}, {b, std::span(&next[1], 1), false}};
        const std::vector<float> rows = both(batch, "batched decode step " + std::to_string(step));
        next[0] = argmax(rows, 0);
        next[1] = argmax(rows, 1);
    }
    // Verification-shaped steps: 9 tokens with every row's logits, rolled back each time.
    const int32_t base = eager_kv->length(a);
    const std::vector<int32_t> nine(out.end() - 9, out.end());
    for (int32_t rep = 0; rep < 4; ++rep) {
        item = BatchItem{a, nine, true};
        both(std::span(&item, 1), "verification " + std::to_string(rep));
        eager_kv->truncate(a, base);
        graphed_kv->truncate(a, base);
    }
    const GraphStats& st = graphed.graph_stats();
    log << "  " << calls << " calls, max |graphed - eager| logit " << worst << "; graphs: " << st.captures << " captured, "
        << st.replays << " replays, " << st.warmups << " warm-up steps, " << st.eager << " eager\n";
    log << "  decoded: " << model->tokenizer().decode(std::vector<int32_t>(out.begin(), out.begin() + 24)) << " ...\n";
    expect(graphed.graphs(), "graphs were turned off: " + graphed.graphs_off_reason());
    // Walked through GraphCache::plan: decode crosses the buckets 64, 128 and 192 (3 captures), batched
    // decode and verification one each; the two prompts are warm-ups only.
    expect(st.captures == 5 && st.replays >= 150 && st.eager == 0, "captures, replays or eager steps not as planned");
    expect(eager.graph_stats().captures == 0 && eager.graph_stats().replays == 0, "the backend with graphs off used graphs");
    expect(worst <= 1e-3f, "graph replay changed the logits by " + std::to_string(worst));

    // Timing of plain decode steps with and without graphs (information; the benchmark has the figures).
    for (CudaForward* fwd : {&eager, &graphed}) {
        PagedKvCache& kv = fwd == &eager ? *eager_kv : *graphed_kv;
        std::vector<int32_t> tok;
        int32_t t = out.back();
        const auto t0 = std::chrono::steady_clock::now();
        for (int32_t step = 0; step < 64; ++step) {
            item = BatchItem{b, std::span(&t, 1), false};
            fwd->forward_argmax(kv, std::span(&item, 1), tok);
            t = tok.at(0);
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 64;
        log << "  decode step with graphs " << (fwd == &eager ? "off" : "on") << ": " << ms << " ms\n";
    }
}

// ------------------------------------------------------ model families ---

// A family model file (tests/support/family_models.h: llama.cpp's layout,
// stories15M's vocabulary) in the temporary directory, removed at the end.
struct FamilyFile {
    std::string path;
    FamilyFile(const test::FamilyModelSpec& spec, const gguf::File& vocab, const std::string& tag)
        : path((std::filesystem::temp_directory_path() /
                ("specd-gpu-" + spec.name + "-" + tag + "-" + std::to_string(::getpid()) + ".gguf"))
                   .string()) {
        test::write_family_model(path, spec, vocab);
    }
    FamilyFile(const FamilyFile&) = delete;
    FamilyFile& operator=(const FamilyFile&) = delete;
    ~FamilyFile() {
        std::error_code ec;
        std::filesystem::remove(path, ec);
    }
};

// stories15M's GGUF, whose tokenizer.* keys (a real SentencePiece
// vocabulary) the family models copy.
gguf::File open_vocabulary(const std::string& path) {
    try {
        return gguf::File::open(path);
    } catch (const std::exception& e) {
        throw CheckFailed("cannot open the vocabulary " + path + " (run tools/fetch-model.sh): " + e.what());
    }
}

// The preset of each family (Llama 3, Qwen2, Qwen3, Gemma 3, Phi-3) on the
// GPU against the CPU forward pass of the same file: every prompt row's
// logits (a prefill of 22 rows: cuBLAS), a chunked prefill (4, 9 and 9 rows:
// the small-batch kernels), then 32 greedy steps of two sequences batched
// (CUDA graphs once the shape repeats), both backends fed the CPU's picks:
// the logits within tolerance every step. Then 32 tokens greedy on the GPU
// alone through the device argmax, its picks fed back: the CPU's greedy
// continuation, token for token (f16 files: the GPU's weights are the
// file's bits). A divergence passes only at a near-tie: where the CPU's
// margin between the two picks is within twice the largest |gpu - cpu| seen
// on that model (16-bit activations may flip it; the log says where).
// Gemma's windowed layers (window 4) are crossed many times over.
void check_family_forward(const Context& ctx, std::ostream& log) {
    const gguf::File vocab = open_vocabulary(ctx.models_dir + "/stories15M-f32.gguf");
    const std::vector<int32_t> prompt = {1,    9038, 2501, 263,  931,  29892, 727, 471,  263, 2217, 7826,
                                         4257, 365,  2354, 3897, 1171, 29889, 450, 6575, 1033, 1919, 322};
    constexpr int32_t kSteps = 32;
    struct Case {
        TensorType file_type;
        HalfType type;
        float rel_tolerance;  // of the largest |logit| of the call
        bool greedy_exact;
    };
    // f16 files: the GPU's weights are the file's; f32 files as bf16: rounded weights, a looser bound.
    // (stories15M measured 0.1% (f16) and 1% (bf16) of its largest logit.)
    const Case cases[] = {{TensorType::F16, HalfType::F16, 0.01f, true}, {TensorType::F32, HalfType::BF16, 0.05f, false}};
    for (const std::string& family : test::family_preset_names()) {
        for (const Case& c : cases) {
            test::FamilyModelSpec spec = test::family_preset(family);
            spec.matrix_type = c.file_type;
            const FamilyFile file(spec, vocab, tensor_type_name(c.file_type));
            std::unique_ptr<LlamaModel> model = LlamaModel::load(file.path);
            const std::string tag = family + " (" + std::string(model->family().arch) + ", " + tensor_type_name(c.file_type) +
                                    " file as " + half_type_name(c.type) + ")";
            expect(cuda_unsupported_features(*model).empty(), tag + ": refused: " + cuda_unsupported_features(*model));
            const int32_t vocab_size = model->hparams().n_vocab;
            ThreadPool pool(2);
            ForwardPass cpu(*model, pool);
            PagedKvCache cpu_kv(cpu.kv_shape(128, 3));
            auto weights = DeviceModel::upload(*model, 0, c.type);
            CudaForward gpu(weights, model.get());
            auto gpu_kv = gpu.make_kv_cache(gpu.kv_shape(128, 3));
            float worst_ratio = 0.0f, worst_abs = 0.0f;
            int32_t compared = 0, flips = 0, rows_compared = 0;
            // Both backends on the same items (the same sequence ids in both caches); returns the CPU's logits.
            auto both = [&](std::span<const BatchItem> items, const std::string& what) {
                const std::span<const float> lc = cpu.forward(cpu_kv, items);
                std::vector<float> cpu_rows(lc.begin(), lc.end());  // copied: the next call reuses the buffer
                const std::span<const float> gpu_rows = gpu.forward(*gpu_kv, items);
                float scale = 0.0f, worst = 0.0f;
                for (size_t i = 0; i < cpu_rows.size(); ++i) {
                    scale = std::max(scale, std::fabs(cpu_rows[i]));
                    if (i < gpu_rows.size()) worst = std::max(worst, std::fabs(gpu_rows[i] - cpu_rows[i]));
                }
                std::ostringstream quiet;  // compare_logits logs each call; this check logs a summary
                compare_logits(gpu_rows, cpu_rows, vocab_size, c.rel_tolerance * scale, tag + ", " + what, quiet);
                worst_ratio = std::max(worst_ratio, scale > 0.0f ? worst / scale : 0.0f);
                worst_abs = std::max(worst_abs, worst);
                expect(scale > 4.0f, tag + ", " + what + ": logits up to " + std::to_string(scale) + " only: the model is not peaked");
                const size_t rows = cpu_rows.size() / static_cast<size_t>(vocab_size);
                for (size_t r = 0; r < rows; ++r) {  // argmax flips (near-ties: compare_logits refuses any other)
                    const float* g = gpu_rows.data() + r * static_cast<size_t>(vocab_size);
                    const float* p = cpu_rows.data() + r * static_cast<size_t>(vocab_size);
                    flips += std::max_element(g, g + vocab_size) - g != std::max_element(p, p + vocab_size) - p;
                    ++rows_compared;
                }
                ++compared;
                return cpu_rows;
            };
            auto argmax = [&](const std::vector<float>& rows, size_t row) {
                const float* p = rows.data() + row * static_cast<size_t>(vocab_size);
                return static_cast<int32_t>(std::max_element(p, p + vocab_size) - p);
            };

            // Sequence a: the whole prompt in one call, every row's logits.
            const int32_t a = cpu_kv.create_sequence();
            expect(gpu_kv->create_sequence() == a, "the two caches gave different sequence ids");
            BatchItem item{a, prompt, true};
            const std::vector<float> prompt_rows = both(std::span(&item, 1), "prompt rows");
            // Sequence b: the prompt in chunks of 4, 9 and 9 rows (verification-sized, every row's logits).
            const int32_t b = cpu_kv.create_sequence();
            expect(gpu_kv->create_sequence() == b, "the two caches gave different sequence ids");
            std::vector<float> b_rows;
            for (const auto& [first, n] : {std::pair<size_t, size_t>{0, 4}, {4, 9}, {13, 9}}) {
                item = BatchItem{b, std::span(prompt.data() + first, n), true};
                b_rows = both(std::span(&item, 1), "chunk at " + std::to_string(first));
            }
            // Greedy decoding of both, batched; the CPU's picks feed both backends.
            std::vector<int32_t> cpu_greedy;  // sequence a's continuation
            std::vector<std::vector<float>> cpu_pick_rows;  // (kSteps) the CPU logits row each of cpu_greedy was picked from
            cpu_pick_rows.emplace_back(prompt_rows.end() - vocab_size, prompt_rows.end());
            int32_t next[2] = {argmax(prompt_rows, prompt.size() - 1), argmax(b_rows, 8)};
            for (int32_t step = 0; step < kSteps; ++step) {
                cpu_greedy.push_back(next[0]);
                const BatchItem batch[2] = {{a, std::span(&next[0], 1), false}, {b, std::span(&next[1], 1), false}};
                const std::vector<float> rows = both(batch, "decode step " + std::to_string(step));
                next[0] = argmax(rows, 0);
                next[1] = argmax(rows, 1);
                if (step + 1 < kSteps) cpu_pick_rows.emplace_back(rows.begin(), rows.begin() + vocab_size);
            }
            // Sequence c: the GPU alone, greedy through the device argmax, its own picks fed back.
            const int32_t cseq = gpu_kv->create_sequence();
            std::vector<int32_t> gpu_greedy, picked;
            item = BatchItem{cseq, prompt, false};
            gpu.forward_argmax(*gpu_kv, std::span(&item, 1), picked);
            while (gpu_greedy.size() < cpu_greedy.size()) {
                gpu_greedy.push_back(picked.at(0));
                item = BatchItem{cseq, std::span(&gpu_greedy.back(), 1), false};
                gpu.forward_argmax(*gpu_kv, std::span(&item, 1), picked);
            }
            size_t same = 0;
            while (same < cpu_greedy.size() && gpu_greedy[same] == cpu_greedy[same]) ++same;
            const GraphStats& st = gpu.graph_stats();
            log << "  " << tag << ": " << compared << " calls, max |gpu - cpu| " << worst_abs << " = " << worst_ratio
                << " of the largest logit, argmax equal in " << rows_compared - flips << "/" << rows_compared
                << " rows; greedy on the device equals the CPU's for " << same << "/" << cpu_greedy.size()
                << " tokens; graphs " << st.captures << " captured, " << st.replays << " replayed\n";
            if (same < cpu_greedy.size() && c.greedy_exact) {
                const std::vector<float>& row = cpu_pick_rows[same];
                const float margin = row[static_cast<size_t>(cpu_greedy[same])] - row[static_cast<size_t>(gpu_greedy[same])];
                log << "    diverged at token " << same << ": the CPU's margin between its pick and the GPU's is " << margin
                    << " (near-tie bound " << 2.0f * worst_abs << ")\n";
                expect(margin <= 2.0f * worst_abs, tag + ": the device's greedy continuation leaves the CPU's at token " +
                                                       std::to_string(same) + ", not at a near-tie (margin " + std::to_string(margin) +
                                                       "): " + model->tokenizer().decode(gpu_greedy) + " | " +
                                                       model->tokenizer().decode(cpu_greedy));
            }
            expect(gpu_kv->length(a) == cpu_kv.length(a) && gpu_kv->length(b) == cpu_kv.length(b),
                   tag + ": sequence lengths differ after the same calls");
        }
    }
}

}  // namespace

const std::vector<Check>& all() {
    static const std::vector<Check> checks = {
        {"embed_gather", "embedding gather (f16, bf16, scaled or not) equals the table rows", check_embed_gather},
        {"rms_norm", "RMSNorm to 16-bit and the post-norm residual add match the CPU formula", check_rms_norm},
        {"rope_store_kv", "biases, Q/K norms, RoPE (adjacent, NEOX, partial) and K/V stores into the paged pool match the CPU",
         check_rope_store_kv},
        {"paged_attention", "paged attention (verify T=5, decode, long context, GQA, windows, head size 256) matches a CPU reference",
         check_paged_attention},
        {"swiglu", "SwiGLU and GeGLU to 16-bit match the CPU", check_swiglu},
        {"gemv", "the small-batch GEMV (1..16 rows) matches f64 sums, each row bit-equal to it alone; fused SwiGLU/GeGLU = unfused",
         check_gemv},
        {"qkv_rope", "the q|k|v product with RoPE and the K/V stores fused equals gemv then rope_store_kv", check_qkv_rope},
        {"sampling", "device argmax, softmax, top-k and logit soft-capping match the CPU", check_sampling},
        {"forward_logits", "full forward pass (stories15M f32/q8_0 as f16/bf16) matches the CPU logits", check_forward_logits},
        {"greedy_speculative", "greedy output with speculation on the GPU equals plain GPU greedy output", check_greedy_speculative},
        {"verifier_greedy", "batched greedy verification with only the argmax per row copied back equals the full-logits path",
         check_verifier_greedy},
        {"stream_overlap", "the verifier's and the draft's streams overlap (event timestamps)", check_stream_overlap},
        {"cuda_graphs", "decode and verification steps replayed as CUDA graphs give the eager path's logits", check_cuda_graphs},
        {"family_forward",
         "Llama 3, Qwen2, Qwen3, Gemma 3 and Phi-3 models: GPU logits match the CPU forward; the device's greedy tokens are the "
         "CPU's (f16 files; a flip only at a near-tie)",
         check_family_forward},
    };
    return checks;
}

const Check& find(std::string_view name) {
    for (const Check& c : all()) {
        if (name == c.name) return c;
    }
    throw std::invalid_argument("no GPU check named " + std::string(name));
}

std::string default_models_dir() {
    if (const char* env = std::getenv("SPECD_MODELS_DIR"); env && *env) return env;
#ifdef SPECD_MODELS_DIR_DEFAULT
    return SPECD_MODELS_DIR_DEFAULT;
#else
    return "models";
#endif
}

}  // namespace specd::gpu::checks
