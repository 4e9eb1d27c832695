#include "engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "engine/error.h"

namespace specd::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kWriteVersion = 3;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, n_tensors, n_kv
// Smallest possible encodings, used to reject counts that the rest of the
// file could not hold before anything is allocated for them.
constexpr size_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, ne[0], type, offset
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::FLOAT64);

bool is_known_value_type(uint32_t raw) { return raw <= kMaxValueType; }

// Bytes of the smallest encoding of one element of this type.
size_t min_encoded_bytes(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64:
        case ValueType::STRING: return 8;   // the length
        case ValueType::ARRAY: return 4 + 8;  // element type + count
    }
    return 1;
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// a rounded up to a multiple of the power of two `alignment`; false on overflow.
bool align_up(uint64_t a, uint64_t alignment, uint64_t& out) {
    const uint64_t mask = alignment - 1;
    if (a > std::numeric_limits<uint64_t>::max() - mask) return false;
    out = (a + mask) & ~mask;
    return true;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }

// s in single quotes, fit for a one-line message: bytes outside printable
// ASCII as \xNN, cut after 80 bytes (names come from hostile files).
std::string quoted(std::string_view s) {
    constexpr size_t kMaxShown = 80;
    std::string out = "'";
    for (size_t k = 0; k < s.size() && k < kMaxShown; ++k) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    if (s.size() > kMaxShown) out += "...";
    return out + "'";
}

std::string type_description(const Value& v) {
    if (v.type == ValueType::ARRAY) return std::string("array of ") + value_type_name(v.array_type);
    return value_type_name(v.type);
}

std::string shape_string(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
    return s + "]";
}

// Elements and bytes of a tensor; the message (without prefix) of the
// first problem, or "" when the shape is valid for the type.
std::string check_shape(const std::vector<int64_t>& ne, TensorType type, int64_t& n_elements, uint64_t& n_bytes) {
    if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
        return "has " + std::to_string(ne.size()) + " dimensions (expected 1.." + std::to_string(kMaxDims) + ")";
    }
    uint64_t elements = 1;
    for (size_t k = 0; k < ne.size(); ++k) {
        if (ne[k] <= 0) {
            return "has dimension ne[" + std::to_string(k) + "] = " + std::to_string(ne[k]) + " (must be positive)";
        }
        if (mul_overflows(elements, static_cast<uint64_t>(ne[k]), elements) ||
            elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return "has shape " + shape_string(ne) + " whose element count overflows";
        }
    }
    const int64_t block = tensor_type_block_elements(type);
    if (ne[0] % block != 0) {
        return "has row length " + std::to_string(ne[0]) + ", not a multiple of the block size " +
               std::to_string(block) + " of type " + tensor_type_name(type);
    }
    // (ne0 / block) * block_bytes * rows: each factor fits, the product is checked.
    uint64_t bytes = static_cast<uint64_t>(ne[0] / block);
    if (mul_overflows(bytes, tensor_type_block_bytes(type), bytes) ||
        mul_overflows(bytes, elements / static_cast<uint64_t>(ne[0]), bytes) ||
        bytes > std::numeric_limits<size_t>::max()) {
        return "has shape " + shape_string(ne) + " whose byte size overflows";
    }
    n_elements = static_cast<int64_t>(elements);
    n_bytes = bytes;
    return "";
}

// Bounds-checked little-endian reads from the file image. `context` names
// the item being read ("key 'general.name'") so that a truncation error
// says what was cut off and where.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size, const std::string& where) : data_(data), size_(size), where_(where) {}

    std::string context = "header";

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }

    void need(size_t n, const char* what) const {
        if (n > remaining()) {
            throw Error(where_ + "truncated: " + what + " of " + context + " at offset " + std::to_string(pos_) +
                        " needs " + std::to_string(n) + " bytes, only " + std::to_string(remaining()) + " remain");
        }
    }

    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const char* what) {
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining()) {
            throw Error(where_ + "truncated: " + what + " of " + context + " claims " + std::to_string(len) +
                        " bytes at offset " + std::to_string(pos_) + ", only " + std::to_string(remaining()) +
                        " remain");
        }
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& where_;
};

