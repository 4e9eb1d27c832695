// Grammars that constrain generation: llama.cpp's GBNF, parsed and compiled
// here, and a matcher that says which tokens may come next (issue 35,
// item 5: response_format, llama-server's `grammar`, tool_choice).
//
// GBNF as llama.cpp reads it (grammars/README.md there):
//   rule-name ::= alternatives          (names: letters, digits, '-', '_')
//   "literal"  [a-z0-9_]  [^"\\]  .  rule-name  ( group )  "a" | "b"
//   postfix    *  +  ?  {m}  {m,}  {m,n}
//   escapes    \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH;  # comments
// A rule ends at the end of its line unless a group or alternative goes on.
// The grammar matches Unicode code points; tokens are fed as the UTF-8
// bytes of their pieces, and a token may end inside a character (byte-level
// BPE splits them): the matcher keeps the partial bytes.
//
// Compiled form: each rule is a list of alternatives, each a sequence of
// elements (a set of code-point ranges, or a reference to a rule);
// repetitions become helper rules (x* is R ::= x R | empty). A matcher state
// is a set of stacks of positions: the top of a stack is the next element to
// match, the entries below it where to go on after the rule it is in; an
// empty stack means the text so far is a complete match.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/error.h"

namespace specd {

class Tokenizer;
class TokenTrie;

class Grammar {
public:
    // Parses and checks GBNF text. Throws specd::Error with the line and
    // column for a syntax error, and naming the rule for an undefined rule,
    // a missing root, or left recursion (which this matcher, like
    // llama.cpp's, cannot run).
    static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");
    // A grammar of any JSON value whose top level is an object (what
    // response_format {"type": "json_object"} asks for), with optional
    // whitespace between tokens (and up to two characters of it before the
    // object), bounded so a model cannot pad forever.
    static std::shared_ptr<const Grammar> json_object();
    // The GBNF text json_object() is parsed from (what a request carries in
    // SamplingParams::grammar for response_format json_object).
    static std::string_view json_object_text();

    struct Element {
        bool is_rule = false;
        bool negated = false;                            // chars: [^...]
        uint32_t rule = 0;                               // is_rule: the rule's index
        std::vector<std::pair<uint32_t, uint32_t>> ranges;  // chars: inclusive code-point ranges
        bool matches(uint32_t cp) const;
        // Whether some code point in [lo, hi] matches.
        bool matches_any(uint32_t lo, uint32_t hi) const;
    };
    struct Rule {
        std::string name;
        std::vector<std::vector<Element>> alternatives;
    };
    const std::vector<Rule>& rules() const { return rules_; }
    uint32_t root() const { return root_; }

private:
    Grammar() = default;
    friend class GrammarParser;
    std::vector<Rule> rules_;
    uint32_t root_ = 0;
};

class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

    // Feeds bytes (UTF-8, possibly ending inside a character). Returns false
    // and changes nothing if the grammar cannot continue with them.
    bool accept_bytes(std::string_view bytes);
    // True when the text so far is a complete match (no partial character
    // pending): end-of-generation may come now.
    bool can_end() const;
    // True when no further text can be accepted (only ending can follow).
    bool must_end() const;

    // allowed[id] = 1 for each token that may come next: its piece keeps
    // the text inside the grammar, or it ends generation and can_end().
    // Other tokens with empty pieces (control tokens) are 0. `allowed` is
    // resized to the vocabulary (n_vocab). `trie`: the tokenizer's pieces
    // (engine/token_trie.h), built once per model.
    void allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
    // Whether token `id` may come next (as one entry of allowed_tokens).
    bool allows_token(const Tokenizer& tok, int32_t id) const;
    // Feeds token `id` (an end-of-generation token is accepted iff
    // can_end()). Returns false and changes nothing if it is not allowed.
    bool accept_token(const Tokenizer& tok, int32_t id);

    // Where the matcher stands (not its caches), to come back to: a
    // speculative decoder walks the matcher over drafted tokens, then
    // restores it. Valid for this matcher whatever it did in between.
    class Position;
    Position position() const;
    void restore(const Position& p);

private:
    struct Pos {
        uint32_t rule, alt, index;
        bool operator==(const Pos& o) const { return rule == o.rule && alt == o.alt && index == o.index; }
        bool operator<(const Pos& o) const {
            return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : index < o.index;
        }
    };
    using Stack = std::vector<Pos>;  // back() is the top
    // Expands `stack` until its top is a character element (or it is
    // empty), adding each result to `out`. `entered`: the stacks already
    // expanded in this step (each is expanded once).
    void expand(Stack stack, std::vector<Stack>& out, std::set<Stack>& entered) const;
    // The stacks after matching code point cp from `stacks` (deduplicated).
    std::vector<Stack> advance(const std::vector<Stack>& stacks, uint32_t cp) const;
    // Feeds one byte into the state; false if the grammar refuses it (the
    // state is then unspecified: callers feed copies).
    bool feed_byte(std::vector<Stack>& stacks, std::string& partial, unsigned char byte) const;
    const Grammar::Element& top_element(const Stack& s) const;

    // States are interned: the same stacks and partial bytes get the same
    // id, so transitions (state, byte) and whole token masks per state are
    // computed once and reused (inside a JSON string every token boundary
    // is the same state). The caches are per matcher, bounded, and dropped
    // when they outgrow their bounds.
    struct State {
        std::vector<Stack> stacks;  // sorted, unique
        std::string partial;        // bytes of a character not yet complete (0-3)
    };
    int32_t intern(State state) const;
    // The state after one more byte, or -1 if the grammar refuses it.
    int32_t step(int32_t state, unsigned char byte) const;
    // Drops the caches when they are too large, keeping the current state.
    void bound_caches() const;
    const State& current() const { return states_[static_cast<size_t>(current_)]; }

    static constexpr size_t kMaxStates = 1 << 16;
    static constexpr size_t kMaxMasks = 64;

    std::shared_ptr<const Grammar> grammar_;
    mutable std::vector<State> states_;                              // (interned states)
    mutable std::unordered_map<std::string, int32_t> state_ids_;     // key(state) -> id
    mutable std::unordered_map<uint64_t, int32_t> transitions_;      // (state << 8 | byte) -> next state or -1
    mutable std::unordered_map<int32_t, std::vector<uint8_t>> masks_;  // state -> allowed_tokens() result
    mutable const TokenTrie* mask_trie_ = nullptr;                   // the trie masks_ were made with
    mutable int32_t current_ = 0;  // the state now (re-interned when bound_caches() drops the caches)
};

class GrammarMatcher::Position {
    friend class GrammarMatcher;
    State state_;  // a copy: state ids change when the caches are dropped
};

}  // namespace specd
