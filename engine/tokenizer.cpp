#include "engine/tokenizer.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <queue>
#include <unordered_map>

#include "engine/error.h"
#include "engine/pretokenizer.h"
#include "engine/tokenizer_bpe.h"

namespace specd {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";   // "▁" U+2581, SentencePiece's space

std::string quoted(std::string_view text) {
    std::string q = "'";
    for (const char c : text) {
        const auto b = static_cast<unsigned char>(c);
        if (b < 0x20 || b == 0x7F) {
            static const char* hex = "0123456789ABCDEF";
            q += "\\x";
            q += hex[b >> 4];
            q += hex[b & 15];
        } else {
            q += c;
        }
    }
    return q + "'";
}

// Bytes of a UTF-8 character judged by its first byte alone, as llama.cpp's
// unicode_len_utf8 (a stray continuation byte counts as one character).
size_t utf8_char_len(unsigned char lead) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// "<0xXX>" → the byte, -1 if the text is not spelled so.
int parse_byte_token(std::string_view text) {
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
    const int hi = hex_digit(text[3]);
    const int lo = hex_digit(text[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::string result;
    result.reserve(s.size());
    size_t pos = 0;
    while (true) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        result.append(s, pos, hit - pos);
        result += to;
        pos = hit + from.size();
    }
    result.append(s, pos, std::string::npos);
    s = std::move(result);
}

constexpr uint8_t kStripLeft = 1, kStripRight = 2;

// C isspace in the "C" locale, as llama.cpp's strip attributes use it.
bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool is_special_type(TokenType t) {
    return t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined;
}

}  // namespace

struct Tokenizer::Impl {
    VocabData vocab;
    std::vector<std::string> pieces;                          // (n_vocab) decoded bytes, specials as their text
    std::unordered_map<std::string_view, int32_t> id_by_text; // keys view vocab.tokens (Impl never moves)
    std::array<int32_t, 256> byte_token{};                    // token for each byte value, -1 if none
    std::vector<int32_t> special_ids;                         // Control/Unknown/UserDefined, longest text first
    std::vector<uint8_t> ends_generation;                     // (n_vocab) 1 for eos, eot and eog_ids
    std::vector<uint8_t> strips;                              // (n_vocab) kStripLeft | kStripRight
    // Byte-level BPE only (null for SPM):
    std::unique_ptr<PreTokenizer> pre_tokenizer;
    std::unique_ptr<bpe::Merger> merger;

