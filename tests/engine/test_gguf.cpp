// GGUF reader and writer: round trips of every value and tensor type, the
// exact byte layout ggml uses, alignment, typed getters, and a table of
// corrupted files that must each fail with a specific one-line message.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/tensor_type.h"

using namespace specd;
using gguf::Value;
using gguf::ValueType;

namespace {

std::string temp_file(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("specd-test-gguf-" + std::to_string(::getpid()) + "-" + name))
        .string();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Builds GGUF bytes by hand, independently of gguf::Writer, in the layout
// ggml documents (little-endian, u64 string lengths).
struct GgufBytes {
    std::vector<uint8_t> b;

    template <typename T>
    GgufBytes& put(T v) {
        uint8_t raw[sizeof(T)];
        std::memcpy(raw, &v, sizeof(T));
        b.insert(b.end(), raw, raw + sizeof(T));
        return *this;
    }
    GgufBytes& u8(uint8_t v) { return put(v); }
    GgufBytes& u32(uint32_t v) { return put(v); }
    GgufBytes& u64(uint64_t v) { return put(v); }
    GgufBytes& i64(int64_t v) { return put(v); }
    GgufBytes& raw(std::string_view s) {
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }
    GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
    GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
    GgufBytes& tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (int64_t d : ne) i64(d);
        return u32(type).u64(offset);
    }
    GgufBytes& pad_to(size_t alignment) {
        while (b.size() % alignment) b.push_back(0);
        return *this;
    }
    GgufBytes& zeros(size_t n) {
        b.insert(b.end(), n, 0);
        return *this;
    }
};

// A valid file: general.alignment = 32, one f32 tensor "w" {8, 2} (64 bytes).
GgufBytes valid_file() {
    GgufBytes g;
    g.header(1, 1).kv_u32("general.alignment", 32).tensor("w", {8, 2}, 0, 0).pad_to(32).zeros(64);
    return g;
}

gguf::File parse(const std::vector<uint8_t>& bytes) { return gguf::File::parse(bytes.data(), bytes.size()); }

std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        parse(bytes);
    } catch (const Error& e) {
        return e.what();
    }
    return "(parsed without error)";
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (uint8_t& x : v) x = static_cast<uint8_t>(rng());
    return v;
}

Value nested(int levels) {
    Value v = Value::u8(7);
    for (int k = 0; k < levels; ++k) v = Value::make_array(v.type, {v});
    return v;
}

}  // namespace

