// A grammar applied to decoding (issue 35, item 5): which rows of the
// target's logits it masks, and where it cuts a draft. The decoders that
// honour SamplingParams::grammar (BatchVerifier and SessionCore on the
// server's path, PlainDecoder on the CLI's) share these, so plain and
// speculative decoding mask alike and greedy output stays identical.
//
// As in llama.cpp, the mask comes before every sampling transform: a
// forbidden token's logit becomes -inf, and logit_bias, the penalties and
// the filters then run on what is left.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/grammar.h"
#include "engine/token_trie.h"
#include "engine/tokenizer.h"

namespace specd {

// Parses a request's grammar (SamplingParams::grammar) with root "root";
// specd::Error with the parser's one-line message.
std::shared_ptr<const Grammar> compile_request_grammar(std::string_view gbnf);

// Writes -inf into row[id] (n_vocab: the model's, which may pad past the
// tokenizer's; padding ids are forbidden) for every token the matcher
// forbids now. `allowed` is scratch (the tokenizer's n_vocab). Returns how
// many tokens stay allowed (0: the grammar cannot go on in this vocabulary).
size_t mask_row(const GrammarMatcher& m, const TokenTrie& trie, float* row, int32_t n_vocab, std::vector<uint8_t>& allowed);

// The verification rows of [pending, d1..dk], masked: `rows` (n_rows =
// drafted.size() + 1, n_vocab: the model's) is copied into `out` (same shape, resized)
// with row 0 masked at the matcher's position and row i after drafted
// tokens d1..di as well. A drafted token the grammar refuses ends the
// walk: the rows after it are copied unmasked (the verifier rejects that
// token at the row before and reads no further). The matcher comes back
// where it was. Returns false when a row the walk reached allows no token.
bool mask_rows(GrammarMatcher& m, const Tokenizer& tok, const TokenTrie& trie, std::span<const int32_t> drafted,
               const float* rows, int32_t n_vocab, std::vector<float>& out, std::vector<uint8_t>& allowed);

// How many leading tokens of `drafted` the grammar accepts in turn from
// the matcher's position (a draft is cut at its first forbidden token
// before verification). The matcher comes back where it was.
size_t grammar_prefix(GrammarMatcher& m, const Tokenizer& tok, std::span<const int32_t> drafted);

// A request's grammar as a drafter follows it: each draft job brings the
// context (prompt + accepted output, the pending token last), usually the
// last one grown, sometimes rolled back; the matcher follows the output
// part incrementally and starts over when it no longer extends what was fed.
class GrammarTracker {
public:
    // Brings the matcher to the position after context[n_prompt, end) for
    // grammar `gbnf` (parsed on first use or when it changes). False when
    // the grammar does not parse or refuses that output: then the drafter
    // proposes unmasked (the verifier still decides).
    bool sync(const std::string& gbnf, std::span<const int32_t> context, int32_t n_prompt, const Tokenizer& tok);
    GrammarMatcher& matcher() { return *matcher_; }

private:
    std::string text_;                        // the grammar matcher_ runs
    std::unique_ptr<GrammarMatcher> matcher_;
    std::vector<int32_t> fed_;                // output tokens fed since the matcher's start
    bool broken_ = false;                     // the grammar does not parse: no masking
};

}  // namespace specd
