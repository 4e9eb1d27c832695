// specd tokenize: the tokens of a text, printed as llama-tokenize does.
// Reads only the model's metadata (the vocabulary), never its weights.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
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
    std::vector<std::string> prompts;  // each tokenized on its own
    std::string file;                  // the text of a file, as one more prompt
    bool ids_only = false;             // print [1, 2, 3] instead of one line per token
    bool no_bos = false;               // never add the BOS
    bool parse_special = false;        // "<s>" in the text becomes the control token
    bool timing = false;               // say on stderr how long each text took
};

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read " + path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void print_tokens(const Tokenizer& tok, const std::vector<int32_t>& ids, bool ids_only) {
    if (ids_only) {
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

void run_tokenize(const TokenizeOptions& o) {
    if (o.prompts.empty() && o.file.empty()) throw Error("tokenize: give the text with -p/--prompt or -f/--file");
    const gguf::File file = gguf::File::open(o.model);
    const Tokenizer tok = Tokenizer::from_gguf(file);
    for (const std::string& warning : tok.vocab().warnings) {
        std::fprintf(stderr, "specd: warning: %s\n", warning.c_str());
    }
    std::vector<std::string> texts = o.prompts;
    if (!o.file.empty()) texts.push_back(read_text_file(o.file));
    for (const std::string& text : texts) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<int32_t> ids = tok.encode(text, tok.add_bos() && !o.no_bos, o.parse_special);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        print_tokens(tok, ids, o.ids_only);
        if (o.timing) {
            std::fprintf(stderr, "specd: tokenized %zu bytes into %zu tokens in %.3f ms (%.0f tokens/s)\n", text.size(),
                         ids.size(), seconds * 1e3, seconds > 0 ? static_cast<double>(ids.size()) / seconds : 0.0);
        }
    }
}

}  // namespace

void register_tokenize_command(CLI::App& app) {
    auto options = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the tokens of a text (as llama-tokenize)");
    cmd->add_option("-m,--model", options->model, "GGUF model file (only its vocabulary is read)")->required();
    cmd->add_option("-p,--prompt", options->prompts, "text to tokenize; repeat it for several texts, one output each");
    cmd->add_option("-f,--file", options->file, "tokenize the contents of this file (after any --prompt)");
    cmd->add_flag("--ids", options->ids_only, "print only the ids, as [1, 2, 3]");
    cmd->add_flag("--no-bos", options->no_bos, "do not add the BOS token");
    cmd->add_flag("--parse-special", options->parse_special,
                  "recognise control tokens such as <s> written in the text");
    cmd->add_flag("--timing", options->timing, "print on stderr the bytes, tokens and time of each text");
    cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace specd::cli
