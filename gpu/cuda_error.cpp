#include "gpu/cuda_error.h"

namespace specd::gpu {

std::string format_cuda_error(std::string_view library, std::string_view call, std::string_view file, int line, int code,
                              std::string_view name, std::string_view text) {
    // Only the file's name inside the repository matters to a reader.
    if (const size_t at = file.rfind("gpu/"); at != std::string_view::npos) file.remove_prefix(at);
    std::string out;
    out.append(library).append(": ").append(call).append(" failed at ").append(file).append(":").append(std::to_string(line));
    out.append(": ").append(text.empty() ? std::string_view("unknown error") : text).append(" (");
    if (!name.empty()) out.append(name).append(", ");
    out.append("error ").append(std::to_string(code)).append(")");
    return out;
}

}  // namespace specd::gpu
