// The packed copies (kernels.h pack_weights) of a model's quantised weight
// matrices for one ISA's forward pass (AVX-512: q8_0, q4_0 and Q2_K..Q6_K in
// tiles of 16 rows; AVX2: q8_0 and q4_0 in tiles of 8): its one-row
// decoding then reads one linear stream per thread and transposes nothing
// (docs/BENCHMARKS.md, "packed weights"). Made once per model and ISA by
// the first ForwardPass (LlamaModel::packed_weights) and shared by every
// later one; the scalar reference and the GPU backend keep reading the
// file's layout. The copies take the packed matrices' bytes of anonymous
// memory; the file's pages of them leave the process (gguf::File::
// release_pages), so the resident size stays about the model's.
// SPECD_REPACK=0 (or off, false) turns it off.
//
// q8_0 is not packed where AMX is on (kernels.h amx_enabled): the AMX tiles
// read the file's layout, and they are what q8_0 verification uses there.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/thread_pool.h"

namespace specd {

class PackedWeights {
public:
    // Packs every matrix of `model` packable for `isa` (kernels.h
    // packable), the threads of `pool` splitting the matrices.
    static std::unique_ptr<PackedWeights> build(const LlamaModel& model, Isa isa, ThreadPool& pool);
    // The packed copy of the matrix whose file data is `data`, or nullptr.
    const void* find(const void* data) const;
    size_t bytes() const { return bytes_; }
    size_t matrices() const { return by_data_.size(); }
    Isa isa() const { return isa_; }

private:
    struct FreeAligned {
        void operator()(unsigned char* p) const;
    };
    std::unordered_map<const void*, const unsigned char*> by_data_;
    std::vector<std::unique_ptr<unsigned char, FreeAligned>> buffers_;  // one per packed matrix, 64-byte aligned
    size_t bytes_ = 0;
    Isa isa_ = Isa::Scalar;
};

// SPECD_REPACK: unset, 1, on or true packs; 0, off or false does not; any
// other value throws specd::Error.
bool repack_enabled();

}  // namespace specd