TEST_CASE("every value type survives a write-read round trip, in order", "[gguf]") {
    std::vector<std::pair<std::string, Value>> values = {
        {"t.u8", Value::u8(255)},
        {"t.i8", Value::i8(-128)},
        {"t.u16", Value::u16(65535)},
        {"t.i16", Value::i16(-32768)},
        {"t.u32", Value::u32(4294967295u)},
        {"t.i32", Value::i32(std::numeric_limits<int32_t>::min())},
        {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
        {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
        {"t.f32", Value::f32(-1.5e-5f)},
        {"t.f64", Value::f64(3.141592653589793)},
        {"t.f32_nan", Value::f32(std::nanf(""))},
        {"t.true", Value::boolean(true)},
        {"t.false", Value::boolean(false)},
        {"t.str", Value::str("h\xc3\xa9llo \xe2\x96\x81world")},
        {"t.str_empty", Value::str("")},
        {"t.str_nul", Value::str(std::string("a\0b", 3))},
        {"t.strings", Value::string_array({"<unk>", "", "\xe2\x96\x81the"})},
        {"t.f32s", Value::f32_array({0.0f, -2.5f, 1e30f})},
        {"t.i32s", Value::i32_array({1, -2, 3})},
        {"t.u32s", Value::u32_array({0, 4000000000u})},
        {"t.empty_u8s", Value::make_array(ValueType::UINT8, {})},
        {"t.empty_strings", Value::string_array({})},
        {"t.empty_arrays", Value::make_array(ValueType::ARRAY, {})},
        {"t.bools", Value::make_array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})},
        {"t.i64s", Value::make_array(ValueType::INT64, {Value::i64(-1), Value::i64(1)})},
        {"t.f64s", Value::make_array(ValueType::FLOAT64, {Value::f64(0.25)})},
        {"t.nested", Value::make_array(ValueType::ARRAY, {Value::string_array({"a", "b"}), Value::i32_array({}),
                                                          Value::make_array(ValueType::ARRAY, {Value::u32_array({9})})})},
        {"t.deepest", nested(gguf::kMaxArrayNesting)},
    };
    gguf::Writer w;
    for (const auto& [key, value] : values) w.set(key, value);
    const std::string path = temp_file("values.gguf");
    w.write(path);
    const gguf::File f = gguf::File::open(path);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.tensors().empty());
    REQUIRE(f.metadata().size() == values.size());
    for (size_t k = 0; k < values.size(); ++k) {
        INFO(values[k].first);
        CHECK(f.metadata()[k].first == values[k].first);
        CHECK(f.metadata()[k].second == values[k].second);
    }
    CHECK(f.find("t.str_nul")->s.size() == 3);
    CHECK(f.get_string_array("t.strings") == std::vector<std::string>{"<unk>", "", "\xe2\x96\x81the"});
    CHECK(f.get_f32_array("t.f32s") == std::vector<float>{0.0f, -2.5f, 1e30f});
    CHECK(f.get_i32_array("t.i32s") == std::vector<int32_t>{1, -2, 3});
    CHECK(f.get_u32_array("t.u32s") == std::vector<uint32_t>{0, 4000000000u});
    CHECK(f.get_string_array("t.empty_strings").empty());
    CHECK(f.find("t.nested")->array[2].array[0].array[0].u == 9);
    std::filesystem::remove(path);
}

TEST_CASE("every tensor type round trips its raw bytes, shape and type", "[gguf]") {
    struct Case {
        std::string name;
        std::vector<int64_t> ne;
        TensorType type;
        size_t n_bytes;
    };
    const std::vector<Case> cases = {
        {"f32", {7, 3}, TensorType::F32, 7 * 3 * 4},
        {"f16", {5}, TensorType::F16, 5 * 2},
        {"bf16", {4, 2, 3}, TensorType::BF16, 4 * 2 * 3 * 2},
        {"q8_0", {64, 3}, TensorType::Q8_0, 2 * 3 * 34},
        {"q4_0", {32, 2, 2, 2}, TensorType::Q4_0, 8 * 18},
    };
    std::vector<std::vector<uint8_t>> data;  // (case) raw tensor bytes
    gguf::Writer w;
    w.set("general.name", Value::str("tensors"));
    for (size_t k = 0; k < cases.size(); ++k) {
        data.push_back(random_bytes(cases[k].n_bytes, static_cast<uint32_t>(k)));
        w.add_tensor(cases[k].name, cases[k].ne, cases[k].type, data[k].data(), data[k].size());
    }
    const std::string path = temp_file("tensors.gguf");
    w.write(path);
    const gguf::File f = gguf::File::open(path);
    REQUIRE(f.tensors().size() == cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
        INFO(cases[k].name);
        const gguf::TensorInfo& t = f.tensors()[k];
        CHECK(t.name == cases[k].name);
        CHECK(t.ne == cases[k].ne);
        CHECK(t.type == cases[k].type);
        CHECK(t.n_bytes == cases[k].n_bytes);
        int64_t n = 1;
        for (int64_t d : cases[k].ne) n *= d;
        CHECK(t.n_elements() == n);
        REQUIRE(f.find_tensor(cases[k].name) == &t);
        CHECK(std::memcmp(t.data, data[k].data(), t.n_bytes) == 0);
    }
    CHECK(f.find_tensor("missing") == nullptr);
    std::filesystem::remove(path);
}

