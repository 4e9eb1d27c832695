#include "engine/grammar.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "engine/token_trie.h"
#include "engine/tokenizer.h"

namespace specd {

// ------------------------------------------------------------------ parser ---

class GrammarParser {
public:
    explicit GrammarParser(std::string_view text) : text_(text) {}

    std::shared_ptr<const Grammar> run(std::string_view root) {
        auto g = std::shared_ptr<Grammar>(new Grammar());
        g_ = g.get();
        skip_space(true);
        while (pos_ < text_.size()) {
            const std::string name = parse_name();
            skip_space(false);
            if (text_.substr(pos_, 3) != "::=") fail("expected ::= after rule name '" + name + "'");
            pos_ += 3;
            skip_space(true);
            const uint32_t r = rule_id(name);
            if (defined_.count(r)) fail("rule '" + name + "' is defined twice");
            defined_.insert(r);
            g_->rules_[r].alternatives = parse_alternatives(false);
            skip_space(true);
        }
        for (uint32_t r = 0; r < g_->rules_.size(); ++r) {
            if (!defined_.count(r)) throw Error("grammar: rule '" + g_->rules_[r].name + "' is used but never defined");
        }
        const auto it = ids_.find(std::string(root));
        if (it == ids_.end()) throw Error("grammar: no root rule '" + std::string(root) + "'");
        g_->root_ = it->second;
        check_left_recursion();
        return g;
    }

private:
    using Element = Grammar::Element;
    using Sequence = std::vector<Element>;

    [[noreturn]] void fail(const std::string& what) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        throw Error("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
    }

