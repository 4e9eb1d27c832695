// llama.cpp's Q4_K_M / Q5_K_M / Q6_K tensor mixes (quant_mix.h).

#include "engine/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

#include "engine/error.h"
#include "engine/quant_k.h"

namespace specd {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp's: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

TensorType fallback(TensorType t, int64_t ncols) {
    if (ncols % tensor_type_block_elements(t) == 0) return t;
    TensorType f = t;
    switch (t) {
        case TensorType::Q4_K: f = TensorType::Q5_0; break;
        case TensorType::Q5_K: f = TensorType::Q5_1; break;
        case TensorType::Q6_K: f = TensorType::Q8_0; break;
        default: break;
    }
    return ncols % tensor_type_block_elements(f) == 0 ? f : TensorType::F16;
}

}  // namespace

std::optional<QuantMix> quant_mix_from_name(std::string_view name) {
    std::string u(name);
    for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (u == "Q4_K_M") return QuantMix::Q4_K_M;
    if (u == "Q5_K_M") return QuantMix::Q5_K_M;
    if (u == "Q6_K") return QuantMix::Q6_K;
    return std::nullopt;
}

const char* quant_mix_name(QuantMix mix) {
    switch (mix) {
        case QuantMix::Q4_K_M: return "Q4_K_M";
        case QuantMix::Q5_K_M: return "Q5_K_M";
        case QuantMix::Q6_K: return "Q6_K";
    }
    return "?";
}

uint32_t quant_mix_file_type(QuantMix mix) {
    switch (mix) {
        case QuantMix::Q4_K_M: return 15;
        case QuantMix::Q5_K_M: return 17;
        case QuantMix::Q6_K: return 18;
    }
    return 0;
}

std::vector<TensorType> quant_mix_types(const gguf::File& file, QuantMix mix) {
    const TensorType base = mix == QuantMix::Q4_K_M ? TensorType::Q4_K : mix == QuantMix::Q5_K_M ? TensorType::Q5_K : TensorType::Q6_K;
    const bool tied = file.find_tensor("output.weight") == nullptr;
    int n_attn_v = 0, n_ffn_down = 0;
    for (const gguf::TensorInfo& t : file.tensors()) {
        n_attn_v += ends_with(t.name, "attn_v.weight");
        n_ffn_down += ends_with(t.name, "ffn_down.weight");
    }
    int i_attn_v = 0, i_ffn_down = 0;  // llama.cpp counts them in file order
    std::vector<TensorType> out;
    for (const gguf::TensorInfo& t : file.tensors()) {
        const bool quantize = t.ne.size() >= 2 && ends_with(t.name, "weight") && !ends_with(t.name, "_norm.weight");
        if (!quantize) {
            out.push_back(t.ne.size() == 1 ? TensorType::F32 : t.type);
            continue;
        }
        TensorType type = base;
        if (t.name == "output.weight" || (tied && t.name == "token_embd.weight")) {
            type = t.ne[0] % kSuperBlock == 0 ? TensorType::Q6_K : TensorType::Q8_0;
        } else if (ends_with(t.name, "attn_v.weight")) {
            if (mix != QuantMix::Q6_K && use_more_bits(i_attn_v, n_attn_v)) type = TensorType::Q6_K;
            ++i_attn_v;
        } else if (ends_with(t.name, "ffn_down.weight")) {
            if (mix != QuantMix::Q6_K && use_more_bits(i_ffn_down, n_ffn_down)) type = TensorType::Q6_K;
            ++i_ffn_down;
        }
        out.push_back(fallback(type, t.ne[0]));
    }
    return out;
}

QuantizeStats quantize_model_mix(const std::string& in_gguf, const std::string& out_gguf, QuantMix mix,
                                 const std::function<void(const QuantizeProgress&)>& progress) {
    const gguf::File in = gguf::File::open(in_gguf);
    const std::vector<TensorType> types = quant_mix_types(in, mix);
    gguf::Writer w;
    for (const auto& [key, value] : in.metadata()) w.set(key, value);
    w.set("general.file_type", gguf::Value::u32(quant_mix_file_type(mix)));
    w.set("general.quantization_version", gguf::Value::u32(2));  // ggml's GGML_QNT_VERSION

    QuantizeStats stats;
    stats.n_tensors = in.tensors().size();
    QuantizeProgress prog;
    prog.n_tensors = stats.n_tensors;
    for (const gguf::TensorInfo& t : in.tensors()) prog.bytes_total += t.n_bytes;
    std::vector<std::unique_ptr<uint8_t[]>> converted;  // one buffer per re-encoded tensor, alive until write()
    std::vector<float> row;                              // (ne[0]) one dequantised row
    for (size_t i = 0; i < in.tensors().size(); ++i) {
        const gguf::TensorInfo& t = in.tensors()[i];
        const TensorType out_type = types[i];
        if (out_type == t.type) {
            w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
        } else {
            if (out_type != TensorType::F32 && out_type != TensorType::F16) ++stats.n_converted;
            const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
            const size_t in_rb = tensor_row_bytes(t.type, cols), out_rb = tensor_row_bytes(out_type, cols);
            converted.emplace_back(new uint8_t[out_rb * static_cast<size_t>(rows)]);
            uint8_t* dst = converted.back().get();  // (rows, out_rb)
            row.resize(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(t.type, t.data + static_cast<size_t>(r) * in_rb, row.data(), cols);
                quantize_row(out_type, row.data(), dst + static_cast<size_t>(r) * out_rb, cols);
            }
            w.add_tensor(t.name, t.ne, out_type, dst, out_rb * static_cast<size_t>(rows));
        }
        ++prog.tensor;
        prog.bytes_done += t.n_bytes;
        if (progress) progress(prog);
    }
    w.write(out_gguf);
    stats.bytes_in = in.size();
    stats.bytes_out = std::filesystem::file_size(out_gguf);
    return stats;
}

}  // namespace specd