TEST_CASE("the writer produces exactly ggml's byte layout, with zero padding", "[gguf]") {
    const std::vector<uint8_t> weights = random_bytes(3 * 4, 1);  // f32 {3}: 12 bytes, padded to 32
    const std::vector<uint8_t> norm = random_bytes(2 * 2, 2);     // f16 {2}
    gguf::Writer w;
    w.set("general.architecture", Value::str("llama"));
    w.set("general.alignment", Value::u32(32));
    w.set("x.flag", Value::boolean(true));
    w.add_tensor("a", {3}, TensorType::F32, weights.data(), weights.size());
    w.add_tensor("b", {2}, TensorType::F16, norm.data(), norm.size());
    const std::string path = temp_file("layout.gguf");
    w.write(path);

    GgufBytes g;
    g.header(2, 3).str("general.architecture").u32(8).str("llama");
    g.kv_u32("general.alignment", 32);
    g.str("x.flag").u32(7).u8(1);
    g.tensor("a", {3}, 0, 0).tensor("b", {2}, 1, 32).pad_to(32);
    g.b.insert(g.b.end(), weights.begin(), weights.end());
    g.pad_to(32);
    g.b.insert(g.b.end(), norm.begin(), norm.end());
    g.pad_to(32);  // ggml pads after the last tensor too
    CHECK(read_bytes(path) == g.b);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

    // And the hand-built bytes parse to the same file.
    const gguf::File f = parse(g.b);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_bool("x.flag"));
    CHECK(f.find_tensor("b")->offset == 32);
    std::filesystem::remove(path);
}

TEST_CASE("alignment 32 and 64 are honoured for the data section, offsets and file size", "[gguf]") {
    for (const uint32_t alignment : {32u, 64u}) {
        INFO("alignment " << alignment);
        std::vector<std::vector<uint8_t>> data = {random_bytes(10 * 4, 3), random_bytes(34, 4), random_bytes(6 * 2, 5)};
        gguf::Writer w;
        w.set("general.alignment", Value::u32(alignment));
        w.set("pad.me", Value::str("odd length"));
        w.add_tensor("t0", {10}, TensorType::F32, data[0].data(), data[0].size());
        w.add_tensor("t1", {32}, TensorType::Q8_0, data[1].data(), data[1].size());
        w.add_tensor("t2", {6}, TensorType::BF16, data[2].data(), data[2].size());
        const std::string path = temp_file("align.gguf");
        w.write(path);
        const std::vector<uint8_t> bytes = read_bytes(path);
        const gguf::File f = gguf::File::open(path);
        CHECK(f.alignment() == alignment);
        CHECK(f.data_offset() % alignment == 0);
        CHECK(bytes.size() % alignment == 0);
        for (size_t k = 0; k < f.tensors().size(); ++k) {
            const gguf::TensorInfo& t = f.tensors()[k];
            CHECK(t.offset % alignment == 0);
            CHECK(static_cast<size_t>(t.data - f.tensors()[0].data) == t.offset);
            CHECK(std::memcmp(t.data, data[k].data(), t.n_bytes) == 0);
            // Padding after each tensor is zeros.
            const size_t end = f.data_offset() + t.offset + t.n_bytes;
            const size_t next = (end + alignment - 1) / alignment * alignment;
            for (size_t p = end; p < next; ++p) CHECK(bytes[p] == 0);
        }
        std::filesystem::remove(path);
    }
}

TEST_CASE("Writer::set replaces a key in place and remove drops it", "[gguf]") {
    gguf::Writer w;
    w.set("a", Value::u32(1));
    w.set("b", Value::u32(2));
    w.set("a", Value::str("one"));
    w.set("c", Value::u32(3));
    w.remove("b");
    const std::string path = temp_file("replace.gguf");
    w.write(path);
    const gguf::File f = gguf::File::open(path);
    REQUIRE(f.metadata().size() == 2);
    CHECK(f.metadata()[0].first == "a");
    CHECK(f.get_string("a") == "one");
    CHECK(f.metadata()[1].first == "c");
    std::filesystem::remove(path);
}

