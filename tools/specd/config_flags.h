// The command-line side of config/runtime_config.h: every field's flag on a
// subcommand, collected as text and applied after the file and the
// environment (later wins: defaults, file, environment, flags).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "config/runtime_config.h"

namespace specd::cli {

struct ConfigFlags {
    std::string config_file;                       // --config FILE (else SPECD_CONFIG)
    std::map<std::string, std::string> values;     // field key → text from its flag (stable addresses for CLI11)
    std::vector<std::pair<std::string, CLI::Option*>> options;  // field key → its option, to see which were given
};

// Registers --config and every field's flag on `cmd`.
void add_config_flags(CLI::App* cmd, ConfigFlags& flags);
// Defaults → file → environment → given flags; throws specd::Error naming
// the key, value and source of the first bad value. Call finish() on it.
ConfigLoader load_config(const ConfigFlags& flags);

}  // namespace specd::cli
