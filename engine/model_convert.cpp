#include "engine/model_convert.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <vector>

#include "engine/error.h"

namespace specd {

namespace {

// --------------------------------------------------------------- llama2.c ---

constexpr size_t kLlama2cHeaderBytes = 7 * sizeof(int32_t);
constexpr uint32_t kLlama2cExportMagic = 0x616b3432;  // "ak42": llama2.c's versioned export formats

// llama.cpp's llama_token_type for SentencePiece vocabularies.
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenUnknown = 2;
constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenByte = 6;

constexpr std::string_view kSentencePieceSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary

struct Llama2cConfig {
    int32_t dim = 0;
    int32_t hidden_dim = 0;
    int32_t n_layers = 0;
    int32_t n_heads = 0;
    int32_t n_kv_heads = 0;
    int32_t vocab_size = 0;  // absolute value; `tied` keeps the sign's meaning
    int32_t seq_len = 0;
    bool tied = true;        // header vocab_size > 0: the classifier is token_embedding
    int64_t head_size() const { return dim / n_heads; }
    int64_t kv_dim() const { return head_size() * n_kv_heads; }
};

std::string config_text(const Llama2cConfig& c) {
    return "dim=" + std::to_string(c.dim) + " hidden_dim=" + std::to_string(c.hidden_dim) +
           " n_layers=" + std::to_string(c.n_layers) + " n_heads=" + std::to_string(c.n_heads) +
           " n_kv_heads=" + std::to_string(c.n_kv_heads) + " vocab_size=" + std::to_string(c.vocab_size) +
           (c.tied ? "" : " (untied)") + " seq_len=" + std::to_string(c.seq_len);
}

// A sum of products of non-negative values that remembers whether it overflowed.
class CheckedCount {
public:
    void add(std::initializer_list<uint64_t> factors) {
        uint64_t product = 1;
        for (uint64_t f : factors) overflow_ |= __builtin_mul_overflow(product, f, &product);
        overflow_ |= __builtin_add_overflow(total_, product, &total_);
    }
    bool overflowed() const { return overflow_; }
    uint64_t total() const { return total_; }

private:
    uint64_t total_ = 0;
    bool overflow_ = false;
};

Llama2cConfig read_llama2c_header(const std::string& path, const gguf::MappedFile& file) {
    if (file.size() < kLlama2cHeaderBytes) {
        throw Error(path + ": too small for a llama2.c header (" + std::to_string(file.size()) + " bytes, need " +
                    std::to_string(kLlama2cHeaderBytes) + ")");
    }
    int32_t h[7];
    std::memcpy(h, file.data(), sizeof h);
    if (static_cast<uint32_t>(h[0]) == kLlama2cExportMagic) {
        throw Error(path + ": llama2.c export version " + std::to_string(h[1]) +
                    " (magic ak42) is not supported; export with the legacy format (version 0)");
    }
    Llama2cConfig c;
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.tied = h[5] > 0;
    c.vocab_size = h[5] == std::numeric_limits<int32_t>::min() ? 0 : (h[5] < 0 ? -h[5] : h[5]);
    c.seq_len = h[6];
    const std::string where = path + ": llama2.c header (" + config_text(c) + ") ";
    if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.seq_len <= 0 ||
        c.vocab_size <= 0) {
        throw Error(where + "has a non-positive field (not a llama2.c model.bin?)");
    }
    if (c.dim % c.n_heads != 0) throw Error(where + "has dim not a multiple of n_heads");
    if (c.n_heads % c.n_kv_heads != 0) throw Error(where + "has n_heads not a multiple of n_kv_heads");
    if (c.head_size() % 2 != 0) throw Error(where + "has an odd head size (RoPE rotates pairs)");
    if (c.vocab_size < 3) throw Error(where + "has a vocabulary too small for <unk>, <s>, </s>");

