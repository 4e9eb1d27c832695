#include "engine/tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <string>
#include <unordered_map>

#include "engine/error.h"

namespace specd::bpe {

namespace {

void append_utf8(uint32_t cpt, std::string& out) {
    if (cpt < 0x80) {
        out += static_cast<char>(cpt);
    } else if (cpt < 0x800) {
        out += static_cast<char>(0xC0 | (cpt >> 6));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    } else {
        out += static_cast<char>(0xE0 | (cpt >> 12));
        out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    }
}

// Bytes of a UTF-8 character judged by its lead byte alone, as llama.cpp's
// unicode_len_utf8 (a stray continuation byte counts as one character).
size_t utf8_length(unsigned char lead) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

bool is_printable_latin1(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteTables {
    std::array<std::string, 256> text;     // byte → its character's UTF-8
    std::array<int16_t, 0x144> byte_of{};  // code point → byte, -1 for none (the characters end at U+0143)
    ByteTables() {
        byte_of.fill(-1);
        uint32_t next_free = 0x100;
        for (int b = 0; b < 256; ++b) {
            const uint32_t cpt = is_printable_latin1(b) ? static_cast<uint32_t>(b) : next_free++;
            append_utf8(cpt, text[static_cast<size_t>(b)]);
            byte_of[cpt] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& byte_tables() {
    static const ByteTables tables;
    return tables;
}

}  // namespace

std::string_view byte_to_text(uint8_t b) { return byte_tables().text[b]; }

bool text_to_bytes(std::string_view text, std::string& bytes) {
    const ByteTables& t = byte_tables();
    for (size_t i = 0; i < text.size();) {
        const auto b0 = static_cast<unsigned char>(text[i]);
        uint32_t cpt;
        if (b0 < 0x80) {
            cpt = b0;
            i += 1;
        } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
            cpt = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
            i += 2;
        } else {
            return false;  // three-byte characters and beyond stand for no byte
        }
        if (cpt >= t.byte_of.size() || t.byte_of[cpt] < 0) return false;
        bytes += static_cast<char>(t.byte_of[cpt]);
    }
    return true;
}

// ---------------------------------------------------------------- Merger ---

Merger::Merger(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
               const std::function<int32_t(std::string_view)>& find_token, Alphabet alphabet)
    : alphabet_(alphabet) {
    if (tokens.size() > static_cast<size_t>(INT32_MAX / 2)) throw Error("tokenizer: too many tokens for BPE");
    n_vocab_ = static_cast<int32_t>(tokens.size());

    // Merge results that are no token get ids above the vocabulary; their
    // texts live in a deque, whose elements never move, so the map can view them.
    std::deque<std::string> synthetic_texts;
    std::unordered_map<std::string_view, int32_t> synthetic_ids;
    const auto symbol_of = [&](std::string_view text, bool create) -> int32_t {
        const int32_t id = find_token(text);
        if (id >= 0) return id;
        if (const auto it = synthetic_ids.find(text); it != synthetic_ids.end()) return it->second;
        if (!create) return -1;
        const auto symbol = static_cast<int32_t>(n_vocab_ + synthetic_texts.size());
        synthetic_texts.emplace_back(text);
        synthetic_ids.emplace(synthetic_texts.back(), symbol);
        return symbol;
    };

    if (alphabet_ == Alphabet::Bytes) {
        byte_symbol_.resize(256);
        for (int b = 0; b < 256; ++b) {
            byte_symbol_[static_cast<size_t>(b)] = symbol_of(byte_to_text(static_cast<uint8_t>(b)), true);
        }
    } else {
        static const char* hex = "0123456789ABCDEF";
        byte_token_.resize(256);
        for (int b = 0; b < 256; ++b) {
            const char spelled[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
            byte_token_[static_cast<size_t>(b)] = find_token(std::string_view(spelled, 6));
        }
        for (size_t id = 0; id < tokens.size(); ++id) {
            const std::string& t = tokens[id];
            if (!t.empty() && utf8_length(static_cast<unsigned char>(t[0])) == t.size()) {
                char_symbol_.emplace(t, static_cast<int32_t>(id));
            }
        }
    }

    // "left right", split at the first space after the first character
    // (llama.cpp: word.find(' ', 1)); a merge without one can never apply.
    struct Pair {
        std::string_view left, right;  // views into `merges`
        int32_t result = -1;           // the symbol of left + right
    };
    std::vector<Pair> pairs(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const std::string_view m = merges[i];
        const size_t space = m.find(' ', 1);
        if (space == std::string_view::npos) continue;
        pairs[i].left = m.substr(0, space);
        pairs[i].right = m.substr(space + 1);
    }
    // Every result first: a merge may use the result of a later one.
    std::string joined;
    for (Pair& p : pairs) {
        if (p.left.empty() || p.right.empty()) continue;
        joined.assign(p.left).append(p.right);
        p.result = symbol_of(joined, true);
    }

    if (merges.size() > static_cast<size_t>(INT32_MAX / 2)) throw Error("tokenizer: too many merges");
    size_t capacity = 16;
    int log2_capacity = 4;
    while (capacity < merges.size() * 2) {
        capacity *= 2;
        ++log2_capacity;
    }
    table_.assign(capacity, Entry{kEmpty, 0, 0});
    mask_ = capacity - 1;
    shift_ = 64 - log2_capacity;
    for (size_t i = 0; i < pairs.size(); ++i) {
        const Pair& p = pairs[i];
        if (p.result < 0) continue;
        const int32_t left = symbol_of(p.left, false);
        const int32_t right = symbol_of(p.right, false);
        if (left < 0 || right < 0) continue;  // a side that no word can ever hold
        if (find(left, right)) continue;      // a duplicate: the first rank stays
        insert(left, right, static_cast<int32_t>(i), p.result);
        ++n_merges_;
    }

    // A symbol that is no token comes out as the tokens of its single bytes
    // (llama.cpp looks up each byte of the symbol's text as a token text, or
    // as "<0xXX>" for Utf8).
    fallback_.resize(synthetic_texts.size());
    for (size_t s = 0; s < synthetic_texts.size(); ++s) {
        for (const char c : synthetic_texts[s]) {
            const int32_t id = alphabet_ == Alphabet::Bytes ? find_token(std::string_view(&c, 1))
                                                            : byte_token_[static_cast<unsigned char>(c)];
            if (id >= 0) fallback_[s].push_back(id);
        }
    }
}

void Merger::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
    symbols.clear();
    if (alphabet_ == Alphabet::Bytes) {
        symbols.resize(word.size());
        for (size_t i = 0; i < word.size(); ++i) symbols[i] = byte_symbol_[static_cast<unsigned char>(word[i])];
        return;
    }
    thread_local std::string key;
    for (size_t i = 0; i < word.size();) {
        const size_t len = std::min(utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
        key.assign(word.substr(i, len));
        const auto it = char_symbol_.find(key);
        symbols.push_back(it == char_symbol_.end() ? -1 - static_cast<int32_t>(i) : it->second);
        i += len;
    }
}

namespace {

inline uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Fibonacci hashing: the top bits of the product depend on every bit of the key.
inline uint64_t slot_of(uint64_t key, int shift) { return (key * 0x9E3779B97F4A7C15ull) >> shift; }

}  // namespace

const Merger::Entry* Merger::find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;  // a character that is no token (and -1, -1 would be kEmpty)
    const uint64_t key = pair_key(left, right);
    for (uint64_t slot = slot_of(key, shift_);; slot = (slot + 1) & mask_) {
        const Entry& e = table_[slot];
        if (e.key == key) return &e;
        if (e.key == kEmpty) return nullptr;
    }
}

void Merger::insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
    const uint64_t key = pair_key(left, right);
    uint64_t slot = slot_of(key, shift_);
    while (table_[slot].key != kEmpty) slot = (slot + 1) & mask_;
    table_[slot] = Entry{key, rank, result};
}

void Merger::emit(int32_t symbol, std::string_view word, std::vector<int32_t>& out) const {
    if (symbol < 0) {  // a character that is no token: its "<0xXX>" byte tokens
        const auto offset = static_cast<size_t>(-1 - symbol);
        const size_t len = std::min(utf8_length(static_cast<unsigned char>(word[offset])), word.size() - offset);
        for (size_t k = 0; k < len; ++k) {
            const int32_t id = byte_token_[static_cast<unsigned char>(word[offset + k])];
            if (id >= 0) out.push_back(id);
        }
        return;
    }
    if (symbol < n_vocab_) {
        out.push_back(symbol);
        return;
    }
    const std::vector<int32_t>& ids = fallback_[static_cast<size_t>(symbol - n_vocab_)];
    out.insert(out.end(), ids.begin(), ids.end());
}

void Merger::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() <= kScanMaxBytes) {
        encode_word_scan(word, out);
    } else {
        encode_word_queue(word, out);
    }
}

// Repeatedly merges the lowest-ranked adjacent pair, the leftmost of equals
// (llama.cpp's queue order), keeping each pair's rank in an array.
void Merger::encode_word_scan(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    if (n == 0) return;
    thread_local std::vector<int32_t> symbols, ranks, results;  // (len), (len - 1), (len - 1)
    initial_symbols(word, symbols);
    const size_t n_symbols = symbols.size();
    if (n_symbols > 1) {
        ranks.resize(n_symbols - 1);
        results.resize(n_symbols - 1);
        const auto rank_pair = [&](size_t i) {
            const Entry* e = find(symbols[i], symbols[i + 1]);
            ranks[i] = e ? e->rank : INT32_MAX;
            results[i] = e ? e->result : -1;
        };
        for (size_t i = 0; i + 1 < n_symbols; ++i) rank_pair(i);
        size_t len = n_symbols;
        while (len > 1) {
            int32_t best = INT32_MAX;
            size_t at = 0;
            for (size_t i = 0; i + 1 < len; ++i) {
                if (ranks[i] < best) {
                    best = ranks[i];
                    at = i;
                }
            }
            if (best == INT32_MAX) break;
            symbols[at] = results[at];
            for (size_t i = at + 1; i + 1 < len; ++i) symbols[i] = symbols[i + 1];
            for (size_t i = at; i + 2 < len; ++i) {
                ranks[i] = ranks[i + 1];
                results[i] = results[i + 1];
            }
            --len;
            if (at > 0) rank_pair(at - 1);
            if (at + 1 < len) rank_pair(at);
        }
        symbols.resize(len);
    }
    for (const int32_t s : symbols) emit(s, word, out);
}

// The same merges with a linked list of symbols and a queue of candidate
// pairs, as llama.cpp does: O(n log n) for long words.
void Merger::encode_word_queue(std::string_view word, std::vector<int32_t>& out) const {
    const size_t n = word.size();
    if (n == 0) return;
    if (n >= static_cast<size_t>(INT32_MAX)) throw Error("tokenizer: a word of 2 GiB or more");
    struct Node {
        int32_t prev, next;  // -1: none
        int32_t symbol;
        bool alive;          // false once merged into its left neighbour
    };
    struct Candidate {
        int32_t rank;
        int32_t left, right;               // node indices
        int32_t left_symbol, right_symbol;  // their symbols when queued: a change makes it stale
        int32_t result;
    };
    struct Later {  // the queue's top: lowest rank, then leftmost
        bool operator()(const Candidate& a, const Candidate& b) const {
            return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
        }
    };
    thread_local std::vector<Node> nodes;
    thread_local std::vector<int32_t> start;
    thread_local std::vector<Candidate> heap;  // std::push_heap order under Later
    initial_symbols(word, start);
    const size_t n_symbols = start.size();
    nodes.resize(n_symbols);
    for (size_t i = 0; i < n_symbols; ++i) {
        const int32_t next = i + 1 == n_symbols ? -1 : static_cast<int32_t>(i + 1);
        nodes[i] = Node{static_cast<int32_t>(i) - 1, next, start[i], true};
    }
    heap.clear();
    const auto offer = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const int32_t ls = nodes[static_cast<size_t>(left)].symbol;
        const int32_t rs = nodes[static_cast<size_t>(right)].symbol;
        if (const Entry* e = find(ls, rs)) {
            heap.push_back(Candidate{e->rank, left, right, ls, rs, e->result});
            std::push_heap(heap.begin(), heap.end(), Later{});
        }
    };
    for (size_t i = 0; i + 1 < n_symbols; ++i) offer(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), Later{});
        const Candidate c = heap.back();
        heap.pop_back();
        Node& left = nodes[static_cast<size_t>(c.left)];
        Node& right = nodes[static_cast<size_t>(c.right)];
        const bool stale = !left.alive || !right.alive || left.next != c.right || left.symbol != c.left_symbol ||
                           right.symbol != c.right_symbol;
        if (stale) continue;
        left.symbol = c.result;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) nodes[static_cast<size_t>(right.next)].prev = c.left;
        offer(left.prev, c.left);
        offer(c.left, left.next);
    }
    for (int32_t i = 0; i >= 0; i = nodes[static_cast<size_t>(i)].next) {
        emit(nodes[static_cast<size_t>(i)].symbol, word, out);
    }
}

}  // namespace specd::bpe