TEST_CASE("the writer rejects tensors and values that ggml could not read back", "[gguf]") {
    const std::vector<uint8_t> data(64 * 4);
    gguf::Writer w;
    CHECK_THROWS_WITH(w.add_tensor("w", {8}, TensorType::F32, data.data(), 31), Catch::Contains("needs 32 bytes"));
    CHECK_THROWS_WITH(w.add_tensor("w", {33}, TensorType::Q8_0, data.data(), 34),
                      Catch::Contains("not a multiple of the block size"));
    CHECK_THROWS_WITH(w.add_tensor("w", {}, TensorType::F32, data.data(), 0), Catch::Contains("0 dimensions"));
    CHECK_THROWS_WITH(w.add_tensor("w", {1, 1, 1, 1, 1}, TensorType::F32, data.data(), 4),
                      Catch::Contains("5 dimensions"));
    CHECK_THROWS_WITH(w.add_tensor("w", {0}, TensorType::F32, data.data(), 0), Catch::Contains("must be positive"));
    CHECK_THROWS_WITH(w.add_tensor(std::string(64, 'n'), {1}, TensorType::F32, data.data(), 4),
                      Catch::Contains("at most 63"));
    CHECK_THROWS_WITH(w.add_tensor("w", {1}, static_cast<TensorType>(3), data.data(), 4),
                      Catch::Contains("unsupported type 3"));
    w.add_tensor("w", {8}, TensorType::F32, data.data(), 32);
    CHECK_THROWS_WITH(w.add_tensor("w", {8}, TensorType::F32, data.data(), 32), Catch::Contains("duplicate tensor name"));
    CHECK_THROWS_WITH(Value::make_array(ValueType::UINT8, {Value::str("x")}),
                      Catch::Contains("array of uint8 given a string element"));

    const std::string path = temp_file("reject.gguf");
    w.set("general.alignment", Value::u64(32));
    CHECK_THROWS_WITH(w.write(path), Catch::Contains("general.alignment must be a uint32 power of two"));
    w.set("general.alignment", Value::u32(24));
    CHECK_THROWS_WITH(w.write(path), Catch::Contains("general.alignment must be a uint32 power of two"));
    w.set("general.alignment", Value::u32(32));
    Value mixed = Value::u32_array({1});
    mixed.array.push_back(Value::str("2"));
    w.set("mixed", mixed);
    CHECK_THROWS_WITH(w.write(path), Catch::Contains("holding a string element"));
    w.set("mixed", nested(gguf::kMaxArrayNesting + 1));
    CHECK_THROWS_WITH(w.write(path), Catch::Contains("nesting too deep"));
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    w.remove("mixed");
    CHECK_THROWS_WITH(w.write("/nonexistent-dir/x.gguf"), Catch::Contains("cannot create"));
}