// One value of `type`; in.context names its key for error messages.
Value parse_value(Cursor& in, ValueType type, int depth, const std::string& where) {
    Value v;
    v.type = type;
    const char* what = "value";
    switch (type) {
        case ValueType::UINT8: v.u = in.read<uint8_t>(what); break;
        case ValueType::INT8: v.i = in.read<int8_t>(what); break;
        case ValueType::UINT16: v.u = in.read<uint16_t>(what); break;
        case ValueType::INT16: v.i = in.read<int16_t>(what); break;
        case ValueType::UINT32: v.u = in.read<uint32_t>(what); break;
        case ValueType::INT32: v.i = in.read<int32_t>(what); break;
        case ValueType::UINT64: v.u = in.read<uint64_t>(what); break;
        case ValueType::INT64: v.i = in.read<int64_t>(what); break;
        case ValueType::FLOAT32: v.f = in.read<float>(what); break;
        case ValueType::FLOAT64: v.f = in.read<double>(what); break;
        case ValueType::BOOL: {
            const uint8_t byte = in.read<uint8_t>(what);
            if (byte > 1) {
                throw Error(where + in.context + " has bool value " + std::to_string(byte) + " (expected 0 or 1)");
            }
            v.b = byte != 0;
            break;
        }
        case ValueType::STRING: v.s = in.read_string(what); break;
        case ValueType::ARRAY: {
            if (depth >= kMaxArrayNesting) {
                throw Error(where + in.context + " has array nesting too deep (more than " +
                            std::to_string(kMaxArrayNesting) + " levels)");
            }
            const uint32_t raw_elem = in.read<uint32_t>("array element type");
            if (!is_known_value_type(raw_elem)) {
                throw Error(where + in.context + " has an array of unknown value type " + std::to_string(raw_elem));
            }
            v.array_type = static_cast<ValueType>(raw_elem);
            const uint64_t count = in.read<uint64_t>("array element count");
            if (count > in.remaining() / min_encoded_bytes(v.array_type)) {
                throw Error(where + "truncated: " + in.context + " claims " + std::to_string(count) + " " +
                            value_type_name(v.array_type) + " elements but only " + std::to_string(in.remaining()) +
                            " bytes remain");
            }
            v.array.reserve(static_cast<size_t>(count));
            for (uint64_t k = 0; k < count; ++k) v.array.push_back(parse_value(in, v.array_type, depth + 1, where));
            break;
        }
    }
    return v;
}

// The problem with a hand-built value (elements of the wrong type, nesting
// too deep, unknown type), or "" when it can be written.
std::string check_value(const Value& v, int depth) {
    if (!is_known_value_type(static_cast<uint32_t>(v.type))) {
        return "has unknown value type " + std::to_string(static_cast<uint32_t>(v.type));
    }
    if (v.type == ValueType::FLOAT32 && std::isfinite(v.f) && std::fabs(v.f) > FLT_MAX) {
        return "has float32 value " + std::to_string(v.f) + " out of range";
    }
    if (v.type != ValueType::ARRAY) return "";
    if (depth >= kMaxArrayNesting) return "has array nesting too deep";
    if (!is_known_value_type(static_cast<uint32_t>(v.array_type))) {
        return "has an array of unknown value type " + std::to_string(static_cast<uint32_t>(v.array_type));
    }
    for (const Value& e : v.array) {
        if (e.type != v.array_type) {
            return std::string("has an array of ") + value_type_name(v.array_type) + " holding a " +
                   value_type_name(e.type) + " element";
        }
        if (std::string problem = check_value(e, depth + 1); !problem.empty()) return problem;
    }
    return "";
}

// Buffered, error-checked output that counts the bytes written.
class Sink {
public:
    Sink(std::FILE* f, const std::string& path) : f_(f), path_(path) {}

