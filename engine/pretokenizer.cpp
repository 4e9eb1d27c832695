// PCRE2 behind PreTokenizer: the only file of the engine that includes it.
#include "engine/pretokenizer.h"

#ifdef SPECD_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#include <algorithm>
#include <array>
#include <climits>

#include "engine/error.h"

namespace specd {

namespace {

// ---------------------------------------------------------- the regexes ---
// llama.cpp's lists (llama-vocab.cpp, llm_tokenizer_bpe). Where llama.cpp
// rewrote an expression only because std::regex lacks a feature, the
// original of tokenizer.json is used, which PCRE2 runs as written; the
// case-insensitive contractions stay spelled out ('[sS]) so that PCRE2's
// Unicode case folding cannot make "'ſ" a contraction.

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kJais2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|"
    "\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kStarcoderWords =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

// The letter classes of tekken / GPT-4o: an upper-or-other run then a
// lower-or-other run, or the other way round.
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|"
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|"
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

constexpr const char* kDeepseek3Words =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kCjk = "[一-龥ࠀ-一가-퟿]+";

// The Latin, Greek, Cyrillic, ... letters of DeepSeek-LLM's tokenizer.json
// (one literal: a split could fall inside a character).
constexpr const char* kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

constexpr const char* kApostropheWordsBailing =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
    "\\s+(?!\\S)|\\s+";

struct Family {
    PreTokenizerTraits traits;                // name: the canonical one
    std::vector<const char*> aliases;         // every name that selects it (the canonical one too)
    std::vector<std::string> regexes;
};

const std::vector<Family>& families() {
    static const std::vector<Family> table = [] {
        std::vector<Family> t;
        // Traits are written with designated initializers; a bare {"name"} has the defaults.
        const auto add = [&](PreTokenizerTraits traits, std::vector<const char*> aliases,
                             std::vector<std::string> regexes) {
            t.push_back({std::move(traits), std::move(aliases), std::move(regexes)});
        };
        // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT: also what a missing key gets.
        add({"default"}, {"default"},
            {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"});
        add({.name = "llama3", .ignore_merges = true, .add_bos_by_default = true},
            {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
            {kLlama3});
        add({"dbrx"}, {"dbrx", "smaug-bpe"}, {kLlama3});
        add({"jais-2"}, {"jais-2"}, {kJais2});
        add({"deepseek-llm"}, {"deepseek-llm"},
            {"[\r\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"});
        add({"deepseek-v3"}, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
            {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", kDeepseek3Words});
        add({"deepseek-coder"}, {"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"});
        add({"falcon"}, {"falcon"},
            {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kStarcoderWords, "[0-9][0-9][0-9]"});
        add({"starcoder"},
            {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
            {"\\p{N}", kStarcoderWords});
        add({"gpt-2"},
            {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
             "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"},
            {kGpt2});
        add({"qwen2"},
            {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"},
            {kQwen2});
        add({"qwen35"}, {"qwen35"}, {kQwen35});
        add({"bloom"}, {"bloom", "poro-chat", "gpt3-finnish"}, {" ?[^(\\s|.,!?…。，、।۔،)]+"});
        add({.name = "glm4", .no_bos = true}, {"glm4", "chatglm-bpe"}, {kLlama3});
        add({"viking"}, {"viking"}, {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"});
        add({.name = "tekken", .ignore_merges = true, .add_bos_by_default = true}, {"tekken"}, {kTekken});
        add({"gpt-4o"}, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o});
        add({"bailingmoe"}, {"bailingmoe", "bailingmoe2", "llada-moe"}, {kApostropheWordsBailing});
        add({"seed-coder"}, {"seed-coder"},
            {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| "
             "?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
        add({"ufakzeka"}, {"ufakzeka"},
            {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
        add({"grok-2"}, {"grok-2"}, {kQwen2});
        add({.name = "minicpm5", .ignore_merges = true}, {"minicpm5"},
            {"\\p{N}{1,3}",
             "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"});
        add({"laguna"}, {"laguna"}, {"[^\\n]+|[\\n]+", kQwen2});
        // Gemma 4 (tokenizer.ggml.model "gemma4"): SentencePiece-style BPE on
        // raw UTF-8 with "▁" for spaces, split only at newline runs.
        add({.name = "gemma4",
             .add_bos_by_default = true,
             .byte_level = false,
             .escape_spaces = true,
             .whole_newline_runs = true},
            {"gemma4"}, {"[^\\n]+|[\\n]+"});
        return t;
    }();
    return table;
}

const Family* find_family(std::string_view name) {
    for (const Family& f : families()) {
        for (const char* alias : f.aliases) {
            if (name == alias) return &f;
        }
    }
    return nullptr;
}

// ------------------------------------------------------------ UTF-8 ----

// The length of the well-formed UTF-8 character at text[i] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), 0 if there is none.
size_t valid_char_len(std::string_view text, size_t i) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    if (b0 < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + n > text.size()) return 0;
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    if (b1 < lo || b1 > hi) return 0;
    for (size_t k = 2; k < n; ++k) {
        const auto b = static_cast<unsigned char>(text[i + k]);
        if (b < 0x80 || b > 0xBF) return 0;
    }
    return n;
}

#ifdef SPECD_HAVE_PCRE2
// ------------------------------------------------------------- PCRE2 ----

struct CodeDeleter {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct JitStackDeleter {
    void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};
struct MatchContextDeleter {
    void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};

// Per thread: the match data (one pair of offsets is all split() reads) and
// a JIT stack larger than PCRE2's default 32 KiB, for long repeated groups.
struct ThreadMatchState {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> data{pcre2_match_data_create(1, nullptr)};
    std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack{
        pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr)};
    std::unique_ptr<pcre2_match_context, MatchContextDeleter> context{pcre2_match_context_create(nullptr)};
    ThreadMatchState() {
        if (!data || !stack || !context) throw Error("pre-tokenizer: out of memory for PCRE2 match state");
        pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
    }
};

ThreadMatchState& thread_match_state() {
    thread_local ThreadMatchState state;
    return state;
}

std::string pcre2_message(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
    return reinterpret_cast<const char*>(buffer);
}
#endif  // SPECD_HAVE_PCRE2

}  // namespace

struct PreTokenizer::Impl {
    PreTokenizerTraits traits;
    std::vector<std::string> regexes;
#ifdef SPECD_HAVE_PCRE2
    std::vector<std::unique_ptr<pcre2_code, CodeDeleter>> codes;  // (regexes) compiled, JIT where possible
    std::vector<bool> jitted;                                     // (regexes)
#endif
};

namespace {

const Family& require_family(std::string_view name) {
    const Family* family = find_family(name);
    if (!family) {
        std::string known;
        for (const std::string& n : PreTokenizer::known_names()) known += (known.empty() ? "" : ", ") + n;
        // llama.cpp refuses such a file too ("unknown pre-tokenizer type"):
        // guessing would tokenize differently from the model's training.
        throw Error("unknown pre-tokenizer \"" + std::string(name) + "\" (tokenizer.ggml.pre; llama.cpp refuses it too); known: " + known);
    }
    return *family;
}

}  // namespace

PreTokenizerTraits PreTokenizer::traits_of(std::string_view name) { return require_family(name).traits; }

PreTokenizer::PreTokenizer(std::string_view name) {
    const Family* family = &require_family(name);
    auto impl = std::make_shared<Impl>();
    impl->traits = family->traits;
    impl->regexes = family->regexes;
#ifndef SPECD_HAVE_PCRE2
    throw Error("pre-tokenizer " + impl->traits.name +
                ": this build has no PCRE2 (libpcre2-dev), so byte-level BPE vocabularies cannot be read");
#else
    for (const std::string& regex : impl->regexes) {
        int error = 0;
        PCRE2_SIZE error_offset = 0;
        // DOLLAR_ENDONLY: "$" is the end of the piece only, as in std::regex
        // (PCRE2's default also matches before a final newline).
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &error,
                                         &error_offset, nullptr);
        if (!code) {
            throw Error("pre-tokenizer " + impl->traits.name + ": regex " + regex + " does not compile at offset " +
                        std::to_string(error_offset) + ": " + pcre2_message(error));
        }
        impl->codes.emplace_back(code);
        impl->jitted.push_back(pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0);
    }
    impl_ = std::move(impl);
#endif
}

const PreTokenizerTraits& PreTokenizer::traits() const { return impl_->traits; }
const std::vector<std::string>& PreTokenizer::regexes() const { return impl_->regexes; }

std::vector<std::string> PreTokenizer::known_names() {
    std::vector<std::string> names;
    for (const Family& f : families()) {
        for (const char* alias : f.aliases) names.emplace_back(alias);
    }
    std::sort(names.begin(), names.end());
    return names;
}

void PreTokenizer::split(std::string_view text, std::vector<TextSpan>& words) const {
    if (text.empty()) return;
    if (text.size() >= static_cast<size_t>(UINT32_MAX)) {
        throw Error("pre-tokenizer: the text is too long (4 GiB or more)");
    }
#ifndef SPECD_HAVE_PCRE2
    (void)words;
    throw Error("pre-tokenizer: this build has no PCRE2");
#else
    ThreadMatchState& state = thread_match_state();
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data.get());
    const auto* subject_base = reinterpret_cast<PCRE2_SPTR>(text.data());

    // Each regex splits every piece of the previous round: pieces ping-pong
    // between `current` and `next`; the last round appends to `words`.
    thread_local std::vector<TextSpan> current, next;
    current.assign(1, TextSpan{0, static_cast<uint32_t>(text.size())});
    const size_t n_regexes = impl_->codes.size();
    for (size_t r = 0; r < n_regexes; ++r) {
        const bool last = r + 1 == n_regexes;
        std::vector<TextSpan>& out = last ? words : next;
        if (!last) next.clear();
        pcre2_code* code = impl_->codes[r].get();
        const bool jit = impl_->jitted[r];
        for (const TextSpan piece : current) {
            // The piece is the whole subject: lookarounds and "$" see its ends, as in llama.cpp.
            const PCRE2_SPTR subject = subject_base + piece.offset;
            const PCRE2_SIZE length = piece.size;
            PCRE2_SIZE start = 0;
            PCRE2_SIZE emitted = 0;  // end of the last piece emitted
            while (start < length) {
                int rc = jit ? pcre2_jit_match(code, subject, length, start, 0, state.data.get(), state.context.get())
                             : PCRE2_ERROR_JIT_BADOPTION;
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
                    rc = pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK, state.data.get(), nullptr);
                }
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    throw Error("pre-tokenizer " + impl_->traits.name + ": matching failed: " + pcre2_message(rc));
                }
                const PCRE2_SIZE match_begin = ovector[0];
                const PCRE2_SIZE match_end = ovector[1];
                if (match_end == match_begin) {
                    // An empty match cuts nothing; go on after the next character.
                    start = match_end + 1;
                    while (start < length && (subject[start] & 0xC0) == 0x80) ++start;
                    continue;
                }
                if (match_begin > emitted) {
                    out.push_back({piece.offset + static_cast<uint32_t>(emitted),
                                   static_cast<uint32_t>(match_begin - emitted)});
                }
                out.push_back({piece.offset + static_cast<uint32_t>(match_begin),
                               static_cast<uint32_t>(match_end - match_begin)});
                emitted = start = match_end;
            }
            if (emitted < length) {
                out.push_back({piece.offset + static_cast<uint32_t>(emitted), static_cast<uint32_t>(length - emitted)});
            }
        }
        if (!last) current.swap(next);
    }
#endif
}

bool sanitize_utf8(std::string_view text, std::string& out) {
    size_t i = 0;
    while (i < text.size()) {
        const size_t n = valid_char_len(text, i);
        if (n == 0) break;
        i += n;
    }
    if (i == text.size()) return false;
    // llama.cpp reads characters by their lead byte alone (overlong forms
    // pass and come out re-encoded); a byte that starts no character becomes
    // U+FFFD and reading goes on at the next byte. A surrogate or a value
    // above U+10FFFF, which llama.cpp would pass on, is U+FFFD here, as
    // PCRE2 cannot read it.
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    std::string result(text.substr(0, i));
    while (i < text.size()) {
        const size_t n = valid_char_len(text, i);
        if (n > 0) {
            result.append(text, i, n);
            i += n;
            continue;
        }
        const auto b0 = static_cast<unsigned char>(text[i]);
        const size_t lax = (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
        bool ok = lax > 0 && i + lax <= text.size();
        for (size_t k = 1; ok && k < lax; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
        if (!ok) {
            result += kReplacement;
            ++i;
            continue;
        }
        uint32_t cpt = b0 & (0x7F >> lax);
        for (size_t k = 1; k < lax; ++k) cpt = (cpt << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) {
            result += kReplacement;
        } else if (cpt < 0x80) {
            result += static_cast<char>(cpt);
        } else if (cpt < 0x800) {
            result += static_cast<char>(0xC0 | (cpt >> 6));
            result += static_cast<char>(0x80 | (cpt & 0x3F));
        } else if (cpt < 0x10000) {
            result += static_cast<char>(0xE0 | (cpt >> 12));
            result += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
            result += static_cast<char>(0x80 | (cpt & 0x3F));
        } else {
            result += static_cast<char>(0xF0 | (cpt >> 18));
            result += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
            result += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
            result += static_cast<char>(0x80 | (cpt & 0x3F));
        }
        i += lax;
    }
    out = std::move(result);
    return true;
}

}  // namespace specd