TEST_CASE("typed getters convert integers with range checks and name type errors", "[gguf]") {
    gguf::Writer w;
    w.set("u8", Value::u8(200));
    w.set("i32_pos", Value::i32(7));
    w.set("i32_neg", Value::i32(-1));
    w.set("u64_big", Value::u64(1ull << 40));
    w.set("f64", Value::f64(0.5));
    w.set("f64_huge", Value::f64(1e300));
    w.set("f32", Value::f32(2.0f));
    w.set("s", Value::str("text"));
    w.set("flag", Value::boolean(true));
    w.set("u8s", Value::make_array(ValueType::UINT8, {Value::u8(1), Value::u8(2)}));
    w.set("u32s_big", Value::u32_array({1, 3000000000u}));
    w.set("f64s", Value::make_array(ValueType::FLOAT64, {Value::f64(1.25)}));
    const std::string path = temp_file("getters.gguf");
    w.write(path);
    const gguf::File f = gguf::File::open(path);

    CHECK(f.get_u32("u8") == 200);
    CHECK(f.get_i32("u8") == 200);
    CHECK(f.get_u32("i32_pos") == 7);
    CHECK(f.get_i64("i32_neg") == -1);
    CHECK(f.get_u64("u64_big") == (1ull << 40));
    CHECK(f.get_f32("f64") == 0.5f);
    CHECK(f.get_f32("f32") == 2.0f);
    CHECK(f.get_string("s") == "text");
    CHECK(f.get_bool("flag"));
    CHECK(f.get_i32_array("u8s") == std::vector<int32_t>{1, 2});
    CHECK(f.get_f32_array("f64s") == std::vector<float>{1.25f});
    CHECK(f.get_u32_array("u32s_big") == std::vector<uint32_t>{1, 3000000000u});

    CHECK_FALSE(f.get_u32_opt("nope").has_value());
    CHECK_FALSE(f.get_f32_opt("nope").has_value());
    CHECK_FALSE(f.get_bool_opt("nope").has_value());
    CHECK_FALSE(f.get_string_opt("nope").has_value());
    CHECK(f.get_u32_opt("u8") == 200u);
    CHECK(f.get_string_opt("s") == "text");
    CHECK(f.has("s"));
    CHECK_FALSE(f.has("nope"));

    CHECK_THROWS_WITH(f.get_u32("nope"), Catch::Contains("GGUF key 'nope' is missing") && Catch::Contains(path));
    CHECK_THROWS_WITH(f.get_string_array("nope"), Catch::Contains("GGUF key 'nope' is missing"));
    CHECK_THROWS_WITH(f.get_u32("i32_neg"), Catch::Contains("GGUF key 'i32_neg' = -1 is out of range for uint32"));
    CHECK_THROWS_WITH(f.get_i32("u64_big"), Catch::Contains("is out of range for int32"));
    CHECK_THROWS_WITH(f.get_u32("s"), Catch::Contains("GGUF key 's' has type string, expected an integer"));
    CHECK_THROWS_WITH(f.get_u32_opt("f32"), Catch::Contains("has type float32, expected an integer"));
    CHECK_THROWS_WITH(f.get_f32("u8"), Catch::Contains("has type uint8, expected float32 or float64"));
    CHECK_THROWS_WITH(f.get_f32("f64_huge"), Catch::Contains("out of range for float32"));
    CHECK_THROWS_WITH(f.get_string("flag"), Catch::Contains("has type bool, expected string"));
    CHECK_THROWS_WITH(f.get_bool_opt("s"), Catch::Contains("has type string, expected bool"));
    CHECK_THROWS_WITH(f.get_string_array("u8s"), Catch::Contains("has type array of uint8, expected array of string"));
    CHECK_THROWS_WITH(f.get_string_array("s"), Catch::Contains("has type string, expected array of string"));
    CHECK_THROWS_WITH(f.get_f32_array("u8s"), Catch::Contains("expected array of float32"));
    CHECK_THROWS_WITH(f.get_i32_array("f64s"), Catch::Contains("expected array of int32"));
    CHECK_THROWS_WITH(f.get_i32_array("u32s_big"), Catch::Contains("element 1 = 3000000000 is out of range for int32"));
    std::filesystem::remove(path);
}

TEST_CASE("hand-built GGUF v2 and v3 files parse, and a File moves without invalidating tensors", "[gguf]") {
    for (const uint32_t version : {2u, 3u}) {
        GgufBytes g;
        g.header(1, 1, version).kv_u32("general.alignment", 32).tensor("w", {8, 2}, 0, 0).pad_to(32).zeros(64);
        gguf::File f = parse(g.b);
        CHECK(f.version() == version);
        CHECK(f.path().empty());
        const uint8_t* data = f.find_tensor("w")->data;
        gguf::File moved = std::move(f);
        CHECK(moved.find_tensor("w")->data == data);
        CHECK(moved.get_u32("general.alignment") == 32);
    }
    // No alignment key: the default 32.
    GgufBytes g;
    g.header(1, 0).tensor("w", {4}, 0, 0).pad_to(32).zeros(16);
    CHECK(parse(g.b).alignment() == 32);
    CHECK(parse(g.b).data_offset() == 64);
}