    void bytes(const void* p, size_t n) {
        if (n == 0) return;
        if (std::fwrite(p, 1, n, f_) != n) {
            throw Error(path_ + ": write failed: " + std::strerror(errno));
        }
        pos_ += n;
    }
    template <typename T>
    void scalar(T v) {
        bytes(&v, sizeof v);
    }
    void string(const std::string& s) {
        scalar<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void zeros(uint64_t n) {
        static const uint8_t kZeros[256] = {};
        while (n > 0) {
            const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZeros));
            bytes(kZeros, chunk);
            n -= chunk;
        }
    }
    uint64_t pos() const { return pos_; }

private:
    std::FILE* f_;
    const std::string& path_;
    uint64_t pos_ = 0;
};

void write_value(Sink& out, const Value& v) {
    switch (v.type) {
        case ValueType::UINT8: out.scalar(static_cast<uint8_t>(v.u)); break;
        case ValueType::INT8: out.scalar(static_cast<int8_t>(v.i)); break;
        case ValueType::UINT16: out.scalar(static_cast<uint16_t>(v.u)); break;
        case ValueType::INT16: out.scalar(static_cast<int16_t>(v.i)); break;
        case ValueType::UINT32: out.scalar(static_cast<uint32_t>(v.u)); break;
        case ValueType::INT32: out.scalar(static_cast<int32_t>(v.i)); break;
        case ValueType::UINT64: out.scalar(v.u); break;
        case ValueType::INT64: out.scalar(v.i); break;
        case ValueType::FLOAT32: out.scalar(static_cast<float>(v.f)); break;  // range checked by check_value
        case ValueType::FLOAT64: out.scalar(v.f); break;
        case ValueType::BOOL: out.scalar<uint8_t>(v.b ? 1 : 0); break;
        case ValueType::STRING: out.string(v.s); break;
        case ValueType::ARRAY:
            out.scalar(static_cast<uint32_t>(v.array_type));
            out.scalar<uint64_t>(v.array.size());
            for (const Value& e : v.array) write_value(out, e);
            break;
    }
}

}  // namespace

// ------------------------------------------------------------------ Value ---

const char* value_type_name(ValueType type) {
    switch (type) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

bool is_integer_type(ValueType type) {
    switch (type) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::UINT16:
        case ValueType::INT16:
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::UINT64:
        case ValueType::INT64: return true;
        default: return false;
    }
}

namespace {
bool is_unsigned_type(ValueType type) {
    return type == ValueType::UINT8 || type == ValueType::UINT16 || type == ValueType::UINT32 ||
           type == ValueType::UINT64;
}
Value unsigned_value(ValueType type, uint64_t v) {
    Value out;
    out.type = type;
    out.u = v;
    return out;
}
Value signed_value(ValueType type, int64_t v) {
    Value out;
    out.type = type;
    out.i = v;
    return out;
}
}  // namespace

Value Value::u8(uint8_t v) { return unsigned_value(ValueType::UINT8, v); }
Value Value::i8(int8_t v) { return signed_value(ValueType::INT8, v); }
Value Value::u16(uint16_t v) { return unsigned_value(ValueType::UINT16, v); }
Value Value::i16(int16_t v) { return signed_value(ValueType::INT16, v); }
Value Value::u32(uint32_t v) { return unsigned_value(ValueType::UINT32, v); }
Value Value::i32(int32_t v) { return signed_value(ValueType::INT32, v); }
Value Value::u64(uint64_t v) { return unsigned_value(ValueType::UINT64, v); }
Value Value::i64(int64_t v) { return signed_value(ValueType::INT64, v); }

Value Value::f32(float v) {
    Value out;
    out.type = ValueType::FLOAT32;
    out.f = v;
    return out;
}

Value Value::f64(double v) {
    Value out;
    out.type = ValueType::FLOAT64;
    out.f = v;
    return out;
}

Value Value::boolean(bool v) {
    Value out;
    out.type = ValueType::BOOL;
    out.b = v;
    return out;
}

