#include "engine/model_integrity.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/sha256.h"
#include "engine/tensor_type.h"

namespace specd {

namespace {

bool is_sha256_hex(const std::string& s) {
    return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The first word of the sidecar, which sha256sum writes as "HEX  NAME".
std::string read_sidecar(const std::string& sidecar) {
    std::ifstream in(sidecar);
    if (!in) throw Error(sidecar + ": cannot read the hash file");
    std::string first;
    in >> first;
    first = lower(first);
    if (!is_sha256_hex(first)) throw Error(sidecar + ": not a sha256 hash file (expected \"<64 hex digits>  <file name>\")");
    return first;
}

}  // namespace

std::string sha256_sidecar_path(const std::string& model_path) { return model_path + ".sha256"; }

ModelIntegrity verify_model_file(const std::string& path, const std::string& expected_sha256, bool always_hash) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such model file (path wrong?)");
    ModelIntegrity r;
    try {
        const gguf::File file = gguf::File::open(path);
        r.gguf_version = file.version();
        r.n_tensors = file.tensors().size();
        r.file_bytes = file.size();
        // A NaN or infinite block scale: structurally sound, numerically corrupt.
        for (const gguf::TensorInfo& t : file.tensors()) {
            const int64_t n_blocks = t.n_elements() / tensor_type_block_elements(t.type);
            if (const int64_t bad = tensor_first_nonfinite_block(t.type, t.data, n_blocks); bad >= 0) {
                throw Error(path + ": tensor '" + t.name + "' (" + tensor_type_name(t.type) + ") block " + std::to_string(bad) +
                            " has a NaN or infinite scale: the file is corrupt");
            }
        }
    } catch (const Error& e) {
        throw Error(std::string("model rejected (weights incomplete or path wrong): ") + e.what());
    }
    if (!expected_sha256.empty()) {
        r.expected = lower(expected_sha256);
        if (!is_sha256_hex(r.expected)) throw Error(path + ": the configured sha256 is not 64 hex digits");
        r.expected_from = "configured";
    } else if (const std::string sidecar = sha256_sidecar_path(path); std::filesystem::exists(sidecar, ec)) {
        r.expected = read_sidecar(sidecar);
        r.expected_from = sidecar;
    }
    if (!r.expected.empty() || always_hash) r.sha256 = sha256_file_hex(path);
    if (!r.expected.empty() && r.sha256 != r.expected)
        throw Error(path + ": sha256 mismatch (weights incomplete or corrupted): the file's is " + r.sha256 + ", " + r.expected_from +
                    " says " + r.expected);
    return r;
}

std::string write_sha256_sidecar(const std::string& model_path, const std::string& sha256_hex) {
    const std::string sidecar = sha256_sidecar_path(model_path);
    std::ofstream out(sidecar, std::ios::trunc);
    out << sha256_hex << "  " << std::filesystem::path(model_path).filename().string() << "\n";
    out.close();
    if (!out) throw Error(sidecar + ": cannot write the hash file");
    return sidecar;
}

}  // namespace specd