    // Spaces and comments; newlines too when `newlines` (inside groups, and between rules).
    void skip_space(bool newlines) {
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            if (c == '#') {
                while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
            } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else {
                break;
            }
        }
    }
    static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }
    std::string parse_name() {
        const size_t start = pos_;
        while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
        if (pos_ == start) fail("expected a rule name");
        return std::string(text_.substr(start, pos_ - start));
    }
    uint32_t rule_id(const std::string& name) {
        const auto [it, added] = ids_.emplace(name, static_cast<uint32_t>(g_->rules_.size()));
        if (added) g_->rules_.push_back({name, {}});
        return it->second;
    }
    uint32_t helper_rule(const std::string& base, std::vector<Sequence> alternatives) {
        const uint32_t id = rule_id(base + "_" + std::to_string(++helpers_));
        defined_.insert(id);
        g_->rules_[id].alternatives = std::move(alternatives);
        return id;
    }

    // One code point of UTF-8 in the grammar text, or an escape.
    uint32_t parse_char() {
        if (pos_ >= text_.size()) fail("unexpected end of the grammar");
        const unsigned char c = static_cast<unsigned char>(text_[pos_]);
        if (c == '\\') {
            if (pos_ + 1 >= text_.size()) fail("unfinished escape");
            const char e = text_[pos_ + 1];
            pos_ += 2;
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': return static_cast<unsigned char>(e);
                case 'x': return parse_hex(2);
                case 'u': return parse_hex(4);
                case 'U': return parse_hex(8);
                default: {
                    --pos_;
                    char shown[8];
                    std::snprintf(shown, sizeof shown, e > 0x20 && e < 0x7f ? "%c" : "x%02X", static_cast<unsigned char>(e));
                    fail(std::string("unknown escape \\") + shown);
                }
            }
        }
        const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || pos_ + len > text_.size()) fail("invalid UTF-8 in the grammar");
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int i = 1; i < len; ++i) {
            const unsigned char next = static_cast<unsigned char>(text_[pos_ + i]);
            if ((next & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
            cp = (cp << 6) | (next & 0x3F);
        }
        pos_ += len;
        return cp;
    }
    uint32_t parse_hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i, ++pos_) {
            if (pos_ >= text_.size()) fail("unfinished hex escape");
            const char h = text_[pos_];
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail("expected a hex digit");
            v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > 0x10FFFF) fail("code point beyond U+10FFFF");
        return v;
    }

    std::vector<Sequence> parse_alternatives(bool nested) {
        std::vector<Sequence> alts;
        alts.push_back(parse_sequence(nested));
        while (pos_ < text_.size() && text_[pos_] == '|') {
            ++pos_;
            skip_space(true);
            alts.push_back(parse_sequence(nested));
        }
        return alts;
    }

    Sequence parse_sequence(bool nested) {
        Sequence seq;
        while (pos_ < text_.size()) {
            const char c = text_[pos_];
            size_t last_start = seq.size();  // where the last item's elements begin (for postfix operators)
            if (c == '"') {
                ++pos_;
                last_start = seq.size();
                while (pos_ < text_.size() && text_[pos_] != '"') {
                    if (text_[pos_] == '\n') fail("newline inside a string literal");
                    const uint32_t cp = parse_char();
                    seq.push_back(chars({{cp, cp}}, false));
                }
                if (pos_ >= text_.size()) fail("unterminated string literal");
                ++pos_;
                if (seq.size() == last_start) {
                    // "" matches the empty text: nothing to add, and no postfix may follow.
                    skip_space(nested);
                    continue;
                }
            } else if (c == '[') {
                ++pos_;
                bool negated = false;
                if (pos_ < text_.size() && text_[pos_] == '^') {
                    negated = true;
                    ++pos_;
                }
                std::vector<std::pair<uint32_t, uint32_t>> ranges;
                while (pos_ < text_.size() && text_[pos_] != ']') {
                    const uint32_t lo = parse_char();
                    uint32_t hi = lo;
                    if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
                        ++pos_;
                        hi = parse_char();
                        if (hi < lo) fail("character range is backwards");
                    }
                    ranges.emplace_back(lo, hi);
                }
                if (pos_ >= text_.size()) fail("unterminated character class");
                ++pos_;
                if (ranges.empty() && !negated) fail("empty character class");
                last_start = seq.size();
                seq.push_back(chars(std::move(ranges), negated));
            } else if (c == '.') {
                ++pos_;
                last_start = seq.size();
                seq.push_back(chars({{0, 0x10FFFF}}, false));
            } else if (c == '(') {
                ++pos_;
                skip_space(true);
                std::vector<Sequence> inner = parse_alternatives(true);
                if (pos_ >= text_.size() || text_[pos_] != ')') fail("expected )");
                ++pos_;
                last_start = seq.size();
                seq.push_back(rule_ref(helper_rule("group", std::move(inner))));
            } else if (name_char(c)) {
                const std::string name = parse_name();
                // A name followed by ::= starts the next rule: this sequence ended.
                const size_t save = pos_;
                skip_space(false);
                if (!nested && text_.substr(pos_, 3) == "::=") {
                    pos_ = save - name.size();
                    return seq;
                }
                pos_ = save;
                last_start = seq.size();
                seq.push_back(rule_ref(rule_id(name)));
            } else {
                break;
            }
            skip_space(nested);
            // Postfix operators apply to the last item (a whole literal, as in llama.cpp).
            while (pos_ < text_.size() && (text_[pos_] == '*' || text_[pos_] == '+' || text_[pos_] == '?' || text_[pos_] == '{')) {
                if (last_start >= seq.size()) fail("a repetition needs an item before it");
                const Sequence last(seq.begin() + static_cast<ptrdiff_t>(last_start), seq.end());
                seq.resize(last_start);
                int min = 0, max = -1;
                const char op = text_[pos_++];
                if (op == '+') {
                    min = 1;
                } else if (op == '?') {
                    max = 1;
                } else if (op == '{') {
                    skip_space(false);
                    min = parse_int();
                    skip_space(false);
                    if (pos_ < text_.size() && text_[pos_] == ',') {
                        ++pos_;
                        skip_space(false);
                        max = pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9' ? parse_int() : -1;
                    } else {
                        max = min;
                    }
                    skip_space(false);
                    if (pos_ >= text_.size() || text_[pos_] != '}') fail("expected } after a repetition count");
                    ++pos_;
                    if (max >= 0 && max < min) fail("repetition maximum below its minimum");
                }
                const size_t copies = last.size() * static_cast<size_t>(std::max(min, max) + 1);
                if (copies > kMaxElements) fail("repetition too large");
                if ((total_copied_ += copies) > kMaxGrammarElements) fail("grammar too large (its repetitions expand past a million elements)");
                repeat(seq, last, min, max);
                skip_space(nested);
            }
            if (!nested && pos_ < text_.size() && text_[pos_] == '\n') break;
        }
        return seq;
    }
    int parse_int() {
        const size_t start = pos_;
        int v = 0;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            v = v * 10 + (text_[pos_++] - '0');
            if (v > 10000) fail("repetition count above 10000");
        }
        if (pos_ == start) fail("expected a number");
        return v;
    }

    static Element chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
        Element e;
        e.ranges = std::move(ranges);
        e.negated = negated;
        return e;
    }
    static Element rule_ref(uint32_t rule) {
        Element e;
        e.is_rule = true;
        e.rule = rule;
        return e;
    }
    // Appends `item` repeated min..max times (max -1: unbounded) to seq.
    void repeat(Sequence& seq, const Sequence& item, int min, int max) {
        for (int i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
        if (max == -1) {
            // R ::= item R | (empty)
            const uint32_t r = helper_rule("star", {});
            Sequence again = item;
            again.push_back(rule_ref(r));
            g_->rules_[r].alternatives = {again, {}};
            seq.push_back(rule_ref(r));
            return;
        }
        // (max - min) nested optionals: R_1 ::= item | (empty); R_k ::= item R_{k-1} | (empty)
        uint32_t inner = 0;
        for (int k = 1; k <= max - min; ++k) {
            Sequence alt = item;
            if (k > 1) alt.push_back(rule_ref(inner));
            inner = helper_rule("opt", {alt, {}});
        }
        if (max > min) seq.push_back(rule_ref(inner));
    }

    // Left recursion: a rule that can reach itself before matching a character.
    void check_left_recursion() const {
        const auto& rules = g_->rules_;
        std::vector<char> nullable(rules.size(), 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < rules.size(); ++r) {
                if (nullable[r]) continue;
                for (const Sequence& alt : rules[r].alternatives) {
                    if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return e.is_rule && nullable[e.rule]; })) {
                        nullable[r] = 1;
                        changed = true;
                        break;
                    }
                }
            }
        }
        // 0: unvisited, 1: on the path, 2: done
        std::vector<char> state(rules.size(), 0);
        std::function<void(uint32_t)> visit = [&](uint32_t r) {
            state[r] = 1;
            for (const Sequence& alt : rules[r].alternatives) {
                for (const Element& e : alt) {
                    if (!e.is_rule) break;
                    if (state[e.rule] == 1) throw Error("grammar: left recursion through rule '" + rules[e.rule].name + "' (not supported, as in llama.cpp)");
                    if (state[e.rule] == 0) visit(e.rule);
                    if (!nullable[e.rule]) break;
                }
            }
            state[r] = 2;
        };
        for (uint32_t r = 0; r < rules.size(); ++r) {
            if (state[r] == 0) visit(r);
        }
    }

    static constexpr size_t kMaxElements = 100000;  // per repetition: "x"{1000}{1000} would be a million
    static constexpr size_t kMaxGrammarElements = 1000000;  // all repetitions together: a request's grammar stays small
    size_t total_copied_ = 0;
    std::string_view text_;
    size_t pos_ = 0;
    Grammar* g_ = nullptr;
    std::map<std::string, uint32_t> ids_;
    std::set<uint32_t> defined_;
    int helpers_ = 0;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
    return GrammarParser(gbnf).run(root);
}