    const uint64_t dim = static_cast<uint64_t>(c.dim), hidden = static_cast<uint64_t>(c.hidden_dim),
                   layers = static_cast<uint64_t>(c.n_layers), kv = static_cast<uint64_t>(c.kv_dim()),
                   vocab = static_cast<uint64_t>(c.vocab_size), seq = static_cast<uint64_t>(c.seq_len),
                   half_head = static_cast<uint64_t>(c.head_size() / 2);
    CheckedCount floats;
    floats.add({vocab, dim});               // token_embedding
    floats.add({layers, dim});              // rms_att
    floats.add({layers, dim, dim});         // wq
    floats.add({2, layers, kv, dim});       // wk, wv
    floats.add({layers, dim, dim});         // wo
    floats.add({layers, dim});              // rms_ffn
    floats.add({3, layers, hidden, dim});   // w1, w2, w3
    floats.add({dim});                      // rms_final
    floats.add({2, seq, half_head});        // freq_cis_real, freq_cis_imag
    if (!c.tied) floats.add({vocab, dim});  // wcls
    CheckedCount bytes;
    bytes.add({floats.total(), sizeof(float)});
    bytes.add({kLlama2cHeaderBytes});
    if (floats.overflowed() || bytes.overflowed()) throw Error(where + "implies an impossibly large file");
    if (bytes.total() != file.size()) {
        throw Error(where + "implies " + std::to_string(bytes.total()) + " bytes but the file has " +
                    std::to_string(file.size()));
    }
    return c;
}

struct Llama2cVocab {
    std::vector<std::string> tokens;  // (vocab) GGUF pieces, '▁' for spaces
    std::vector<float> scores;        // (vocab)
    std::vector<int32_t> types;       // (vocab) llama_token_type
};

bool is_byte_piece(std::string_view piece) {
    auto hex = [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F') || (ch >= 'a' && ch <= 'f'); };
    return piece.size() == 6 && piece.substr(0, 3) == "<0x" && hex(piece[3]) && hex(piece[4]) && piece[5] == '>';
}

// llama2.c's tokenizer.bin: int32 max_token_length, then per token
// {f32 score, int32 len, len bytes}. Its exporter replaced '▁' by ' ' and
// wrote BOS/EOS as "\n<s>\n" / "\n</s>\n"; this undoes both.
Llama2cVocab read_llama2c_tokenizer(const std::string& path, const gguf::MappedFile& file, int32_t vocab_size) {
    const uint8_t* p = file.data();
    const size_t size = file.size();
    size_t pos = 0;
    auto read_i32 = [&](const char* what, int32_t token) {
        if (size - pos < sizeof(int32_t)) {
            throw Error(path + ": truncated at the " + what + (token >= 0 ? " of token " + std::to_string(token) : "") +
                        " (model.bin has " + std::to_string(vocab_size) + " tokens)");
        }
        int32_t v;
        std::memcpy(&v, p + pos, sizeof v);
        pos += sizeof v;
        return v;
    };
    if (read_i32("max_token_length", -1) <= 0) throw Error(path + ": max_token_length is not positive");

    Llama2cVocab vocab;
    vocab.tokens.reserve(static_cast<size_t>(vocab_size));
    vocab.scores.reserve(static_cast<size_t>(vocab_size));
    vocab.types.reserve(static_cast<size_t>(vocab_size));
    for (int32_t id = 0; id < vocab_size; ++id) {
        const int32_t score_bits = read_i32("score", id);
        float score;
        std::memcpy(&score, &score_bits, sizeof score);
        const int32_t len = read_i32("length", id);
        if (len < 0 || static_cast<size_t>(len) > size - pos) {
            throw Error(path + ": token " + std::to_string(id) + " has length " + std::to_string(len) + " but " +
                        std::to_string(size - pos) + " bytes remain");
        }
        std::string raw(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
        pos += static_cast<size_t>(len);

        std::string piece;
        int32_t type = kTokenNormal;
        if (id == 0) {
            piece = "<unk>";
            type = kTokenUnknown;
        } else if (id == 1) {
            piece = "<s>";
            type = kTokenControl;
        } else if (id == 2) {
            piece = "</s>";
            type = kTokenControl;
        } else if (id >= 3 && id <= 258 && vocab_size >= 259) {
            // The Llama-2 SentencePiece vocabulary keeps its 256 byte-fallback
            // tokens at ids 3..258; llama2.c's export wrote each as the byte's
            // Latin-1 character rather than "<0xXX>", so restore the name.
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", id - 3);
            piece = name;
            type = kTokenByte;
        } else {
            piece.reserve(raw.size());
            for (char ch : raw) {
                if (ch == ' ') {
                    piece += kSentencePieceSpace;
                } else {
                    piece += ch;
                }
            }
            if (is_byte_piece(piece)) type = kTokenByte;
        }
        vocab.tokens.push_back(std::move(piece));
        vocab.scores.push_back(score);
        vocab.types.push_back(type);
    }
    if (pos != size) {
        throw Error(path + ": " + std::to_string(size - pos) + " bytes follow the last of the " +
                    std::to_string(vocab_size) + " tokens that model.bin's vocab_size implies");
    }
    return vocab;
}

// ------------------------------------------------------------------- info ---

std::string float_text(double v, bool single) {
    char buf[64];
    const auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// A metadata string for display: quoted, control bytes escaped (UTF-8 kept),
// long strings cut.
std::string display_string(std::string_view s, size_t max_bytes = 64) {
    std::string out = "'";
    for (size_t k = 0; k < s.size() && k < max_bytes; ++k) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\\' || c == '\'') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > max_bytes) out += "...";
    return out + "'";
}

std::string display_value(const gguf::Value& v) {
    using gguf::ValueType;
    switch (v.type) {
        case ValueType::UINT8:
        case ValueType::UINT16:
        case ValueType::UINT32:
        case ValueType::UINT64: return std::to_string(v.u);
        case ValueType::INT8:
        case ValueType::INT16:
        case ValueType::INT32:
        case ValueType::INT64: return std::to_string(v.i);
        case ValueType::FLOAT32: return float_text(v.f, true);
        case ValueType::FLOAT64: return float_text(v.f, false);
        case ValueType::BOOL: return v.b ? "true" : "false";
        case ValueType::STRING: return display_string(v.s);
        case ValueType::ARRAY: {
            constexpr size_t kShownWhole = 8, kShownPrefix = 3;
            const bool whole = v.array.size() <= kShownWhole;
            std::string out = "[";
            if (!whole) out += std::to_string(v.array.size()) + " " + gguf::value_type_name(v.array_type) + "s: ";
            const size_t shown = whole ? v.array.size() : kShownPrefix;
            for (size_t k = 0; k < shown; ++k) out += (k ? ", " : "") + display_value(v.array[k]);
            if (!whole) out += ", ...";
            return out + "]";
        }
    }
    return "?";
}

std::string shape_text(const std::vector<int64_t>& ne) {
    std::string s;
    for (size_t k = 0; k < ne.size(); ++k) s += (k ? " x " : "") + std::to_string(ne[k]);
    return s;
}

std::string mib_text(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string pad_right(std::string s, size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}

std::string pad_left(std::string s, size_t width) {
    if (s.size() < width) s.insert(0, width - s.size(), ' ');
    return s;
}

}  // namespace

uint32_t llama_file_type(TensorType type) {
    switch (type) {
        case TensorType::F32: return 0;
        case TensorType::F16: return 1;
        case TensorType::Q4_0: return 2;
        case TensorType::Q8_0: return 7;
        case TensorType::Q5_0: return 8;
        case TensorType::Q5_1: return 9;
        case TensorType::Q4_K: return 14;  // llama.cpp's names: Q4_K_S, Q5_K_S, Q6_K
        case TensorType::Q5_K: return 16;
        case TensorType::Q6_K: return 18;
        case TensorType::BF16: return 32;
        default: break;
    }
    throw Error("no llama.cpp file type for tensor type " + std::to_string(static_cast<uint32_t>(type)));
}

void convert_llama2c(const std::string& model_bin, const std::string& tokenizer_bin, const std::string& out_gguf,
                     const std::string& model_name) {
    const gguf::MappedFile model = gguf::MappedFile::open(model_bin);
    const Llama2cConfig c = read_llama2c_header(model_bin, model);
    const gguf::MappedFile tokenizer = gguf::MappedFile::open(tokenizer_bin);
    const Llama2cVocab vocab = read_llama2c_tokenizer(tokenizer_bin, tokenizer, c.vocab_size);

    using gguf::Value;
    gguf::Writer w;
    w.set("general.architecture", Value::str("llama"));
    w.set("general.name", Value::str(model_name));
    w.set("general.alignment", Value::u32(gguf::kDefaultAlignment));
    w.set("general.file_type", Value::u32(llama_file_type(TensorType::F32)));
    w.set("llama.context_length", Value::u32(static_cast<uint32_t>(c.seq_len)));
    w.set("llama.embedding_length", Value::u32(static_cast<uint32_t>(c.dim)));
    w.set("llama.block_count", Value::u32(static_cast<uint32_t>(c.n_layers)));
    w.set("llama.feed_forward_length", Value::u32(static_cast<uint32_t>(c.hidden_dim)));
    w.set("llama.attention.head_count", Value::u32(static_cast<uint32_t>(c.n_heads)));
    w.set("llama.attention.head_count_kv", Value::u32(static_cast<uint32_t>(c.n_kv_heads)));
    w.set("llama.rope.freq_base", Value::f32(10000.0f));
    w.set("llama.rope.dimension_count", Value::u32(static_cast<uint32_t>(c.head_size())));
    w.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
    w.set("llama.vocab_size", Value::u32(static_cast<uint32_t>(c.vocab_size)));
    w.set("tokenizer.ggml.model", Value::str("llama"));
    w.set("tokenizer.ggml.tokens", Value::string_array(vocab.tokens));
    w.set("tokenizer.ggml.scores", Value::f32_array(vocab.scores));
    w.set("tokenizer.ggml.token_type", Value::i32_array(vocab.types));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
    w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
    w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));