Value Value::str(std::string v) {
    Value out;
    out.type = ValueType::STRING;
    out.s = std::move(v);
    return out;
}

Value Value::make_array(ValueType element_type, std::vector<Value> elements) {
    for (const Value& e : elements) {
        if (e.type != element_type) {
            throw Error(std::string("GGUF array of ") + value_type_name(element_type) + " given a " +
                        value_type_name(e.type) + " element");
        }
    }
    Value out;
    out.type = ValueType::ARRAY;
    out.array_type = element_type;
    out.array = std::move(elements);
    return out;
}

Value Value::string_array(std::vector<std::string> v) {
    std::vector<Value> elements;
    elements.reserve(v.size());
    for (std::string& s : v) elements.push_back(str(std::move(s)));
    return make_array(ValueType::STRING, std::move(elements));
}

Value Value::f32_array(std::vector<float> v) {
    std::vector<Value> elements;
    elements.reserve(v.size());
    for (float x : v) elements.push_back(f32(x));
    return make_array(ValueType::FLOAT32, std::move(elements));
}

Value Value::i32_array(std::vector<int32_t> v) {
    std::vector<Value> elements;
    elements.reserve(v.size());
    for (int32_t x : v) elements.push_back(i32(x));
    return make_array(ValueType::INT32, std::move(elements));
}

Value Value::u32_array(std::vector<uint32_t> v) {
    std::vector<Value> elements;
    elements.reserve(v.size());
    for (uint32_t x : v) elements.push_back(u32(x));
    return make_array(ValueType::UINT32, std::move(elements));
}

bool Value::operator==(const Value& other) const {
    if (type != other.type) return false;
    switch (type) {
        case ValueType::FLOAT32:
        case ValueType::FLOAT64: return f == other.f || (std::isnan(f) && std::isnan(other.f));
        case ValueType::BOOL: return b == other.b;
        case ValueType::STRING: return s == other.s;
        case ValueType::ARRAY: return array_type == other.array_type && array == other.array;
        default: return is_unsigned_type(type) ? u == other.u : i == other.i;
    }
}

int64_t TensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;  // validated on read: no overflow
    return n;
}

// ------------------------------------------------------------- MappedFile ---

MappedFile MappedFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw Error(path + ": cannot stat: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path + ": not a regular file");
    }
    MappedFile m;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
        void* base = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (base == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw Error(path + ": cannot mmap: " + std::strerror(err));
        }
        m.base_ = base;
    }
    ::close(fd);  // the mapping keeps the file alive
    return m;
}

