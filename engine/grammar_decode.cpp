#include "engine/grammar_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace specd {

namespace {
// accept_token for any id: those past the tokenizer's vocabulary (a
// model's padding) are refused.
bool accepts(GrammarMatcher& m, const Tokenizer& tok, int32_t id) {
    return id >= 0 && id < tok.n_vocab() && m.accept_token(tok, id);
}
}  // namespace

std::shared_ptr<const Grammar> compile_request_grammar(std::string_view gbnf) { return Grammar::parse(gbnf, "root"); }

size_t mask_row(const GrammarMatcher& m, const TokenTrie& trie, float* row, int32_t n_vocab, std::vector<uint8_t>& allowed) {
    m.allowed_tokens(trie, allowed);
    size_t n = 0;
    for (size_t id = 0; id < static_cast<size_t>(n_vocab); ++id) {
        if (id < allowed.size() && allowed[id]) {
            ++n;
        } else {
            row[id] = -INFINITY;
        }
    }
    return n;
}

bool mask_rows(GrammarMatcher& m, const Tokenizer& tok, const TokenTrie& trie, std::span<const int32_t> drafted,
               const float* rows, int32_t n_vocab, std::vector<float>& out, std::vector<uint8_t>& allowed) {
    const size_t V = static_cast<size_t>(n_vocab);
    const size_t n_rows = drafted.size() + 1;
    out.resize(n_rows * V);
    std::memcpy(out.data(), rows, n_rows * V * sizeof(float));
    const GrammarMatcher::Position start = m.position();
    bool ok = true;
    for (size_t i = 0; i < n_rows; ++i) {
        if (mask_row(m, trie, out.data() + i * V, n_vocab, allowed) == 0) {
            ok = false;
            break;
        }
        if (i == drafted.size() || !accepts(m, tok, drafted[i])) break;
    }
    m.restore(start);
    return ok;
}

size_t grammar_prefix(GrammarMatcher& m, const Tokenizer& tok, std::span<const int32_t> drafted) {
    const GrammarMatcher::Position start = m.position();
    size_t n = 0;
    while (n < drafted.size() && accepts(m, tok, drafted[n])) ++n;
    m.restore(start);
    return n;
}

bool GrammarTracker::sync(const std::string& gbnf, std::span<const int32_t> context, int32_t n_prompt, const Tokenizer& tok) {
    if (gbnf != text_) {
        text_ = gbnf;
        matcher_.reset();
        fed_.clear();
        broken_ = false;
        try {
            matcher_ = std::make_unique<GrammarMatcher>(compile_request_grammar(gbnf));
        } catch (const Error&) {
            broken_ = true;
        }
    }
    if (broken_) return false;
    if (n_prompt < 0 || static_cast<size_t>(n_prompt) > context.size()) return false;
    const std::span<const int32_t> output = context.subspan(static_cast<size_t>(n_prompt));
    if (fed_.size() > output.size() || !std::equal(fed_.begin(), fed_.end(), output.begin())) {
        matcher_ = std::make_unique<GrammarMatcher>(compile_request_grammar(gbnf));
        fed_.clear();
    }
    for (size_t i = fed_.size(); i < output.size(); ++i) {
        if (!accepts(*matcher_, tok, output[i])) {
            // A context the grammar refuses (a pipelined draft's guess): no
            // mask this time; the next context starts the matcher over.
            matcher_ = std::make_unique<GrammarMatcher>(compile_request_grammar(gbnf));
            fed_.clear();
            return false;
        }
        fed_.push_back(output[i]);
    }
    return true;
}

}  // namespace specd