std::shared_ptr<const Grammar> Grammar::json_object() {
    static const std::shared_ptr<const Grammar> g = parse(json_object_text());
    return g;
}

std::string_view Grammar::json_object_text() {
    // llama.cpp's grammars/json.gbnf in spirit: an object at the top, any
    // JSON value inside; whitespace between tokens is bounded (ws allows at
    // most 20 characters), so a model cannot fill its budget with spaces.
    // Up to two whitespace characters may open the text: SentencePiece
    // models write a leading space with most words ("▁{").
    return R"(
root   ::= [ \t\n]{0,2} object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
)";
}

bool Grammar::Element::matches(uint32_t cp) const {
    bool in = false;
    for (const auto& [lo, hi] : ranges) {
        if (cp >= lo && cp <= hi) {
            in = true;
            break;
        }
    }
    return in != negated;
}

bool Grammar::Element::matches_any(uint32_t lo, uint32_t hi) const {
    if (!negated) {
        for (const auto& [a, b] : ranges) {
            if (a <= hi && lo <= b) return true;
        }
        return false;
    }
    // Some code point in [lo, hi] outside every range: walk the gaps.
    uint32_t cp = lo;
    for (bool moved = true; moved && cp <= hi;) {
        moved = false;
        for (const auto& [a, b] : ranges) {
            if (cp >= a && cp <= b) {
                if (b >= hi) return false;
                cp = b + 1;
                moved = true;
            }
        }
    }
    return cp <= hi;
}