    // The weights in file order; the size check above guarantees each slice is in range.
    const uint8_t* cursor = model.data() + kLlama2cHeaderBytes;
    auto take = [&](int64_t n_floats) {
        const uint8_t* slice = cursor;
        cursor += static_cast<size_t>(n_floats) * sizeof(float);
        return slice;
    };
    const int64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), n_vocab = c.vocab_size;
    const int64_t layers = c.n_layers;
    auto bytes = [](int64_t n_floats) { return static_cast<size_t>(n_floats) * sizeof(float); };
    // llama2.c stores each weight as a (layer, rows, cols) stack; GGUF has
    // one tensor {cols, rows} per layer, written layer by layer as llama.cpp does.
    struct Stack {
        const char* name;
        int64_t rows, cols;
        const uint8_t* base;
    };
    const uint8_t* token_embedding = take(n_vocab * dim);
    std::vector<Stack> stacks = {
        {"attn_norm.weight", 1, dim, nullptr},   {"attn_q.weight", dim, dim, nullptr},
        {"attn_k.weight", kv, dim, nullptr},     {"attn_v.weight", kv, dim, nullptr},
        {"attn_output.weight", dim, dim, nullptr}, {"ffn_norm.weight", 1, dim, nullptr},
        {"ffn_gate.weight", hidden, dim, nullptr},  // w1
        {"ffn_down.weight", dim, hidden, nullptr},  // w2
        {"ffn_up.weight", hidden, dim, nullptr},    // w3
    };
    for (Stack& s : stacks) s.base = take(layers * s.rows * s.cols);
    w.add_tensor("token_embd.weight", {dim, n_vocab}, TensorType::F32, token_embedding, bytes(n_vocab * dim));
    for (int64_t l = 0; l < layers; ++l) {
        for (const Stack& s : stacks) {
            std::vector<int64_t> ne = s.rows == 1 ? std::vector<int64_t>{s.cols} : std::vector<int64_t>{s.cols, s.rows};
            w.add_tensor("blk." + std::to_string(l) + "." + s.name, std::move(ne), TensorType::F32,
                         s.base + bytes(l * s.rows * s.cols), bytes(s.rows * s.cols));
        }
    }
    w.add_tensor("output_norm.weight", {dim}, TensorType::F32, take(dim), bytes(dim));
    take(2 * static_cast<int64_t>(c.seq_len) * (c.head_size() / 2));  // freq_cis_real/imag: RoPE is recomputed
    if (!c.tied) w.add_tensor("output.weight", {dim, n_vocab}, TensorType::F32, take(n_vocab * dim), bytes(n_vocab * dim));
    w.write(out_gguf);
}