TEST_CASE("corrupted files each raise specd::Error with a message naming the problem", "[gguf]") {
    struct Case {
        const char* what;
        std::vector<uint8_t> bytes;
        const char* phrase;
    };
    std::vector<Case> cases;
    auto add = [&](const char* what, const GgufBytes& g, const char* phrase) { cases.push_back({what, g.b, phrase}); };
    const int64_t big = int64_t{1} << 32;

    add("empty", GgufBytes{}, "too small");
    add("short header", GgufBytes{}.raw("GGUF").u32(3), "too small");
    {
        GgufBytes g = valid_file();
        std::memcpy(g.b.data(), "GGJT", 4);
        add("wrong magic", g, "wrong magic 'GGJT'");
        g.b[0] = 0;
        add("binary magic", g, "wrong magic '\\x00GJT'");
    }
    add("version 1", GgufBytes{}.header(0, 0, 1), "unsupported GGUF version 1");
    add("big-endian", GgufBytes{}.header(0, 0, 0x03000000), "big-endian");
    add("absurd n_kv", GgufBytes{}.header(0, 1ull << 40).zeros(64), "absurd metadata count");
    add("absurd n_tensors", GgufBytes{}.header(1ull << 40, 0).zeros(64), "absurd tensor count");
    add("key length beyond the file", GgufBytes{}.header(0, 1).u64(1000).raw("ab").zeros(12), "truncated: key");
    add("value cut short", GgufBytes{}.header(0, 1).str("k").u32(10).u8(1).u8(2).u8(3), "truncated: value of key 'k'");
    add("string value beyond the file", GgufBytes{}.header(0, 1).str("k").u32(8).u64(99).zeros(8), "truncated: value of key 'k'");
    add("unknown value type", GgufBytes{}.header(0, 1).str("k").u32(13).zeros(16), "key 'k' has unknown value type 13");
    add("unknown array element type", GgufBytes{}.header(0, 1).str("k").u32(9).u32(77).u64(0).zeros(8),
        "array of unknown value type 77");
    add("array count beyond the file", GgufBytes{}.header(0, 1).str("k").u32(9).u32(4).u64(1ull << 60).zeros(8),
        "truncated: key 'k' claims 1152921504606846976 uint32 elements");
    {
        GgufBytes g;
        g.header(0, 1).str("deep").u32(9);
        for (int k = 0; k < gguf::kMaxArrayNesting; ++k) g.u32(9).u64(1);
        g.u32(0).u64(1).u8(1);
        add("array nesting too deep", g, "array nesting too deep");
    }
    add("bool not 0 or 1", GgufBytes{}.header(0, 1).str("b").u32(7).u8(2).zeros(8), "bool value 2");
    add("duplicate key", GgufBytes{}.header(0, 2).kv_u32("a", 1).kv_u32("a", 2), "duplicate metadata key 'a'");
    add("control bytes in a key are escaped", GgufBytes{}.header(0, 2).kv_u32("a\nb", 1).kv_u32("a\nb", 2),
        "duplicate metadata key 'a\\x0ab'");
    add("alignment not a power of two", GgufBytes{}.header(0, 1).kv_u32("general.alignment", 48),
        "general.alignment 48 is not a power of two");
    add("alignment zero", GgufBytes{}.header(0, 1).kv_u32("general.alignment", 0), "is not a power of two");
    add("alignment of the wrong type", GgufBytes{}.header(0, 1).str("general.alignment").u32(10).u64(32),
        "general.alignment has type uint64, expected uint32");
    {
        GgufBytes g;
        g.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad_to(32).zeros(64);
        add("duplicate tensor", g, "duplicate tensor name 'w'");
    }
    add("n_dims 0", GgufBytes{}.header(1, 0).tensor("w", {}, 0, 0).zeros(64), "tensor 'w' has n_dims 0");
    add("n_dims 5", GgufBytes{}.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).zeros(64), "tensor 'w' has n_dims 5");
    add("negative dim", GgufBytes{}.header(1, 0).tensor("w", {8, -2}, 0, 0).zeros(64),
        "ne[1] = -2 (must be positive)");
    add("zero dim", GgufBytes{}.header(1, 0).tensor("w", {0}, 0, 0).zeros(64), "ne[0] = 0 (must be positive)");
    add("element count overflow", GgufBytes{}.header(1, 0).tensor("w", {big, big, big}, 0, 0).zeros(64),
        "element count overflows");
    add("byte size overflow", GgufBytes{}.header(1, 0).tensor("w", {big, big / 4}, 0, 0).zeros(64),
        "byte size overflows");
    add("unknown tensor type", GgufBytes{}.header(1, 0).tensor("w", {32}, 3, 0).zeros(64),
        "unsupported tensor type 3");
    add("row not a multiple of the block", GgufBytes{}.header(1, 0).tensor("w", {33}, 8, 0).zeros(64),
        "row length 33, not a multiple of the block size 32 of type q8_0");
    add("offset not aligned", GgufBytes{}.header(1, 0).tensor("w", {8}, 0, 4).pad_to(32).zeros(64),
        "offset 4 is not a multiple of the alignment 32");
    add("tensor beyond the end", GgufBytes{}.header(1, 0).tensor("w", {8, 2}, 0, 0).pad_to(32).zeros(63),
        "tensor 'w' data (64 bytes at offset 0");
    add("offset far beyond the end", GgufBytes{}.header(1, 0).tensor("w", {8}, 0, 1ull << 63).pad_to(32).zeros(32),
        "beyond the end of the file");
    add("no data section at all", GgufBytes{}.header(1, 0).tensor("w", {8}, 0, 0), "beyond the end of the file");
    {
        GgufBytes g;
        g.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad_to(32).zeros(128);
        add("overlapping tensors", g, "tensors 'a' and 'b' overlap");
    }
    add("truncated tensor info", GgufBytes{}.header(1, 0).str("wwwwwwwwwwwwwwww").u32(2).i64(8),
        "truncated: shape of tensor 'wwwwwwwwwwwwwwww'");

    for (const Case& c : cases) {
        INFO(c.what);
        CHECK_THAT(parse_error(c.bytes), Catch::Contains(c.phrase));
    }
    // Messages are one line.
    for (const Case& c : cases) CHECK(parse_error(c.bytes).find('\n') == std::string::npos);
}