    TokenType type(int32_t id) const { return static_cast<TokenType>(vocab.token_types[static_cast<size_t>(id)]); }
    int32_t lookup(std::string_view text) const {
        const auto it = id_by_text.find(text);
        return it == id_by_text.end() ? -1 : it->second;
    }
    // A token the merge may produce: Normal or UserDefined. Control, Unknown
    // and Byte tokens are left out, as SentencePiece does (llama.cpp does
    // not), or plain text such as "<s" + ">" could merge into a control
    // token; Unused/Undefined ones too, as they would decode to nothing.
    int32_t lookup_mergeable(std::string_view text) const {
        const int32_t id = lookup(text);
        if (id < 0) return -1;
        const TokenType t = type(id);
        return t == TokenType::Normal || t == TokenType::UserDefined ? id : -1;
    }
    void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
    void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

void check_special_id(const char* name, int32_t id, int32_t n_vocab) {
    if (id < -1 || id >= n_vocab) {
        throw Error(std::string("tokenizer: ") + name + " " + std::to_string(id) + " is out of range (n_vocab " +
                    std::to_string(n_vocab) + ", -1 for none)");
    }
}

// A symbol of the SPM merge: a run of the normalised text, in a linked list.
struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t offset;  // into the normalised text
    uint32_t size;    // bytes; 0 once merged into its left neighbour
};

struct Bigram {
    int32_t left;
    int32_t right;
    float score;
    uint32_t size;  // left.size + right.size when queued: a mismatch means it went stale
};

// The queue's top is the highest score, the leftmost pair on ties.
struct BigramOrder {
    bool operator()(const Bigram& l, const Bigram& r) const {
        return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
};

}  // namespace

// SentencePiece BPE on one already normalised run of text (no special
// tokens inside), as llama.cpp's llm_tokenizer_spm_session except that merges
// never produce Control/Unknown/Byte tokens (see lookup_mergeable).
void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    if (text.size() >= static_cast<size_t>(INT32_MAX)) throw Error("tokenizer: the text is too long (2 GiB or more)");
    std::vector<Symbol> symbols;
    symbols.reserve(text.size());
    for (size_t offset = 0; offset < text.size();) {
        const size_t len = std::min(utf8_char_len(static_cast<unsigned char>(text[offset])), text.size() - offset);
        const auto index = static_cast<int32_t>(symbols.size());
        symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1, static_cast<uint32_t>(offset),
                           static_cast<uint32_t>(len)});
        offset += len;
    }

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    const auto try_add = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const Symbol& l = symbols[static_cast<size_t>(left)];
        const Symbol& r = symbols[static_cast<size_t>(right)];
        const int32_t id = lookup_mergeable(text.substr(l.offset, l.size + r.size));
        if (id < 0) return;
        queue.push({left, right, vocab.scores[static_cast<size_t>(id)], l.size + r.size});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram top = queue.top();
        queue.pop();
        Symbol& left = symbols[static_cast<size_t>(top.left)];
        Symbol& right = symbols[static_cast<size_t>(top.right)];
        // Either side changed since this pair was queued: it is stale.
        if (left.size == 0 || right.size == 0 || left.size + right.size != top.size) continue;
        left.size += right.size;
        right.size = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
        try_add(left.prev, top.left);
        try_add(top.left, left.next);
    }

    // Every merged symbol is a token; a lone character may not be: bytes then.
    for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
        const Symbol& s = symbols[static_cast<size_t>(i)];
        const std::string_view piece = text.substr(s.offset, s.size);
        const int32_t id = lookup_mergeable(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        const bool all_bytes = std::all_of(piece.begin(), piece.end(), [&](char c) {
            return byte_token[static_cast<unsigned char>(c)] >= 0;
        });
        if (all_bytes) {
            for (const char c : piece) out.push_back(byte_token[static_cast<unsigned char>(c)]);
        } else if (vocab.unk_id >= 0) {
            out.push_back(vocab.unk_id);  // one unknown per character, as SentencePiece without byte fallback
        } else {
            throw Error("tokenizer: cannot encode " + quoted(piece) +
                        ": the vocabulary has neither byte tokens for it nor an unknown token");
        }
    }
}

