#include "tools/specd/config_flags.h"

#include <unistd.h>  // environ

namespace specd::cli {

void add_config_flags(CLI::App* cmd, ConfigFlags& flags) {
    cmd->add_option("--config", flags.config_file, "JSON configuration file (keys as `specd config` lists; also SPECD_CONFIG)");
    for (const ConfigField& f : config_fields()) {
        if (!*f.flag) continue;
        std::string& slot = flags.values[f.key];
        const std::string help = std::string(f.help) + " [" + f.env + "]";
        CLI::Option* o = f.kind == ConfigField::Kind::boolean ? cmd->add_flag(f.flag, slot, help) : cmd->add_option(f.flag, slot, help);
        flags.options.emplace_back(f.key, o);
    }
}

ConfigLoader load_config(const ConfigFlags& flags) {
    ConfigLoader loader;
    const std::string file = !flags.config_file.empty() ? flags.config_file : config_file_from_environment();
    if (!file.empty()) loader.load_file(file);
    std::vector<std::string> env_names;
    for (char** entry = environ; entry && *entry; ++entry) {
        const std::string text = *entry;
        env_names.push_back(text.substr(0, text.find('=')));
    }
    ConfigLoader::check_environment_names(env_names);
    loader.load_environment();
    for (const auto& [key, option] : flags.options) {
        if (option->count() == 0) continue;
        // A negated boolean flag ("--no-spec") stores its own word; name the one given.
        std::string given = option->get_name();
        for (const std::string& name : option->get_lnames())
            if (flags.values.at(key) == "false" && name.rfind("no-", 0) == 0) given = "--" + name;
        loader.set(key, flags.values.at(key), "flag " + given);
    }
    return loader;
}

}  // namespace specd::cli
