// Where tests find the real model files: $SPECD_MODELS_DIR, else the
// repository's models/ (compiled in). Tests that need a model fail with a
// message saying how to fetch it: the suite is meant to run after
// tools/fetch-model.sh, so a missing model is a setup error, not a skip.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "engine/gguf.h"
#include "engine/model.h"

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

// Loads a fetched model, failing the test with the fetch hint if it is absent.
inline std::unique_ptr<LlamaModel> load(const std::string& file) {
    INFO("model " << model_path(file) << " (run tools/fetch-model.sh)");
    REQUIRE(model_exists(file));
    return LlamaModel::load(model_path(file));
}

// stories15M's GGUF, opened once: the family tests copy its tokenizer.*
// keys (a real SentencePiece vocabulary) into the models they write.
inline const gguf::File& stories_vocab() {
    static const gguf::File file = [] {
        INFO("vocabulary from " << model_path("stories15M-f32.gguf") << " (run tools/fetch-model.sh)");
        REQUIRE(model_exists("stories15M-f32.gguf"));
        return gguf::File::open(model_path("stories15M-f32.gguf"));
    }();
    return file;
}

}  // namespace specd::test