// Byte-level BPE on one run of text without special tokens, as llama.cpp's
// llm_tokenizer_bpe_session: pre-tokenize, then merge inside each word.
void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    const PreTokenizerTraits& traits = pre_tokenizer->traits();
    thread_local std::string escaped;
    if (traits.escape_spaces) {
        escaped.clear();
        for (const char c : text) {
            if (c == ' ') {
                escaped += kSpaceMark;
            } else {
                escaped += c;
            }
        }
        text = escaped;
    }
    thread_local std::string sanitized;
    if (sanitize_utf8(text, sanitized)) text = sanitized;
    thread_local std::vector<TextSpan> words;
    words.clear();
    pre_tokenizer->split(text, words);
    thread_local std::string byte_level;
    for (const TextSpan span : words) {
        const std::string_view word = text.substr(span.offset, span.size);
        if (traits.ignore_merges) {
            // A word that is a token as a whole is taken as it is (llama3, tekken).
            std::string_view whole = word;
            if (traits.byte_level) {
                byte_level.clear();
                for (const char c : word) byte_level += bpe::byte_to_text(static_cast<uint8_t>(c));
                whole = byte_level;
            }
            if (const int32_t id = lookup(whole); id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        if (traits.whole_newline_runs && word.find_first_not_of('\n') == std::string_view::npos) {
            if (const int32_t id = lookup(word); id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        merger->encode_word(word, out);
    }
}

Tokenizer::Tokenizer(VocabData v) {
    auto impl = std::make_shared<Impl>();
    const size_t n = v.tokens.size();
    if (n == 0) throw Error("tokenizer: the vocabulary is empty");
    if (n > static_cast<size_t>(INT32_MAX)) throw Error("tokenizer: the vocabulary has too many tokens");
    const auto n_vocab = static_cast<int32_t>(n);
    if (v.scores.empty()) v.scores.assign(n, 0.0f);
    if (v.token_types.empty()) v.token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
    if (v.scores.size() != n) {
        throw Error("tokenizer: " + std::to_string(v.scores.size()) + " scores for " + std::to_string(n) + " tokens");
    }
    if (v.token_types.size() != n) {
        throw Error("tokenizer: " + std::to_string(v.token_types.size()) + " token types for " + std::to_string(n) +
                    " tokens");
    }
    check_special_id("bos_id", v.bos_id, n_vocab);
    check_special_id("eos_id", v.eos_id, n_vocab);
    check_special_id("unk_id", v.unk_id, n_vocab);
    check_special_id("pad_id", v.pad_id, n_vocab);
    check_special_id("eot_id", v.eot_id, n_vocab);
    if (v.add_bos && v.bos_id < 0) throw Error("tokenizer: add_bos is set but there is no BOS token");
    if (v.add_eos && v.eos_id < 0) throw Error("tokenizer: add_eos is set but there is no EOS token");

    if (v.kind == VocabKind::Bpe) impl->pre_tokenizer = std::make_unique<PreTokenizer>(v.pre);
    const bool byte_level = impl->pre_tokenizer && impl->pre_tokenizer->traits().byte_level;
    impl->pieces.resize(n);
    impl->byte_token.fill(-1);
    impl->id_by_text.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string& text = v.tokens[i];
        const int32_t type = v.token_types[i];
        if (type < 0 || type > static_cast<int32_t>(TokenType::Byte)) {
            throw Error("tokenizer: token " + std::to_string(i) + " " + quoted(text) + " has unknown type " +
                        std::to_string(type) + " (expected 0..6)");
        }
        if (std::isnan(v.scores[i])) throw Error("tokenizer: token " + std::to_string(i) + " has a NaN score");
        std::string& piece = impl->pieces[i];
        switch (static_cast<TokenType>(type)) {
            case TokenType::Normal:
                if (byte_level) {
                    // A text with a character that stands for no byte decodes as it is written.
                    if (!bpe::text_to_bytes(text, piece)) piece = text;
                } else {
                    piece = text;
                    replace_all(piece, kSpaceMark, " ");
                }
                break;
            case TokenType::Byte: {
                const int byte = parse_byte_token(text);
                if (byte < 0) {
                    throw Error("tokenizer: byte token " + std::to_string(i) + " is spelled " + quoted(text) +
                                ", expected <0xXX>");
                }
                piece.assign(1, static_cast<char>(byte));
                break;
            }
            case TokenType::Control:
            case TokenType::Unknown:
            case TokenType::UserDefined:
                piece = text;
                break;
            case TokenType::Undefined:
            case TokenType::Unused:
                break;
        }
    }
    impl->vocab = std::move(v);
    const VocabData& vocab = impl->vocab;
    for (size_t i = 0; i < n; ++i) {
        const std::string& text = vocab.tokens[i];
        // An empty text can never be produced by a merge nor searched for.
        if (text.empty()) continue;
        const auto [it, inserted] = impl->id_by_text.emplace(std::string_view(text), static_cast<int32_t>(i));
        if (!inserted) {
            throw Error("tokenizer: tokens " + std::to_string(it->second) + " and " + std::to_string(i) +
                        " have the same text " + quoted(text));
        }
        if (is_special_type(impl->type(static_cast<int32_t>(i)))) impl->special_ids.push_back(static_cast<int32_t>(i));
    }
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char spelled[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = impl->lookup(std::string_view(spelled, 6));
        const char raw = static_cast<char>(b);
        if (id < 0) id = impl->lookup_mergeable(std::string_view(&raw, 1));  // llama.cpp's fallback: the byte as text
        impl->byte_token[static_cast<size_t>(b)] = id;
    }
    impl->ends_generation.assign(n, 0);
    for (const int32_t id : {vocab.eos_id, vocab.eot_id}) {
        if (id >= 0) impl->ends_generation[static_cast<size_t>(id)] = 1;
    }
    for (const int32_t id : vocab.eog_ids) {
        check_special_id("eog_ids", id, n_vocab);
        if (id >= 0) impl->ends_generation[static_cast<size_t>(id)] = 1;
    }
    impl->strips.assign(n, 0);
    for (const int32_t id : vocab.lstrip_ids) {
        check_special_id("lstrip_ids", id, n_vocab);
        if (id >= 0) impl->strips[static_cast<size_t>(id)] |= kStripLeft;
    }
    for (const int32_t id : vocab.rstrip_ids) {
        check_special_id("rstrip_ids", id, n_vocab);
        if (id >= 0) impl->strips[static_cast<size_t>(id)] |= kStripRight;
    }
    if (vocab.kind == VocabKind::Bpe) {
        if (vocab.merges.empty()) {
            throw Error("tokenizer: a BPE vocabulary needs merges (tokenizer.ggml.merges), and it has none");
        }
        const Impl& im = *impl;
        impl->merger = std::make_unique<bpe::Merger>(
            vocab.tokens, vocab.merges, [&im](std::string_view text) { return im.lookup(text); },
            byte_level ? bpe::Alphabet::Bytes : bpe::Alphabet::Utf8);
    }
    // Longer special tokens are matched first (llama.cpp's tokenizer_st_partition).
    std::stable_sort(impl->special_ids.begin(), impl->special_ids.end(), [&](int32_t a, int32_t b) {
        return vocab.tokens[static_cast<size_t>(a)].size() > vocab.tokens[static_cast<size_t>(b)].size();
    });
    impl_ = std::move(impl);
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos_id; }
int32_t Tokenizer::eot_id() const { return impl_->vocab.eot_id; }
int32_t Tokenizer::unk_id() const { return impl_->vocab.unk_id; }
int32_t Tokenizer::pad_id() const { return impl_->vocab.pad_id; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }
VocabKind Tokenizer::kind() const { return impl_->vocab.kind; }
const VocabData& Tokenizer::vocab() const { return impl_->vocab; }

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab()) {
        throw Error("tokenizer: token id " + std::to_string(id) + " is out of range (n_vocab " +
                    std::to_string(n_vocab()) + ")");
    }
}