QuantizeStats quantize_model(const std::string& in_gguf, const std::string& out_gguf, TensorType type) {
    if (!tensor_type_writable(type)) {
        throw Error(std::string("quantize: specd cannot write ") + tensor_type_name(type) +
                    " (it writes f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q4_K, q5_K, q6_K)");
    }
    const gguf::File in = gguf::File::open(in_gguf);
    gguf::Writer w;
    for (const auto& [key, value] : in.metadata()) w.set(key, value);
    w.set("general.file_type", gguf::Value::u32(llama_file_type(type)));
    if (tensor_type_block_elements(type) > 1) w.set("general.quantization_version", gguf::Value::u32(2));  // ggml's GGML_QNT_VERSION

    QuantizeStats stats;
    stats.n_tensors = in.tensors().size();
    std::vector<std::vector<uint8_t>> converted;  // one buffer per re-encoded tensor, alive until write()
    converted.reserve(in.tensors().size());
    std::vector<float> row;  // (ne[0]) one dequantized row
    const int64_t target_block = tensor_type_block_elements(type);
    for (const gguf::TensorInfo& t : in.tensors()) {
        TensorType out_type = t.type;
        if (t.ne.size() == 1) {
            out_type = TensorType::F32;
        } else if (t.ne.size() == 2 && t.ne[0] % target_block == 0) {
            out_type = type;
            ++stats.n_converted;
        }
        if (out_type == t.type) {
            w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
            continue;
        }
        const int64_t cols = t.ne[0];
        const int64_t rows = t.n_elements() / cols;
        const size_t in_row_bytes = tensor_row_bytes(t.type, cols);
        const size_t out_row_bytes = tensor_row_bytes(out_type, cols);
        converted.emplace_back(out_row_bytes * static_cast<size_t>(rows));
        std::vector<uint8_t>& dst = converted.back();  // (rows, out_row_bytes)
        row.resize(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(t.type, t.data + static_cast<size_t>(r) * in_row_bytes, row.data(), cols);
            quantize_row(out_type, row.data(), dst.data() + static_cast<size_t>(r) * out_row_bytes, cols);
        }
        w.add_tensor(t.name, t.ne, out_type, dst.data(), dst.size());
    }
    w.write(out_gguf);
    stats.bytes_in = in.size();
    stats.bytes_out = std::filesystem::file_size(out_gguf);
    return stats;
}

