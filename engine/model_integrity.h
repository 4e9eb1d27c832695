// Model file integrity, checked before serving and by `specd verify`: the
// GGUF structure (header, metadata, every tensor inside the file: a
// truncated download fails here), every quantised block's scale finite,
// and, when a hash is known, the file's sha256. The hash comes from the configuration or from a MODEL.sha256 file
// next to the model (sha256sum's format: "HEX  NAME").
#pragma once

#include <cstdint>
#include <string>

namespace specd {

struct ModelIntegrity {
    uint32_t gguf_version = 0;
    size_t n_tensors = 0;
    uint64_t file_bytes = 0;
    std::string sha256;         // computed hash; empty when no hash was known and none was asked for
    std::string expected;       // the hash it was checked against; empty: not checked
    std::string expected_from;  // "configured" or the .sha256 file's path
};

// PATH + ".sha256".
std::string sha256_sidecar_path(const std::string& model_path);

// Validates the structure, then the hash when `expected_sha256` (64 hex) is
// given or the sidecar exists; `always_hash` computes it even without one.
// specd::Error, one line naming the file and the failure, when the file is
// missing, not GGUF, truncated ("weights incomplete or path wrong"), the
// sidecar is malformed, or the hash differs.
ModelIntegrity verify_model_file(const std::string& path, const std::string& expected_sha256 = "", bool always_hash = false);

// Writes PATH.sha256 ("HEX  BASENAME\n", as sha256sum) and returns its path.
std::string write_sha256_sidecar(const std::string& model_path, const std::string& sha256_hex);

}  // namespace specd