const std::string& Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return impl_->vocab.tokens[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
    check_id(id);
    return impl_->type(id);
}

float Tokenizer::token_score(int32_t id) const {
    check_id(id);
    return impl_->vocab.scores[static_cast<size_t>(id)];
}

int32_t Tokenizer::find_token(std::string_view text) const { return impl_->lookup(text); }

bool Tokenizer::is_end_of_generation(int32_t id) const {
    return id >= 0 && id < n_vocab() && impl_->ends_generation[static_cast<size_t>(id)] != 0;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const Impl& im = *impl_;
    const VocabData& vocab = im.vocab;

    // Split out special tokens written literally, longest first: a fragment
    // is a token (token >= 0) or a run of raw text.
    struct Fragment {
        int32_t token;
        size_t offset;
        size_t length;
    };
    std::vector<Fragment> fragments;
    if (!text.empty()) fragments.push_back({-1, 0, text.size()});
    std::vector<Fragment> split;
    for (const int32_t special : im.special_ids) {
        const TokenType type = im.type(special);
        if (!parse_special && (type == TokenType::Control || type == TokenType::Unknown)) continue;
        const std::string& needle = vocab.tokens[static_cast<size_t>(special)];
        const uint8_t strip = im.strips[static_cast<size_t>(special)];
        split.clear();
        for (const Fragment& f : fragments) {
            if (f.token >= 0) {
                split.push_back(f);
                continue;
            }
            const size_t end = f.offset + f.length;
            const std::string_view searched = text.substr(0, end);
            size_t pos = f.offset;
            while (true) {
                const size_t hit = searched.find(needle, pos);
                if (hit == std::string_view::npos) break;
                size_t left = hit - pos;
                if (strip & kStripLeft) {
                    while (left > 0 && is_c_space(text[pos + left - 1])) --left;
                }
                if (left > 0) split.push_back({-1, pos, left});
                split.push_back({special, 0, 0});
                pos = hit + needle.size();
                if (strip & kStripRight) {
                    while (pos < end && is_c_space(text[pos])) ++pos;
                }
            }
            if (pos < end) split.push_back({-1, pos, end - pos});
        }
        fragments.swap(split);
    }

    std::vector<int32_t> out;
    out.reserve(text.size() + 2);
    if (add_bos) {
        if (vocab.bos_id < 0) throw Error("tokenizer: a BOS token was asked for but the vocabulary has none");
        out.push_back(vocab.bos_id);
    }
    bool after_special = true;  // the text start counts as after a special token: it gets the space prefix
    std::string normalised;
    for (const Fragment& f : fragments) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
            continue;
        }
        if (vocab.kind == VocabKind::Bpe) {
            im.encode_bpe(text.substr(f.offset, f.length), out);
            after_special = false;
            continue;
        }
        normalised.clear();
        if (vocab.add_space_prefix && after_special) normalised = kSpaceMark;
        for (const char c : text.substr(f.offset, f.length)) {
            if (c == ' ') {
                normalised += kSpaceMark;
            } else {
                normalised += c;
            }
        }
        im.encode_spm(normalised, out);
        after_special = false;
    }
    if (add_bos && vocab.add_eos) {
        if (vocab.eos_id < 0) throw Error("tokenizer: add_eos is set but the vocabulary has no EOS token");
        out.push_back(vocab.eos_id);
    }
    return out;
}