void File::release_pages(const void* p, size_t n) const {
    const uint8_t* base = mapping_.data();
    const auto* q = static_cast<const uint8_t*>(p);
    if (base == nullptr || q < base || n > mapping_.size() || q - base > static_cast<std::ptrdiff_t>(mapping_.size() - n)) return;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(q) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(q) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only: its failure changes nothing
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (base_) ::munmap(base_, size_);
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() {
    if (base_) ::munmap(base_, size_);
}

// ------------------------------------------------------------------- File ---

File File::open(const std::string& path) {
    File file;
    file.path_ = path;
    file.mapping_ = MappedFile::open(path);
    file.bytes_ = file.mapping_.data();
    file.size_ = file.mapping_.size();
    file.parse_contents();
    return file;
}

File File::parse(const uint8_t* data, size_t size) {
    File file;
    file.bytes_ = data;
    file.size_ = data ? size : 0;
    file.parse_contents();
    return file;
}

std::string File::where() const { return path_.empty() ? std::string("GGUF: ") : path_ + ": "; }

void File::parse_contents() {
    const std::string where = this->where();
    if (size_ < kHeaderBytes) {
        throw Error(where + "file too small for a GGUF header (" + std::to_string(size_) + " bytes, need " +
                    std::to_string(kHeaderBytes) + ")");
    }
    if (std::memcmp(bytes_, kMagic, 4) != 0) {
        throw Error(where + "wrong magic " + quoted(std::string_view(reinterpret_cast<const char*>(bytes_), 4)) + ", expected 'GGUF' (not a GGUF file)");
    }
    Cursor in(bytes_, size_, where);
    in.read<uint32_t>("magic");
    version_ = in.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        const uint32_t swapped = __builtin_bswap32(version_);
        throw Error(where + "unsupported GGUF version " + std::to_string(version_) + " (specd reads 2 and 3)" +
                    (swapped == 2 || swapped == 3 ? "; the file looks big-endian" : ""));
    }
    const uint64_t n_tensors = in.read<uint64_t>("tensor count");
    const uint64_t n_kv = in.read<uint64_t>("metadata count");
    if (n_kv > in.remaining() / kMinKvBytes) {
        throw Error(where + "absurd metadata count " + std::to_string(n_kv) + " for a file of " +
                    std::to_string(size_) + " bytes");
    }
    if (n_tensors > in.remaining() / kMinTensorInfoBytes) {
        throw Error(where + "absurd tensor count " + std::to_string(n_tensors) + " for a file of " +
                    std::to_string(size_) + " bytes");
    }

    metadata_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
        in.context = "metadata entry " + std::to_string(k);
        std::string key = in.read_string("key");
        in.context = "key " + quoted(key);
        if (key_index_.count(key)) throw Error(where + "duplicate metadata key " + quoted(key));
        const uint32_t raw_type = in.read<uint32_t>("value type");
        if (!is_known_value_type(raw_type)) {
            throw Error(where + in.context + " has unknown value type " + std::to_string(raw_type));
        }
        Value value = parse_value(in, static_cast<ValueType>(raw_type), 0, where);
        key_index_.emplace(key, metadata_.size());
        metadata_.emplace_back(std::move(key), std::move(value));
    }

    // ggml reads general.alignment with gguf_get_val_u32, so any other type
    // would make the file unreadable there.
    if (const Value* a = find("general.alignment")) {
        if (a->type != ValueType::UINT32) {
            throw Error(where + "general.alignment has type " + type_description(*a) + ", expected uint32");
        }
        if (!is_power_of_two(a->u)) {
            throw Error(where + "general.alignment " + std::to_string(a->u) + " is not a power of two");
        }
        alignment_ = static_cast<uint32_t>(a->u);
    }

    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t t = 0; t < n_tensors; ++t) {
        TensorInfo info;
        in.context = "tensor info " + std::to_string(t);
        info.name = in.read_string("name");
        const std::string label = "tensor " + quoted(info.name);
        in.context = label;
        if (tensor_index_.count(info.name)) throw Error(where + "duplicate tensor name " + quoted(info.name));
        const uint32_t n_dims = in.read<uint32_t>("n_dims");
        if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims)) {
            throw Error(where + label + " has n_dims " + std::to_string(n_dims) + " (expected 1.." +
                        std::to_string(kMaxDims) + ")");
        }
        info.ne.resize(n_dims);
        for (uint32_t d = 0; d < n_dims; ++d) info.ne[d] = in.read<int64_t>("shape");
        const uint32_t raw_type = in.read<uint32_t>("type");
        if (!tensor_type_supported(raw_type)) {
            throw Error(where + label + " has unknown or unsupported tensor type " + std::to_string(raw_type) +
                        " (specd reads f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, q2_K..q6_K, iq4_nl, iq4_xs)");
        }
        info.type = static_cast<TensorType>(raw_type);
        int64_t n_elements = 0;
        uint64_t n_bytes = 0;
        if (std::string problem = check_shape(info.ne, info.type, n_elements, n_bytes); !problem.empty()) {
            throw Error(where + label + " " + problem);
        }
        info.n_bytes = static_cast<size_t>(n_bytes);
        info.offset = in.read<uint64_t>("offset");
        if (info.offset % alignment_ != 0) {
            throw Error(where + label + " offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
                        std::to_string(alignment_));
        }
        tensor_index_.emplace(info.name, tensors_.size());
        tensors_.push_back(std::move(info));
    }

    if (!align_up(in.pos(), alignment_, data_offset_)) throw Error(where + "data section offset overflows");
    for (TensorInfo& info : tensors_) {
        const uint64_t size = size_;
        if (data_offset_ > size || info.offset > size - data_offset_ || info.n_bytes > size - data_offset_ - info.offset) {
            throw Error(where + "tensor " + quoted(info.name) + " data (" + std::to_string(info.n_bytes) + " bytes at offset " +
                        std::to_string(info.offset) + " of the data section at " + std::to_string(data_offset_) +
                        ") lies beyond the end of the file (" + std::to_string(size_) + " bytes)");
        }
        info.data = bytes_ + data_offset_ + info.offset;
    }

    // Overlap check in offset order; ends are in range (checked above).
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const TensorInfo& prev = tensors_[order[k - 1]];
        const TensorInfo& cur = tensors_[order[k]];
        if (prev.offset + prev.n_bytes > cur.offset) {
            throw Error(where + "tensors " + quoted(prev.name) + " and " + quoted(cur.name) + " overlap in the data section");
        }
    }
}

