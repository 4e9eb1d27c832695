#include "engine/model_family.h"

namespace specd {

const ModelFamily* find_model_family(std::string_view arch) {
    for (const ModelFamily& f : kModelFamilies) {
        if (f.arch == arch) return &f;
    }
    return nullptr;
}

std::string supported_architectures() {
    std::string out;
    for (const ModelFamily& f : kModelFamilies) {
        if (!out.empty()) out += ", ";
        out += f.arch;
    }
    return out;
}

}  // namespace specd
