// SHA-256 (FIPS 180-4), for verifying model files against published hashes.
//
//   Sha256 h;
//   h.update(data, n);            // any number of times
//   std::string hex = h.hex();    // 64 lowercase hex digits; ends the hash
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specd {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    // The digest of everything updated so far; the object is spent after.
    std::array<uint8_t, 32> digest();
    std::string hex();

private:
    void compress(const uint8_t* block);  // one 64-byte block
    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> buffer_;      // a partial block: buffered_ bytes
    size_t buffered_ = 0;
    uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// Streams the file; specd::Error naming the path when it can't be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace specd
