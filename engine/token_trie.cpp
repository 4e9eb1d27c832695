#include "engine/token_trie.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "engine/tokenizer.h"

namespace specd {

TokenTrie::TokenTrie(const Tokenizer& tok) : n_vocab_(tok.n_vocab()) {
    // Build with maps, then flatten breadth first into the CSR arrays.
    struct Build {
        std::map<unsigned char, int32_t> next;
        std::vector<int32_t> tokens;
    };
    std::vector<Build> nodes(1);
    for (int32_t id = 0; id < n_vocab_; ++id) {
        if (tok.is_end_of_generation(id)) {
            eog_.push_back(id);
            continue;
        }
        const std::string_view piece = tok.piece_view(id);
        if (piece.empty()) continue;
        int32_t n = 0;
        for (const char ch : piece) {
            const unsigned char c = static_cast<unsigned char>(ch);
            auto it = nodes[static_cast<size_t>(n)].next.find(c);
            if (it == nodes[static_cast<size_t>(n)].next.end()) {
                nodes.emplace_back();
                it = nodes[static_cast<size_t>(n)].next.emplace(c, static_cast<int32_t>(nodes.size() - 1)).first;
            }
            n = it->second;
        }
        nodes[static_cast<size_t>(n)].tokens.push_back(id);
    }
    // Breadth-first renumbering keeps each node's children contiguous.
    std::vector<int32_t> order{0}, new_id(nodes.size(), -1);
    new_id[0] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        for (const auto& [byte, child] : nodes[static_cast<size_t>(order[i])].next) {
            new_id[static_cast<size_t>(child)] = static_cast<int32_t>(order.size());
            order.push_back(child);
        }
    }
    child_begin_.reserve(order.size() + 1);
    token_begin_.reserve(order.size() + 1);
    for (const int32_t old : order) {
        child_begin_.push_back(static_cast<int32_t>(edges_.size()));
        token_begin_.push_back(static_cast<int32_t>(token_ids_.size()));
        for (const auto& [byte, child] : nodes[static_cast<size_t>(old)].next) edges_.push_back({byte, new_id[static_cast<size_t>(child)]});
        const auto& t = nodes[static_cast<size_t>(old)].tokens;
        token_ids_.insert(token_ids_.end(), t.begin(), t.end());
    }
    child_begin_.push_back(static_cast<int32_t>(edges_.size()));
    token_begin_.push_back(static_cast<int32_t>(token_ids_.size()));
}

std::span<const TokenTrie::Edge> TokenTrie::children(int32_t node) const {
    const auto n = static_cast<size_t>(node);
    return std::span<const Edge>(edges_).subspan(static_cast<size_t>(child_begin_[n]),
                                                 static_cast<size_t>(child_begin_[n + 1] - child_begin_[n]));
}

std::span<const int32_t> TokenTrie::tokens_at(int32_t node) const {
    const auto n = static_cast<size_t>(node);
    return std::span<const int32_t>(token_ids_).subspan(static_cast<size_t>(token_begin_[n]),
                                                        static_cast<size_t>(token_begin_[n + 1] - token_begin_[n]));
}

}  // namespace specd
