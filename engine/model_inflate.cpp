// Widening a llama GGUF into a benchmark construct with the same logits
// (model_inflate.h explains the construction).

#include "engine/model_inflate.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/tensor_type.h"

namespace specd {

namespace {

// What a tensor is, for widening.
enum class Role {
    Embedding,  // token_embd, output: (vocab, d) -> (vocab, D), new columns zero
    Norm,       // (d) -> (D), scaled by sqrt(d/D)
    InRows,     // attn_q/k/v, ffn_gate/up: old rows widened with zero columns, new rows random
    OutRows,    // attn_output, ffn_down: (d, in) -> (D, in'), only the old block kept, the rest zero
    Copy,       // rope_freqs: per head dimension, unchanged
};

struct Plan {
    std::string name;
    Role role;
    const gguf::TensorInfo* src = nullptr;  // null for the extra layers' tensors
    int64_t in_old = 0, rows_old = 0;       // the source's (ne[0], ne[1]); extra layers: 0
    int64_t in_new = 0, rows_new = 0;       // the output's; 1-D tensors: rows 1
};

// splitmix64: a fast, seedable stream for a billion weights.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [-a, a) with standard deviation 0.02 (a = 0.02 * sqrt(3)).
    float weight() { return (static_cast<float>(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 0.034641f; }
};

uint64_t name_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// A layer tensor's suffix ("attn_q.weight") and layer, if name is "blk.N.suffix".
std::optional<std::pair<int64_t, std::string>> layer_tensor(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return std::nullopt;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4) return std::nullopt;
    int64_t layer = 0;
    for (size_t i = 4; i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9' || layer > 1000000) return std::nullopt;
        layer = layer * 10 + (name[i] - '0');
    }
    return std::make_pair(layer, name.substr(dot + 1));
}

}  // namespace

InflateStats inflate_model(const std::string& in_gguf, const std::string& out_gguf, const InflateOptions& o,
                           const std::function<void(const InflateProgress&)>& progress) {
    const gguf::File in = gguf::File::open(in_gguf);
    const std::string arch = in.get_string("general.architecture");
    if (arch != "llama") throw Error("inflate: " + in_gguf + " is a '" + arch + "' model; inflate widens llama models only");
    const std::string k = "llama.";
    const int64_t d = in.get_u32(k + "embedding_length"), f = in.get_u32(k + "feed_forward_length");
    const int64_t n_layers = in.get_u32(k + "block_count"), n_heads = in.get_u32(k + "attention.head_count");
    const int64_t n_kv = in.get_u32_opt(k + "attention.head_count_kv").value_or(static_cast<uint32_t>(n_heads));
    if (d <= 0 || f <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0) {
        throw Error("inflate: " + in_gguf + " has inconsistent llama dimensions");
    }
    const int64_t hd = in.get_u32_opt(k + "attention.key_length").value_or(static_cast<uint32_t>(d / n_heads));
    const float eps = in.get_f32_opt(k + "attention.layer_norm_rms_epsilon").value_or(1e-5f);
    const int64_t D = o.dim, F = o.ffn, group = n_heads / n_kv;
    if (D < d) throw Error("inflate: --dim " + std::to_string(D) + " is smaller than the model's " + std::to_string(d));
    if (F < f) throw Error("inflate: --ffn " + std::to_string(F) + " is smaller than the model's " + std::to_string(f));
    if (D % hd != 0) {
        throw Error("inflate: --dim " + std::to_string(D) + " is not a multiple of the head size " + std::to_string(hd));
    }
    const int64_t H = D / hd;  // new head count (the head size stays)
    if (H % group != 0) {
        throw Error("inflate: --dim " + std::to_string(D) + " gives " + std::to_string(H) + " heads, not a multiple of the " +
                    std::to_string(group) + " query heads per KV head");
    }
    const int64_t H_kv = H / group;
    if (o.extra_layers < 0 || n_layers + o.extra_layers > 1024) {
        throw Error("inflate: --extra-layers must be 0 or more (at most 1024 layers in all)");
    }
    const int64_t L = n_layers + o.extra_layers;

    // Per-layer shapes, old and new: (in, rows) per suffix.
    struct Shape {
        const char* suffix;
        Role role;
        int64_t in_old, rows_old, in_new, rows_new;
    };
    const Shape layer_shapes[] = {
        {"attn_norm.weight", Role::Norm, d, 1, D, 1},
        {"attn_q.weight", Role::InRows, d, n_heads * hd, D, H * hd},
        {"attn_k.weight", Role::InRows, d, n_kv * hd, D, H_kv * hd},
        {"attn_v.weight", Role::InRows, d, n_kv * hd, D, H_kv * hd},
        {"attn_output.weight", Role::OutRows, n_heads * hd, d, H * hd, D},
        {"ffn_norm.weight", Role::Norm, d, 1, D, 1},
        {"ffn_gate.weight", Role::InRows, d, f, D, F},
        {"ffn_up.weight", Role::InRows, d, f, D, F},
        {"ffn_down.weight", Role::OutRows, f, d, F, D},
    };
    auto check_shape = [&](const gguf::TensorInfo& t, int64_t in_old, int64_t rows_old) {
        const bool one_d = rows_old == 1 && t.ne.size() == 1 && t.ne[0] == in_old;
        const bool two_d = t.ne.size() == 2 && t.ne[0] == in_old && t.ne[1] == rows_old;
        if (!one_d && !two_d) {
            throw Error("inflate: tensor '" + t.name + "' does not have the shape the metadata implies (" + std::to_string(in_old) +
                        (rows_old == 1 ? "" : " x " + std::to_string(rows_old)) + ")");
        }
    };

    std::vector<Plan> plans;
    for (const gguf::TensorInfo& t : in.tensors()) {
        Plan p{t.name, Role::Copy, &t};
        if (const auto lt = layer_tensor(t.name)) {
            const Shape* s = nullptr;
            for (const Shape& c : layer_shapes) {
                if (lt->second == c.suffix) s = &c;
            }
            if (s == nullptr || lt->first >= n_layers) {
                throw Error("inflate: tensor '" + t.name + "' is not one inflate knows how to widen");
            }
            check_shape(t, s->in_old, s->rows_old);
            p.role = s->role;
            p.in_old = s->in_old, p.rows_old = s->rows_old, p.in_new = s->in_new, p.rows_new = s->rows_new;
        } else if (t.name == "token_embd.weight" || t.name == "output.weight") {
            if (t.ne.size() != 2 || t.ne[0] != d) throw Error("inflate: tensor '" + t.name + "' is not (n_vocab, " + std::to_string(d) + ")");
            p.role = Role::Embedding;
            p.in_old = d, p.rows_old = t.ne[1], p.in_new = D, p.rows_new = t.ne[1];
        } else if (t.name == "output_norm.weight") {
            check_shape(t, d, 1);
            p.role = Role::Norm;
            p.in_old = d, p.rows_old = 1, p.in_new = D, p.rows_new = 1;
        } else if (t.name == "rope_freqs.weight") {
            if (t.ne.size() != 1) throw Error("inflate: tensor 'rope_freqs.weight' is not 1-D");
            p.role = Role::Copy;
            p.in_old = p.in_new = t.ne[0], p.rows_old = p.rows_new = 1;
        } else {
            throw Error("inflate: tensor '" + t.name + "' is not one inflate knows how to widen");
        }
        plans.push_back(std::move(p));
    }
    for (int64_t l = n_layers; l < L; ++l) {
        for (const Shape& s : layer_shapes) {
            plans.push_back(Plan{"blk." + std::to_string(l) + "." + s.suffix, s.role, nullptr, 0, 0, s.in_new, s.rows_new});
        }
    }

    InflateProgress prog;
    prog.n_tensors = plans.size();
    for (const Plan& p : plans) prog.bytes_total += static_cast<uint64_t>(p.in_new * p.rows_new) * sizeof(float);

    const float norm_scale = static_cast<float>(std::sqrt(static_cast<double>(d) / static_cast<double>(D)));
    InflateStats stats;
    stats.n_tensors = plans.size();
    gguf::Writer w;
    for (const auto& [key, value] : in.metadata()) w.set(key, value);
    w.set(k + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(D)));
    w.set(k + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(F)));
    w.set(k + "block_count", gguf::Value::u32(static_cast<uint32_t>(L)));
    w.set(k + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(H)));
    w.set(k + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(H_kv)));
    w.set(k + "attention.layer_norm_rms_epsilon",
          gguf::Value::f32(static_cast<float>(static_cast<double>(eps) * static_cast<double>(d) / static_cast<double>(D))));
    if (!in.has(k + "rope.dimension_count")) w.set(k + "rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(hd)));
    w.set("general.file_type", gguf::Value::u32(0));  // all f32
    const std::string source = in.get_string_opt("general.name").value_or("model");
    w.set("general.name", gguf::Value::str(source + " inflated (benchmark construct)"));
    w.set("specd.inflate.note", gguf::Value::str("benchmark construct, not a model: computes the logits of " + source + " (d " +
                                                 std::to_string(d) + ", ffn " + std::to_string(f) + ", " +
                                                 std::to_string(n_layers) + " layers) widened by specd inflate"));

    std::vector<std::unique_ptr<float[]>> buffers;  // one per tensor, alive until write()
    buffers.reserve(plans.size());
    for (const Plan& p : plans) {
        const size_t n = static_cast<size_t>(p.in_new * p.rows_new);
        std::unique_ptr<float[]> buf(new float[n]);  // (rows_new, in_new)
        float* out = buf.get();
        Rng rng{o.seed ^ name_hash(p.name)};
        const size_t in_row_bytes = p.src ? tensor_row_bytes(p.src->type, p.in_old) : 0;
        auto old_row = [&](int64_t r, float* dst) { dequantize_row(p.src->type, p.src->data + static_cast<size_t>(r) * in_row_bytes, dst, p.in_old); };
        switch (p.role) {
            case Role::Copy: old_row(0, out); break;
            case Role::Norm:
                if (p.src) old_row(0, out);
                for (int64_t i = 0; i < p.in_new; ++i) out[i] = (p.src && i < p.in_old ? out[i] : 1.0f) * norm_scale;
                break;
            case Role::Embedding:
            case Role::InRows:
                for (int64_t r = 0; r < p.rows_new; ++r) {
                    float* row = out + r * p.in_new;
                    if (r < p.rows_old) {  // an old row: its weights, zero for the new (always zero) inputs
                        old_row(r, row);
                        std::memset(row + p.in_old, 0, static_cast<size_t>(p.in_new - p.in_old) * sizeof(float));
                    } else {  // a new head or unit, or an extra layer's: random
                        for (int64_t i = 0; i < p.in_new; ++i) row[i] = rng.weight();
                    }
                }
                break;
            case Role::OutRows:
                std::memset(out, 0, n * sizeof(float));
                for (int64_t r = 0; r < p.rows_old; ++r) old_row(r, out + r * p.in_new);
                break;
        }
        if (p.src) stats.params_in += p.src->n_elements();
        stats.params_out += static_cast<int64_t>(n);
        std::vector<int64_t> ne = p.rows_new == 1 && (p.role == Role::Norm || p.role == Role::Copy)
                                      ? std::vector<int64_t>{p.in_new}
                                      : std::vector<int64_t>{p.in_new, p.rows_new};
        w.add_tensor(p.name, std::move(ne), TensorType::F32, buf.get(), n * sizeof(float));
        buffers.push_back(std::move(buf));
        ++prog.tensor;
        prog.bytes_done += n * sizeof(float);
        if (progress) progress(prog);
    }
    w.write(out_gguf);
    stats.bytes_in = in.size();
    stats.bytes_out = std::filesystem::file_size(out_gguf);
    return stats;
}

}  // namespace specd
