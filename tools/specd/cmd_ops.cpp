// Operations commands: `specd config` (the effective configuration and where
// each value came from) and `specd verify MODEL` (GGUF structure and sha256).
#include <cstdio>
#include <memory>

#include "engine/error.h"
#include "engine/model_integrity.h"
#include "tools/specd/commands.h"
#include "tools/specd/config_flags.h"

namespace specd::cli {

namespace {

struct VerifyOptions {
    std::vector<std::string> models;
    std::string sha256;
    bool write = false;
};

void run_verify(const VerifyOptions& o) {
    if (!o.sha256.empty() && o.models.size() != 1) throw Error("verify: --sha256 names the hash of one model; give one MODEL");
    for (const std::string& path : o.models) {
        const ModelIntegrity r = verify_model_file(path, o.sha256, /*always_hash=*/true);
        std::printf("%s: GGUF v%u, %zu tensors, %llu bytes: structure ok\n", path.c_str(), r.gguf_version, r.n_tensors,
                    static_cast<unsigned long long>(r.file_bytes));
        if (!r.expected.empty()) std::printf("%s: sha256 %s matches %s\n", path.c_str(), r.sha256.c_str(), r.expected_from.c_str());
        else std::printf("%s: sha256 %s (no .sha256 file to check against)\n", path.c_str(), r.sha256.c_str());
        if (o.write) std::printf("%s: wrote %s\n", path.c_str(), write_sha256_sidecar(path, r.sha256).c_str());
    }
}

}  // namespace

void register_ops_commands(CLI::App& app) {
    auto flags = std::make_shared<ConfigFlags>();
    CLI::App* c = app.add_subcommand(
        "config", "print the effective configuration of `specd serve` with the same flags: each value and where it came from "
                  "(default < --config file < environment < flags); exits 1 naming a bad value");
    add_config_flags(c, *flags);
    auto as_json = std::make_shared<bool>(false);
    c->add_flag("--json", *as_json, "print a JSON array instead: key, env, flag, kind, value, source and allowed values of each field");
    c->callback([flags, as_json] {
        const ConfigLoader loader = load_config(*flags);
        std::fputs((*as_json ? loader.describe_json() : loader.describe()).c_str(), stdout);
        std::fflush(stdout);
        loader.finish();  // after the table, so a missing model still shows everything else
    });

    auto v = std::make_shared<VerifyOptions>();
    CLI::App* vc = app.add_subcommand("verify", "check model files: GGUF structure (truncation) and sha256 against MODEL.sha256");
    vc->add_option("models", v->models, "GGUF files")->required();
    vc->add_option("--sha256", v->sha256, "the expected sha256 (instead of MODEL.sha256)");
    vc->add_flag("--write", v->write, "write MODEL.sha256 (sha256sum's format) after the check");
    vc->callback([v] { run_verify(*v); });
}

}  // namespace specd::cli
