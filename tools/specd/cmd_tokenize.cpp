// specd tokenize: the tokens of a text, printed as llama-tokenize does.
// Reads only the model's metadata (the vocabulary), never its weights.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "tools/specd/commands.h"

namespace specd::cli {

namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    bool ids_only = false;       // print [1, 2, 3] instead of one line per token
    bool no_bos = false;         // never add the BOS
    bool parse_special = false;  // "<s>" in the text becomes the control token
};

void run_tokenize(const TokenizeOptions& o) {
    const gguf::File file = gguf::File::open(o.model);
    const Tokenizer tok = Tokenizer::from_gguf(file);
    const std::vector<int32_t> ids = tok.encode(o.prompt, tok.add_bos() && !o.no_bos, o.parse_special);
    if (o.ids_only) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) line += ", ";
            line += std::to_string(ids[i]);
        }
        std::printf("%s]\n", line.c_str());
        return;
    }
    for (const int32_t id : ids) {
        // Specials rendered, raw bytes as they are: llama-tokenize's output.
        const std::string piece = tok.token_to_piece(id, true);
        std::printf("%6d -> '", id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::printf("'\n");
    }
}

}  // namespace

void register_tokenize_command(CLI::App& app) {
    auto options = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the tokens of a text (as llama-tokenize)");
    cmd->add_option("-m,--model", options->model, "GGUF model file (only its vocabulary is read)")->required();
    cmd->add_option("-p,--prompt", options->prompt, "text to tokenize")->required();
    cmd->add_flag("--ids", options->ids_only, "print only the ids, as [1, 2, 3]");
    cmd->add_flag("--no-bos", options->no_bos, "do not add the BOS token");
    cmd->add_flag("--parse-special", options->parse_special,
                  "recognise control tokens such as <s> written in the text");
    cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace specd::cli