// ----------------------------------------------------------------- matcher ---

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
    State start;
    const Grammar::Rule& root = grammar_->rules()[grammar_->root()];
    std::set<Stack> entered;
    for (uint32_t a = 0; a < root.alternatives.size(); ++a) expand(Stack{{grammar_->root(), a, 0}}, start.stacks, entered);
    std::sort(start.stacks.begin(), start.stacks.end());
    start.stacks.erase(std::unique(start.stacks.begin(), start.stacks.end()), start.stacks.end());
    current_ = intern(std::move(start));
}

int32_t GrammarMatcher::intern(State state) const {
    std::string key;
    for (const Stack& stack : state.stacks) {
        const uint32_t n = static_cast<uint32_t>(stack.size());
        key.append(reinterpret_cast<const char*>(&n), sizeof n);
        key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(Pos));
    }
    key.push_back('|');
    key += state.partial;
    const auto [it, added] = state_ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (added) states_.push_back(std::move(state));
    return it->second;
}

int32_t GrammarMatcher::step(int32_t state, unsigned char byte) const {
    const uint64_t key = (static_cast<uint64_t>(state) << 8) | byte;
    if (const auto it = transitions_.find(key); it != transitions_.end()) return it->second;
    State next = states_[static_cast<size_t>(state)];
    const int32_t id = feed_byte(next.stacks, next.partial, byte) ? intern(std::move(next)) : -1;
    transitions_.emplace(key, id);
    return id;
}

void GrammarMatcher::bound_caches() const {
    if (masks_.size() > kMaxMasks) masks_.clear();
    if (states_.size() <= kMaxStates) return;
    State keep = current();
    states_.clear();
    state_ids_.clear();
    transitions_.clear();
    masks_.clear();
    current_ = intern(std::move(keep));
}

const Grammar::Element& GrammarMatcher::top_element(const Stack& s) const {
    const Pos& p = s.back();
    return grammar_->rules()[p.rule].alternatives[p.alt][p.index];
}

void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, std::set<Stack>& entered) const {
    while (!stack.empty()) {
        const Pos p = stack.back();
        const auto& seq = grammar_->rules()[p.rule].alternatives[p.alt];
        if (p.index >= seq.size()) {  // this alternative is done: back to the caller
            stack.pop_back();
            continue;
        }
        const Grammar::Element& e = seq[p.index];
        if (!e.is_rule) break;
        // Enter the rule: the continuation stays below (dropped when it is
        // the caller's end, so stacks do not grow along right recursion).
        stack.pop_back();
        if (p.index + 1 < seq.size()) stack.push_back({p.rule, p.alt, p.index + 1});
        const auto& alts = grammar_->rules()[e.rule].alternatives;
        for (uint32_t a = 1; a < alts.size(); ++a) {
            Stack branch = stack;
            branch.push_back({e.rule, a, 0});
            if (entered.insert(branch).second) expand(std::move(branch), out, entered);
        }
        stack.push_back({e.rule, 0, 0});
        // A stack expands to the same results wherever it is reached: once
        // is enough. Without this, empty alternatives under a repetition
        // ("x" | "y" | | | ...){7,33}) reach the same stacks exponentially
        // many times (a fuzzer's grammar took 2 GB).
        if (!entered.insert(stack).second) return;
    }
    out.push_back(std::move(stack));
}

