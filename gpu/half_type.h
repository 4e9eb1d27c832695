// The 16-bit float type the GPU stores weights, activations fed to GEMMs
// and the KV pool in. A header of its own (C++17, no engine includes) so
// that nvcc-compiled files can include it.
#pragma once

namespace specd::gpu {

enum class HalfType { F16, BF16 };
const char* half_type_name(HalfType type);  // "f16", "bf16" (gpu/weight_convert.cpp)

}  // namespace specd::gpu