const Value* File::find(std::string_view key) const {
    const auto it = key_index_.find(key);
    return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const Value& File::require(std::string_view key) const {
    const Value* v = find(key);
    if (!v) throw Error(where() + "GGUF key '" + std::string(key) + "' is missing");
    return *v;
}

namespace {

[[noreturn]] void wrong_type(const std::string& where, std::string_view key, const Value& v, const char* expected) {
    throw Error(where + "GGUF key '" + std::string(key) + "' has type " + type_description(v) + ", expected " + expected);
}

std::string integer_text(const Value& v) { return is_unsigned_type(v.type) ? std::to_string(v.u) : std::to_string(v.i); }

// An integer value as T, or an error naming the key (and element index).
template <typename T>
T integer_as(const std::string& where, std::string_view key, const Value& v, const char* t_name, const char* expected,
             const std::string& element = "") {
    if (!is_integer_type(v.type)) {
        throw Error(where + "GGUF key '" + std::string(key) + "'" + element + " has type " + type_description(v) +
                    ", expected " + expected);
    }
    const bool fits = is_unsigned_type(v.type) ? std::in_range<T>(v.u) : std::in_range<T>(v.i);
    if (!fits) {
        throw Error(where + "GGUF key '" + std::string(key) + "'" + element + " = " + integer_text(v) +
                    " is out of range for " + t_name);
    }
    return is_unsigned_type(v.type) ? static_cast<T>(v.u) : static_cast<T>(v.i);
}

float float_as_f32(const std::string& where, std::string_view key, const Value& v, const std::string& element = "") {
    if (v.type != ValueType::FLOAT32 && v.type != ValueType::FLOAT64) {
        throw Error(where + "GGUF key '" + std::string(key) + "'" + element + " has type " + type_description(v) +
                    ", expected float32 or float64");
    }
    if (std::isfinite(v.f) && std::fabs(v.f) > FLT_MAX) {
        throw Error(where + "GGUF key '" + std::string(key) + "'" + element + " = " + std::to_string(v.f) +
                    " is out of range for float32");
    }
    return static_cast<float>(v.f);
}

void check_array(const std::string& where, std::string_view key, const Value& v, const char* expected) {
    if (v.type != ValueType::ARRAY) wrong_type(where, key, v, expected);
}

std::string element_label(size_t k) { return " element " + std::to_string(k); }

}  // namespace

uint32_t File::get_u32(std::string_view key) const {
    return integer_as<uint32_t>(where(), key, require(key), "uint32", "an integer");
}
std::optional<uint32_t> File::get_u32_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_u32(key);
}
int32_t File::get_i32(std::string_view key) const {
    return integer_as<int32_t>(where(), key, require(key), "int32", "an integer");
}
std::optional<int32_t> File::get_i32_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_i32(key);
}
uint64_t File::get_u64(std::string_view key) const {
    return integer_as<uint64_t>(where(), key, require(key), "uint64", "an integer");
}
std::optional<uint64_t> File::get_u64_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_u64(key);
}
int64_t File::get_i64(std::string_view key) const {
    return integer_as<int64_t>(where(), key, require(key), "int64", "an integer");
}
std::optional<int64_t> File::get_i64_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_i64(key);
}