std::vector<GrammarMatcher::Stack> GrammarMatcher::advance(const std::vector<Stack>& stacks, uint32_t cp) const {
    std::vector<Stack> out;
    std::set<Stack> entered;
    for (const Stack& s : stacks) {
        if (s.empty() || !top_element(s).matches(cp)) continue;
        Stack next = s;
        ++next.back().index;
        expand(std::move(next), out, entered);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

namespace {
// Length of the UTF-8 sequence a lead byte starts; 0 for a continuation or invalid byte.
int utf8_length(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0; }
// The smallest code point a sequence of each length may encode (shorter is overlong).
constexpr uint32_t kMinCodePoint[5] = {0, 0, 0x80, 0x800, 0x10000};
}  // namespace

bool GrammarMatcher::feed_byte(std::vector<Stack>& stacks, std::string& partial, unsigned char c) const {
    if (partial.empty()) {
        if (utf8_length(c) == 0) return false;
    } else if ((c & 0xC0) != 0x80) {
        return false;
    }
    partial.push_back(static_cast<char>(c));
    const size_t need = static_cast<size_t>(utf8_length(static_cast<unsigned char>(partial[0])));
    const unsigned char lead = static_cast<unsigned char>(partial[0]);
    uint32_t cp = need == 1 ? lead : need == 2 ? (lead & 0x1F) : need == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (size_t i = 1; i < partial.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(partial[i]) & 0x3F);
    if (partial.size() == need) {
        // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
        if (cp < kMinCodePoint[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        partial.clear();
        stacks = advance(stacks, cp);
        return !stacks.empty();
    }
    // A character still arriving: some stack must accept a code point it could become.
    uint32_t lo = cp, hi = cp;
    for (size_t i = partial.size(); i < need; ++i) {
        lo <<= 6;
        hi = (hi << 6) | 0x3F;
    }
    lo = std::max(lo, kMinCodePoint[need]);
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    return lo <= hi && std::any_of(stacks.begin(), stacks.end(),
                                   [&](const Stack& s) { return !s.empty() && top_element(s).matches_any(lo, hi); });
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    bound_caches();
    int32_t state = current_;
    for (const char ch : bytes) {
        state = step(state, static_cast<unsigned char>(ch));
        if (state < 0) return false;
    }
    current_ = state;
    return true;
}

bool GrammarMatcher::can_end() const {
    return current().partial.empty() && std::any_of(current().stacks.begin(), current().stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::must_end() const {
    return current().partial.empty() && std::all_of(current().stacks.begin(), current().stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::allows_token(const Tokenizer& tok, int32_t id) const {
    if (tok.is_end_of_generation(id)) return can_end();
    const std::string_view piece = tok.piece_view(id);
    if (piece.empty()) return false;
    int32_t state = current_;
    for (const char ch : piece) {
        state = step(state, static_cast<unsigned char>(ch));
        if (state < 0) return false;
    }
    return true;
}

void GrammarMatcher::allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
    bound_caches();
    if (mask_trie_ != &trie) {
        masks_.clear();
        mask_trie_ = &trie;
    }
    if (const auto it = masks_.find(current_); it != masks_.end()) {
        allowed = it->second;
        return;
    }
    allowed.assign(static_cast<size_t>(trie.n_vocab()), 0);
    const bool end_ok = can_end();
    for (int32_t id : trie.end_of_generation()) allowed[static_cast<size_t>(id)] = end_ok;
    // Depth first over the pieces' shared prefixes: one (cached) transition
    // per trie edge, and a refused byte prunes every token below it.
    struct Frame {
        int32_t node, state;
        size_t next_child;
    };
    std::vector<Frame> path{{0, current_, 0}};
    while (!path.empty()) {
        Frame& f = path.back();
        const auto children = trie.children(f.node);
        if (f.next_child == children.size()) {
            path.pop_back();
            continue;
        }
        const TokenTrie::Edge edge = children[f.next_child++];
        const int32_t next = step(f.state, edge.byte);
        if (next < 0) continue;
        for (int32_t id : trie.tokens_at(edge.node)) allowed[static_cast<size_t>(id)] = 1;
        path.push_back({edge.node, next, 0});
    }
    masks_.emplace(current_, allowed);
}

GrammarMatcher::Position GrammarMatcher::position() const {
    Position p;
    p.state_ = current();
    return p;
}

void GrammarMatcher::restore(const Position& p) {
    bound_caches();
    current_ = intern(p.state_);
}

bool GrammarMatcher::accept_token(const Tokenizer& tok, int32_t id) {
    if (tok.is_end_of_generation(id)) {
        if (!can_end()) return false;
        State done;
        done.stacks.emplace_back();
        current_ = intern(std::move(done));
        return true;
    }
    const std::string_view piece = tok.piece_view(id);
    return !piece.empty() && accept_bytes(piece);
}

}  // namespace specd
