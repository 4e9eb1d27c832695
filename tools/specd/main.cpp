// specd — one binary, subcommands per job (generate, bench, convert, ...).
#include <cstdio>
#include <exception>

#include "engine/error.h"
#include "tools/specd/commands.h"
#include "tools/specd/spec_setup.h"

int main(int argc, char** argv) {
    CLI::App app{"specd — lossless speculative decoding runtime"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "specd 0.1.0");
    specd::cli::register_model_commands(app);
    specd::cli::register_inflate_command(app);
    specd::cli::register_tokenize_command(app);
    specd::cli::register_generate_commands(app);
    specd::cli::register_bench_spec_command(app);
    specd::cli::register_serve_command(app);
    specd::cli::register_ops_commands(app);
    specd::cli::register_node_command(app);
    specd::cli::register_bench_wire_command(app);
    specd::cli::register_bench_chat_command(app);
    specd::cli::rewrite_llama_style_flags(argc, argv);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const specd::Error& e) {
        std::fprintf(stderr, "specd: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "specd: internal error: %s\n", e.what());
        return 2;
    }
    return 0;
}