TEST_CASE("every truncation of a valid file raises specd::Error", "[gguf]") {
    const std::vector<uint8_t> t0 = random_bytes(64 * 34 / 32, 9);  // q8_0 {64}
    const std::vector<uint8_t> t1 = random_bytes(8 * 4, 10);        // f32 {8}: ends exactly on the alignment
    gguf::Writer w;
    w.set("general.architecture", Value::str("llama"));
    w.set("list", Value::string_array({"a", "bc", ""}));
    w.set("nest", Value::make_array(ValueType::ARRAY, {Value::f32_array({1, 2})}));
    w.set("n", Value::u64(5));
    w.add_tensor("t0", {64}, TensorType::Q8_0, t0.data(), t0.size());
    w.add_tensor("t1", {8}, TensorType::F32, t1.data(), t1.size());
    const std::string path = temp_file("truncate.gguf");
    w.write(path);
    const std::vector<uint8_t> bytes = read_bytes(path);
    std::filesystem::remove(path);
    REQUIRE_NOTHROW(parse(bytes));
    for (size_t n = 0; n < bytes.size(); ++n) {
        INFO("prefix of " << n << " bytes");
        const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
        CHECK_THROWS_AS(parse(prefix), Error);
    }
}

TEST_CASE("open() names the path for missing, empty and non-regular files", "[gguf]") {
    CHECK_THROWS_WITH(gguf::File::open("/nonexistent/model.gguf"),
                      Catch::Contains("/nonexistent/model.gguf") && Catch::Contains("No such file or directory"));
    const std::string empty = temp_file("empty.gguf");
    write_bytes(empty, {});
    CHECK_THROWS_WITH(gguf::File::open(empty), Catch::Contains(empty) && Catch::Contains("too small"));
    std::filesystem::remove(empty);
    CHECK_THROWS_WITH(gguf::File::open(std::filesystem::temp_directory_path().string()),
                      Catch::Contains("not a regular file"));
    const std::string bad = temp_file("bad.gguf");
    write_bytes(bad, GgufBytes{}.header(0, 0, 7).b);
    CHECK_THROWS_WITH(gguf::File::open(bad), Catch::StartsWith(bad + ": unsupported GGUF version 7"));
    std::filesystem::remove(bad);
}