std::string_view Tokenizer::piece_view(int32_t id, bool render_special) const {
    check_id(id);
    const TokenType type = impl_->type(id);
    if (!render_special && (type == TokenType::Control || type == TokenType::Unknown)) return {};
    return impl_->pieces[static_cast<size_t>(id)];
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
    return std::string(piece_view(id, render_special));
}

std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeAt at) const {
    // One code path with streaming, so the two always agree.
    StreamDecoder stream(*this, at);
    std::string out;
    for (const int32_t id : ids) stream.push(id, out);
    stream.flush(out);
    return out;
}

// ------------------------------------------------------------ streaming ---

Tokenizer::StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, DecodeAt at) : tokenizer_(&tokenizer), at_(at) {
    reset();
}

void Tokenizer::StreamDecoder::reset() {
    first_token_ = true;
    strip_space_ = at_ == DecodeAt::Start && tokenizer_->add_space_prefix();
    utf8_.reset();
}

std::string Tokenizer::StreamDecoder::push(int32_t id) {
    std::string out;
    push(id, out);
    return out;
}

void Tokenizer::StreamDecoder::push(int32_t id, std::string& out) {
    std::string_view piece = tokenizer_->piece_view(id);  // validates id
    if (first_token_) {
        first_token_ = false;
        // A leading BOS decodes to nothing; the space prefix belongs to the token after it.
        if (at_ == DecodeAt::Start && id == tokenizer_->bos_id()) return;
    }
    if (strip_space_) {
        strip_space_ = false;
        if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    }
    utf8_.feed(piece, out);
}

std::string Tokenizer::StreamDecoder::flush() {
    std::string out;
    flush(out);
    return out;
}

void Tokenizer::StreamDecoder::flush(std::string& out) { utf8_.finish(out); }

}  // namespace specd
