// The activations of one matmul role of the forward pass (q/k/v, the output
// projection, gate/up, down, the classifier), prepared once per layer in
// every layout the role's weights need over all layers. Most files need one;
// files whose quantizer mixed types that read different layouts need two
// (llama.cpp's Q4_K_M puts q8_0 into some layers' attn_v next to q5_0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels.h"

namespace specd {

class RoleInput {
public:
    // types: the weight types of the role over every layer (repeats are
    // fine). Allocates for up to max_rows rows of k elements per layout.
    void init(std::span<const TensorType> types, int max_rows, int64_t k);
    // PreparedInput::set_shape for every layout (single-threaded).
    void set_rows(int rows);
    // PreparedInput::prepare_rows for every layout (threads split the rows).
    void prepare_rows(Isa isa, const float* x, int64_t ldx, int row_begin, int row_end);
    // The layout that feeds weights of `type`; throws specd::Error for a
    // type init() was not given.
    const PreparedInput& for_type(TensorType type) const;
    size_t n_layouts() const { return inputs_.size(); }

private:
    std::vector<PreparedInput> inputs_;  // one per distinct layout
    int64_t k_ = 0;
};

}  // namespace specd
