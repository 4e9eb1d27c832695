// SHA-256 against the FIPS 180-4 test vectors and sha256sum, and the model
// integrity check: a good model passes, a truncated one, a flipped byte and
// a wrong or malformed .sha256 are refused with an error that says so.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/model_integrity.h"
#include "engine/sha256.h"
#include "support/models.h"

namespace fs = std::filesystem;
using specd::Error;

namespace {

// A scratch directory removed at scope exit.
struct ScratchDir {
    fs::path path;
    ScratchDir() {
        path = fs::temp_directory_path() / ("specd-integrity-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    static int& counter() {
        static int n = 0;
        return n;
    }
};

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

const char* kModel = "stories15M-q8_0.gguf";

}  // namespace

TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[sha256]") {
    CHECK(specd::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(specd::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(specd::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(specd::sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 fed in pieces of every size equals the one-shot hash", "[sha256]") {
    std::string data;
    for (int i = 0; i < 1000; ++i) data += static_cast<char>((i * 131 + 7) & 0xff);
    const std::string whole = specd::sha256_hex(data);
    for (size_t piece : {1, 3, 55, 56, 63, 64, 65, 127, 999}) {
        specd::Sha256 h;
        for (size_t at = 0; at < data.size(); at += piece) h.update(data.data() + at, std::min(piece, data.size() - at));
        INFO("piece " << piece);
        CHECK(h.hex() == whole);
    }
}

TEST_CASE("sha256 of a real model file equals sha256sum's", "[sha256][model]") {
    REQUIRE(specd::test::model_exists(kModel));
    const std::string path = specd::test::model_path(kModel);
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(("sha256sum '" + path + "'").c_str(), "r"), &pclose);
    REQUIRE(p);
    char line[256] = {};
    REQUIRE(std::fgets(line, sizeof line, p.get()) != nullptr);
    CHECK(specd::sha256_file_hex(path) == std::string(line, 64));
}

TEST_CASE("a complete model passes, and a written .sha256 is then checked and passes", "[integrity][model]") {
    ScratchDir dir;
    const std::string copy = (dir.path / kModel).string();
    fs::copy_file(specd::test::model_path(kModel), copy);
    const auto plain = specd::verify_model_file(copy);
    CHECK(plain.gguf_version == 3);
    CHECK(plain.n_tensors > 0);
    CHECK(plain.expected.empty());
    CHECK(plain.sha256.empty());  // nothing to check against, so not hashed

    const auto hashed = specd::verify_model_file(copy, "", true);
    const std::string sidecar = specd::write_sha256_sidecar(copy, hashed.sha256);
    CHECK(read_all(sidecar) == hashed.sha256 + "  " + kModel + "\n");
    const auto checked = specd::verify_model_file(copy);
    CHECK(checked.expected == hashed.sha256);
    CHECK(checked.expected_from == sidecar);
    CHECK(specd::verify_model_file(copy, hashed.sha256).expected_from == "configured");
}

TEST_CASE("a truncated model is refused as incomplete", "[integrity][model]") {
    ScratchDir dir;
    const std::string bytes = read_all(specd::test::model_path(kModel));
    const std::string cut = (dir.path / "cut.gguf").string();
    for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{100}, size_t{3}}) {
        write_all(cut, bytes.substr(0, keep));
        const std::string err = error_of([&] { specd::verify_model_file(cut); });
        INFO("kept " << keep << " bytes: " << err);
        CHECK(err.find("weights incomplete or path wrong") != std::string::npos);
        CHECK(err.find("cut.gguf") != std::string::npos);
    }
}

TEST_CASE("a flipped byte in the weights fails the sha256 check, naming both hashes", "[integrity][model]") {
    ScratchDir dir;
    const std::string original = specd::test::model_path(kModel);
    std::string bytes = read_all(original);
    const std::string good_hash = specd::sha256_hex(bytes);
    bytes[bytes.size() - 100] ^= 0x01;  // inside the last tensor: the structure stays valid
    const std::string flipped = (dir.path / "flipped.gguf").string();
    write_all(flipped, bytes);
    specd::write_sha256_sidecar(flipped, good_hash);
    const std::string err = error_of([&] { specd::verify_model_file(flipped); });
    CHECK(err.find("sha256 mismatch") != std::string::npos);
    CHECK(err.find(good_hash) != std::string::npos);
    CHECK(err.find(specd::sha256_hex(bytes)) != std::string::npos);
    // A configured hash wins over the sidecar and is checked the same way.
    CHECK(error_of([&] { specd::verify_model_file(flipped, std::string(64, 'a')); }).find("configured says aaaa") != std::string::npos);
}

TEST_CASE("a missing model, a malformed .sha256 and a non-hex configured hash are refused", "[integrity]") {
    ScratchDir dir;
    CHECK(error_of([&] { specd::verify_model_file((dir.path / "absent.gguf").string()); }).find("no such model file") !=
          std::string::npos);
    const std::string copy = (dir.path / kModel).string();
    fs::copy_file(specd::test::model_path(kModel), copy);
    write_all(copy + ".sha256", "not-a-hash  x\n");
    CHECK(error_of([&] { specd::verify_model_file(copy); }).find("not a sha256 hash file") != std::string::npos);
    CHECK(error_of([&] { specd::verify_model_file(copy, "xyz"); }).find("not 64 hex digits") != std::string::npos);
    write_all((dir.path / "text.gguf").string(), "hello, this is not a model");
    CHECK(error_of([&] { specd::verify_model_file((dir.path / "text.gguf").string()); }).find("weights incomplete or path wrong") !=
          std::string::npos);
}
