#include "engine/role_input.h"

#include <string>

#include "engine/error.h"

namespace specd {

void RoleInput::init(std::span<const TensorType> types, int max_rows, int64_t k) {
    inputs_.clear();
    k_ = k;
    for (TensorType t : types) {
        bool served = false;
        for (const PreparedInput& in : inputs_) served = served || in.serves(t);
        if (served) continue;
        PreparedInput& in = inputs_.emplace_back();
        in.reserve(max_rows, k);
        in.set_shape(t, 0, k);
    }
}

void RoleInput::set_rows(int rows) {
    for (PreparedInput& in : inputs_) in.set_shape(in.weight_type(), rows, k_);
}

void RoleInput::prepare_rows(Isa isa, const float* x, int64_t ldx, int row_begin, int row_end) {
    for (PreparedInput& in : inputs_) in.prepare_rows(isa, x, ldx, row_begin, row_end);
}

const PreparedInput& RoleInput::for_type(TensorType type) const {
    for (const PreparedInput& in : inputs_) {
        if (in.serves(type)) return in;
    }
    throw Error(std::string("forward: no prepared activations for ") + tensor_type_name(type) + " weights");
}

}  // namespace specd
