// Where tests find the real model files: $SPECD_MODELS_DIR, else the
// repository's models/ (compiled in). Tests that need a model fail with a
// message saying how to fetch it: the suite is meant to run after
// tools/fetch-model.sh, so a missing model is a setup error, not a skip.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace specd::test {

inline std::string models_dir() {
    if (const char* env = std::getenv("SPECD_MODELS_DIR"); env && *env) return env;
#ifdef SPECD_MODELS_DIR_DEFAULT
    return SPECD_MODELS_DIR_DEFAULT;
#else
    return "models";
#endif
}

inline std::string model_path(const std::string& file) { return models_dir() + "/" + file; }

inline bool model_exists(const std::string& file) { return std::filesystem::exists(model_path(file)); }

}  // namespace specd::test