float File::get_f32(std::string_view key) const { return float_as_f32(where(), key, require(key)); }
std::optional<float> File::get_f32_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_f32(key);
}

bool File::get_bool(std::string_view key) const {
    const Value& v = require(key);
    if (v.type != ValueType::BOOL) wrong_type(where(), key, v, "bool");
    return v.b;
}
std::optional<bool> File::get_bool_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}

std::string File::get_string(std::string_view key) const {
    const Value& v = require(key);
    if (v.type != ValueType::STRING) wrong_type(where(), key, v, "string");
    return v.s;
}
std::optional<std::string> File::get_string_opt(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
    const Value& v = require(key);
    check_array(where(), key, v, "array of string");
    if (v.array_type != ValueType::STRING) wrong_type(where(), key, v, "array of string");
    std::vector<std::string> out;
    out.reserve(v.array.size());
    for (const Value& e : v.array) out.push_back(e.s);
    return out;
}

std::vector<float> File::get_f32_array(std::string_view key) const {
    const Value& v = require(key);
    check_array(where(), key, v, "array of float32");
    if (v.array_type != ValueType::FLOAT32 && v.array_type != ValueType::FLOAT64) {
        wrong_type(where(), key, v, "array of float32");
    }
    std::vector<float> out;
    out.reserve(v.array.size());
    for (size_t k = 0; k < v.array.size(); ++k) out.push_back(float_as_f32(where(), key, v.array[k], element_label(k)));
    return out;
}

std::vector<int32_t> File::get_i32_array(std::string_view key) const {
    const Value& v = require(key);
    check_array(where(), key, v, "array of int32");
    if (!is_integer_type(v.array_type)) wrong_type(where(), key, v, "array of int32");
    std::vector<int32_t> out;
    out.reserve(v.array.size());
    for (size_t k = 0; k < v.array.size(); ++k) {
        out.push_back(integer_as<int32_t>(where(), key, v.array[k], "int32", "an integer", element_label(k)));
    }
    return out;
}

std::vector<uint32_t> File::get_u32_array(std::string_view key) const {
    const Value& v = require(key);
    check_array(where(), key, v, "array of uint32");
    if (!is_integer_type(v.array_type)) wrong_type(where(), key, v, "array of uint32");
    std::vector<uint32_t> out;
    out.reserve(v.array.size());
    for (size_t k = 0; k < v.array.size(); ++k) {
        out.push_back(integer_as<uint32_t>(where(), key, v.array[k], "uint32", "an integer", element_label(k)));
    }
    return out;
}

// ----------------------------------------------------------------- Writer ---

