// Each subcommand group registers itself on the top-level CLI11 app. A
// command's callback throws specd::Error for bad input; main() prints it as
// one line and exits with status 1.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace specd::cli {

void register_model_commands(CLI::App& app);     // convert, quantize, info (cmd_model.cpp)
void register_inflate_command(CLI::App& app);    // inflate (cmd_inflate.cpp)
void register_tokenize_command(CLI::App& app);   // tokenize (cmd_tokenize.cpp)
void register_generate_commands(CLI::App& app);  // generate, bench (cmd_generate.cpp)
void register_bench_spec_command(CLI::App& app); // bench-spec (cmd_bench_spec.cpp)
void register_serve_command(CLI::App& app);      // serve (cmd_serve.cpp)
void register_ops_commands(CLI::App& app);       // config, verify (cmd_ops.cpp)
void register_node_command(CLI::App& app);       // node (cmd_node.cpp)
void register_bench_wire_command(CLI::App& app); // bench-wire (cmd_bench_wire.cpp)
void register_bench_chat_command(CLI::App& app); // bench-chat (cmd_bench_chat.cpp)
// `specd bench --concurrency`: the in-process runtime under load (cmd_serve.cpp).
// `specd bench --url`: load over the network front end (cmd_bench_net.cpp).
void run_bench_net(const std::string& url, const std::string& target, const std::string& draft, const std::vector<int>& levels, int n,
                   int reps, int threads, const std::string& api_key, const std::string& device = "");
// `device`: --device (auto|cpu|cuda) for the in-process runtime; "" keeps
// the configured one (SPECD_DEVICE, else auto).
void run_bench_concurrency(const std::string& target, const std::string& draft, const std::vector<int>& levels, int n, int reps,
                           int threads, const std::string& device = "");

}  // namespace specd::cli