std::string describe_model(const gguf::File& file) {
    std::string out;
    uint64_t tensor_bytes = 0;
    int64_t n_params = 0;
    for (const gguf::TensorInfo& t : file.tensors()) {
        tensor_bytes += t.n_bytes;
        n_params += t.n_elements();
    }
    out += (file.path().empty() ? std::string("(memory)") : file.path()) + ": GGUF v" + std::to_string(file.version()) +
           ", " + mib_text(file.size()) + ", alignment " + std::to_string(file.alignment()) + ", data section at " +
           std::to_string(file.data_offset()) + "\n";

    out += "metadata (" + std::to_string(file.metadata().size()) + " keys):\n";
    size_t key_width = 0;
    for (const auto& [key, value] : file.metadata()) key_width = std::max(key_width, key.size());
    for (const auto& [key, value] : file.metadata()) {
        const std::string type = value.type == gguf::ValueType::ARRAY
                                     ? std::string("array<") + gguf::value_type_name(value.array_type) + ">"
                                     : gguf::value_type_name(value.type);
        out += "  " + pad_right(key, key_width) + "  " + pad_right(type, 14) + " " + display_value(value) + "\n";
    }

    char params[32];
    std::snprintf(params, sizeof params, "%.2fM", static_cast<double>(n_params) / 1e6);
    out += "tensors (" + std::to_string(file.tensors().size()) + ", " + params + " parameters, " +
           mib_text(tensor_bytes) + "):\n";
    size_t name_width = 4, shape_width = 5, bytes_width = 5, offset_width = 6;
    for (const gguf::TensorInfo& t : file.tensors()) {
        name_width = std::max(name_width, t.name.size());
        shape_width = std::max(shape_width, shape_text(t.ne).size());
        bytes_width = std::max(bytes_width, std::to_string(t.n_bytes).size());
        offset_width = std::max(offset_width, std::to_string(t.offset).size());
    }
    out += "  " + pad_right("name", name_width) + "  type  " + pad_right("shape", shape_width) + "  " +
           pad_left("bytes", bytes_width) + "  " + pad_left("offset", offset_width) + "\n";
    for (const gguf::TensorInfo& t : file.tensors()) {
        out += "  " + pad_right(t.name, name_width) + "  " + pad_right(tensor_type_name(t.type), 4) + "  " +
               pad_right(shape_text(t.ne), shape_width) + "  " + pad_left(std::to_string(t.n_bytes), bytes_width) +
               "  " + pad_left(std::to_string(t.offset), offset_width) + "\n";
    }
    return out;
}

}  // namespace specd
