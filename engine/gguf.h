// GGUF v3 reader and writer, byte-compatible with llama.cpp's ggml in both
// directions. A File is a validated, read-only view of an mmap'ed file:
// metadata values are parsed into Value trees, tensor data stays in the
// mapping (TensorInfo::data points into it). A Writer collects metadata and
// tensor pointers and writes a file that ggml reads (v3, tensors packed in
// order, each padded to general.alignment, trailing padding included).
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
// n_kv × {string key, u32 type, value}, n_tensors × {string name,
// u32 n_dims, i64 ne[n_dims], u32 ggml type, u64 offset}, zero padding to
// the alignment, then the data section. A string is u64 length + bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tensor_type.h"

namespace specd::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

const char* value_type_name(ValueType type);   // "uint32", "string", "array", ...
bool is_integer_type(ValueType type);          // UINT8..INT64 (not BOOL)

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr int kMaxArrayNesting = 8;           // deeper arrays are rejected on read and write
constexpr size_t kMaxTensorNameBytes = 63;    // ggml's GGML_MAX_NAME - 1; longer names break llama.cpp

// One metadata value. Which field holds it depends on `type`: UINT* → u,
// INT* → i, FLOAT32/FLOAT64 → f, BOOL → b, STRING → s, ARRAY → array (each
// element of type array_type; nested arrays allowed). Other fields stay 0.
struct Value {
    ValueType type = ValueType::UINT8;
    ValueType array_type = ValueType::UINT8;  // meaningful when type == ARRAY
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string s;
    std::vector<Value> array;

    static Value u8(uint8_t v);
    static Value i8(int8_t v);
    static Value u16(uint16_t v);
    static Value i16(int16_t v);
    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value i64(int64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value str(std::string v);
    // An array of elements that all have type `element_type` (throws
    // specd::Error otherwise); arrays of arrays are allowed.
    static Value make_array(ValueType element_type, std::vector<Value> elements);
    static Value string_array(std::vector<std::string> v);
    static Value f32_array(std::vector<float> v);
    static Value i32_array(std::vector<int32_t> v);
    static Value u32_array(std::vector<uint32_t> v);

    // Same type and same contents (floats compared exactly).
    bool operator==(const Value& other) const;
};

struct TensorInfo {
    std::string name;
    std::vector<int64_t> ne;  // ne[0] innermost (row length), 1..4 dims
    TensorType type = TensorType::F32;
    uint64_t offset = 0;          // in the data section, a multiple of the alignment
    const uint8_t* data = nullptr;  // points into the mapping: n_bytes bytes
    size_t n_bytes = 0;
    int64_t n_elements() const;
};

// A read-only memory mapping of a whole file (movable, not copyable).
class MappedFile {
public:
    MappedFile() = default;
    // Errors name the path and strerror; an empty file maps to size 0.
    static MappedFile open(const std::string& path);
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
    size_t size() const { return size_; }

private:
    void* base_ = nullptr;  // nullptr when size_ == 0
    size_t size_ = 0;
};

// A parsed GGUF file; owns its mmap (movable, not copyable). Every count,
// length, offset and size in the file is checked before it is used.
class File {
public:
    // mmap read-only; errors name the path.
    static File open(const std::string& path);
    // No ownership: data must outlive the File (for fuzzing and tests).
    static File parse(const uint8_t* data, size_t size);

    File(File&&) noexcept = default;
    File& operator=(File&&) noexcept = default;
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
    size_t size() const { return size_; }                  // bytes of the whole file

    const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }  // file order
    const Value* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed getters. They throw specd::Error "GGUF key 'K' is missing" or
    // "GGUF key 'K' has type T, expected ..."; the _opt forms return nullopt
    // for a missing key but still throw for a wrong type. Integer getters
    // accept any integer type whose value fits (range-checked); float
    // getters accept FLOAT32 and FLOAT64.
    uint32_t get_u32(std::string_view key) const;
    std::optional<uint32_t> get_u32_opt(std::string_view key) const;
    int32_t get_i32(std::string_view key) const;
    std::optional<int32_t> get_i32_opt(std::string_view key) const;
    uint64_t get_u64(std::string_view key) const;
    std::optional<uint64_t> get_u64_opt(std::string_view key) const;
    int64_t get_i64(std::string_view key) const;
    std::optional<int64_t> get_i64_opt(std::string_view key) const;
    float get_f32(std::string_view key) const;
    std::optional<float> get_f32_opt(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::optional<bool> get_bool_opt(std::string_view key) const;
    std::string get_string(std::string_view key) const;
    std::optional<std::string> get_string_opt(std::string_view key) const;
    std::vector<std::string> get_string_array(std::string_view key) const;
    std::vector<float> get_f32_array(std::string_view key) const;
    std::vector<int32_t> get_i32_array(std::string_view key) const;
    std::vector<uint32_t> get_u32_array(std::string_view key) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }  // file order
    const TensorInfo* find_tensor(std::string_view name) const;

    const std::string& path() const { return path_; }  // "" for parse()

    // The whole pages inside [p, p + n) of an open()ed file leave this
    // process's memory (madvise DONTNEED): for data read once and copied
    // (packed weights), so the copy is not counted twice. The pages stay in
    // the page cache and a later read maps them again. No-op for parse()
    // views and ranges outside the file.
    void release_pages(const void* p, size_t n) const;

private:
    File() = default;
    void parse_contents();
    const Value& require(std::string_view key) const;
    std::string where() const;  // "path: " or "" for parse()

    std::string path_;
    MappedFile mapping_;           // empty for parse()
    const uint8_t* bytes_ = nullptr;  // the whole file: size_ bytes
    size_t size_ = 0;
    uint32_t version_ = 0;
    uint32_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, Value>> metadata_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> key_index_;     // key → index in metadata_
    std::map<std::string, size_t, std::less<>> tensor_index_;  // name → index in tensors_
};

class Writer {
public:
    // Replaces an existing key in place (keeps its position), else appends.
    void set(std::string key, Value value);
    void remove(std::string_view key);
    const Value* find(std::string_view key) const;
    const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }

    // Copies nothing: data (n_bytes, which must equal the size that ne and
    // type imply) must live until write(). Shape and name are checked here.
    void add_tensor(std::string name, std::vector<int64_t> ne, TensorType type, const void* data, size_t n_bytes);
    size_t n_tensors() const { return tensors_.size(); }

    // Writes path+".tmp" and renames it over path, so a reader never sees a
    // half-written file. Alignment from general.alignment (a uint32 power of
    // two; default 32), padding bytes are zeros.
    void write(const std::string& path) const;

private:
    struct PendingTensor {
        std::string name;
        std::vector<int64_t> ne;
        TensorType type;
        const void* data;
        size_t n_bytes;
    };
    std::vector<std::pair<std::string, Value>> metadata_;
    std::vector<PendingTensor> tensors_;
};

}  // namespace specd::gguf