void Writer::set(std::string key, Value value) {
    for (auto& [k, v] : metadata_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::remove(std::string_view key) {
    metadata_.erase(std::remove_if(metadata_.begin(), metadata_.end(), [&](const auto& kv) { return kv.first == key; }),
                    metadata_.end());
}

const Value* Writer::find(std::string_view key) const {
    for (const auto& [k, v] : metadata_) {
        if (k == key) return &v;
    }
    return nullptr;
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, TensorType type, const void* data, size_t n_bytes) {
    const std::string label = "GGUF writer: tensor '" + name + "'";
    if (name.size() > kMaxTensorNameBytes) {
        throw Error(label + " has a name of " + std::to_string(name.size()) + " bytes; ggml allows at most " +
                    std::to_string(kMaxTensorNameBytes));
    }
    for (const PendingTensor& t : tensors_) {
        if (t.name == name) throw Error("GGUF writer: duplicate tensor name '" + name + "'");
    }
    if (!tensor_type_supported(static_cast<uint32_t>(type))) {
        throw Error(label + " has unsupported type " + std::to_string(static_cast<uint32_t>(type)));
    }
    int64_t n_elements = 0;
    uint64_t expected_bytes = 0;
    if (std::string problem = check_shape(ne, type, n_elements, expected_bytes); !problem.empty()) {
        throw Error(label + " " + problem);
    }
    if (expected_bytes != n_bytes) {
        throw Error(label + " of shape " + shape_string(ne) + " and type " + tensor_type_name(type) + " needs " +
                    std::to_string(expected_bytes) + " bytes, given " + std::to_string(n_bytes));
    }
    if (!data) throw Error(label + " has no data");
    tensors_.push_back(PendingTensor{std::move(name), std::move(ne), type, data, n_bytes});
}

void Writer::write(const std::string& path) const {
    uint32_t alignment = kDefaultAlignment;
    for (const auto& [key, value] : metadata_) {
        if (std::string problem = check_value(value, 0); !problem.empty()) {
            throw Error(path + ": GGUF key " + quoted(key) + " " + problem);
        }
    }
    for (size_t a = 0; a < metadata_.size(); ++a) {
        for (size_t b = a + 1; b < metadata_.size(); ++b) {
            if (metadata_[a].first == metadata_[b].first) {
                throw Error(path + ": duplicate metadata key '" + metadata_[a].first + "'");
            }
        }
    }
    if (const Value* a = find("general.alignment")) {
        if (a->type != ValueType::UINT32 || !is_power_of_two(a->u)) {
            throw Error(path + ": general.alignment must be a uint32 power of two");
        }
        alignment = static_cast<uint32_t>(a->u);
    }

    // Offsets: tensors packed in order, each padded to the alignment (what
    // ggml expects, including padding after the last one).
    std::vector<uint64_t> offsets(tensors_.size());
    uint64_t data_bytes = 0;
    for (size_t t = 0; t < tensors_.size(); ++t) {
        offsets[t] = data_bytes;
        uint64_t padded = 0;
        if (!align_up(tensors_[t].n_bytes, alignment, padded) || padded > UINT64_MAX - data_bytes) {
            throw Error(path + ": tensor data size overflows");
        }
        data_bytes += padded;
    }

    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw Error(tmp + ": cannot create: " + std::strerror(errno));
    try {
        Sink out(f, tmp);
        out.bytes(kMagic, 4);
        out.scalar<uint32_t>(kWriteVersion);
        out.scalar<uint64_t>(tensors_.size());
        out.scalar<uint64_t>(metadata_.size());
        for (const auto& [key, value] : metadata_) {
            out.string(key);
            out.scalar(static_cast<uint32_t>(value.type));
            write_value(out, value);
        }
        for (size_t t = 0; t < tensors_.size(); ++t) {
            const PendingTensor& tensor = tensors_[t];
            out.string(tensor.name);
            out.scalar(static_cast<uint32_t>(tensor.ne.size()));
            for (int64_t d : tensor.ne) out.scalar(d);
            out.scalar(static_cast<uint32_t>(tensor.type));
            out.scalar(offsets[t]);
        }
        uint64_t data_start = 0;
        align_up(out.pos(), alignment, data_start);
        out.zeros(data_start - out.pos());
        for (const PendingTensor& tensor : tensors_) {
            out.bytes(tensor.data, tensor.n_bytes);
            uint64_t padded = 0;
            align_up(tensor.n_bytes, alignment, padded);
            out.zeros(padded - tensor.n_bytes);
        }
        if (std::fflush(f) != 0) throw Error(tmp + ": write failed: " + std::strerror(errno));
    } catch (...) {
        std::fclose(f);
        std::remove(tmp.c_str());
        throw;
    }
    if (std::fclose(f) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw Error(tmp + ": write failed: " + std::strerror(err));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw Error(path + ": cannot rename " + tmp + " over it: " + std::strerror(err));
    }
}

}  // namespace specd::gguf
