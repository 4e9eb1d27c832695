// The pieces of a vocabulary as a byte trie: tokens that share a prefix
// share a path, so a constraint that refuses a byte refuses every token
// below it at once (GrammarMatcher::allowed_tokens). Built once per model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specd {

class Tokenizer;

class TokenTrie {
public:
    // Every token with a non-empty piece (Tokenizer::piece_view) that does
    // not end generation; end-of-generation tokens are listed apart.
    explicit TokenTrie(const Tokenizer& tok);

    struct Edge {
        unsigned char byte;
        int32_t node;
    };
    // Node 0 is the root (the empty prefix).
    std::span<const Edge> children(int32_t node) const;
    // The tokens whose piece is exactly the path to `node`.
    std::span<const int32_t> tokens_at(int32_t node) const;
    std::span<const int32_t> end_of_generation() const { return eog_; }
    int32_t n_vocab() const { return n_vocab_; }
    int32_t n_nodes() const { return static_cast<int32_t>(child_begin_.size()) - 1; }

private:
    int32_t n_vocab_ = 0;
    // CSR layout: node n's edges are edges_[child_begin_[n], child_begin_[n+1]),
    // sorted by byte; its tokens token_ids_[token_begin_[n], token_begin_[n+1]).
    std::vector<Edge> edges_;            // (n_nodes - 1)
    std::vector<int32_t> child_begin_;   // (n_nodes + 1)
    std::vector<int32_t> token_ids_;     // (tokens with a piece)
    std::vector<int32_t> token_begin_;   // (n_nodes + 1)
    std::vector<int32_t> eog_;           // end-of-generation ids
};

}  // namespace specd
