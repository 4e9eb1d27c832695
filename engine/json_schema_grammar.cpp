#include "engine/json_schema_grammar.h"

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/grammar.h"
#include "engine/utf8.h"

namespace specd {

namespace {

// Errors are one line: control characters in what they echo of the schema
// (keys, paths) are escaped, and long names cut.
std::string printable(std::string_view s) {
    std::string out;
    for (const char ch : s.substr(0, 400)) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    if (s.size() > 400) out += "...";
    return out;
}

[[noreturn]] void fail(const std::string& what) { throw Error("json_schema: " + printable(what)); }

// ------------------------------------------------------------ JSON reader ---

struct JsonMember;
struct Json {
    enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
    bool b = false;
    std::string text;                 // Number: as written; String: decoded UTF-8
    std::vector<Json> items;          // Array
    std::vector<JsonMember> members;  // Object, in document order
    const Json* get(std::string_view key) const;
};
// (A struct, not std::pair: a pair of an incomplete type is ill-formed.)
struct JsonMember {
    std::string first;
    Json second;
};
const Json* Json::get(std::string_view key) const {
    for (const auto& [k, v] : members) {
        if (k == key) return &v;
    }
    return nullptr;
}

class JsonReader {
public:
    explicit JsonReader(std::string_view s) : s_(s) {}
    Json document() {
        Json v = value(0);
        space();
        if (pos_ != s_.size()) error("unexpected text after the schema");
        return v;
    }

private:
    [[noreturn]] void error(const std::string& what) const { fail("invalid JSON at byte " + std::to_string(pos_) + ": " + what); }
    void space() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
    }
    bool literal(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return false;
        pos_ += word.size();
        return true;
    }
    Json value(int depth) {
        if (depth > kMaxJsonSchemaDepth) error("nested deeper than " + std::to_string(kMaxJsonSchemaDepth));
        space();
        if (pos_ >= s_.size()) error("unexpected end");
        Json v;
        const char c = s_[pos_];
        if (c == '{') {
            v.kind = Json::Kind::Object;
            ++pos_;
            space();
            if (pos_ < s_.size() && s_[pos_] == '}') {
                ++pos_;
                return v;
            }
            while (true) {
                space();
                if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a member name");
                std::string key = string();
                space();
                if (pos_ >= s_.size() || s_[pos_] != ':') error("expected ':'");
                ++pos_;
                for (const auto& m : v.members) {
                    if (m.first == key) error("duplicate member \"" + key + "\"");
                }
                v.members.push_back({std::move(key), value(depth + 1)});
                space();
                if (pos_ < s_.size() && s_[pos_] == ',') {
                    ++pos_;
                    continue;
                }
                if (pos_ < s_.size() && s_[pos_] == '}') {
                    ++pos_;
                    return v;
                }
                error("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.kind = Json::Kind::Array;
            ++pos_;
            space();
            if (pos_ < s_.size() && s_[pos_] == ']') {
                ++pos_;
                return v;
            }
            while (true) {
                v.items.push_back(value(depth + 1));
                space();
                if (pos_ < s_.size() && s_[pos_] == ',') {
                    ++pos_;
                    continue;
                }
                if (pos_ < s_.size() && s_[pos_] == ']') {
                    ++pos_;
                    return v;
                }
                error("expected ',' or ']'");
            }
        }
        if (c == '"') {
            v.kind = Json::Kind::String;
            v.text = string();
            return v;
        }
        if (literal("true")) {
            v.kind = Json::Kind::Bool;
            v.b = true;
            return v;
        }
        if (literal("false")) {
            v.kind = Json::Kind::Bool;
            return v;
        }
        if (literal("null")) return v;
        if (c == '-' || (c >= '0' && c <= '9')) {
            const size_t start = pos_;
            if (s_[pos_] == '-') ++pos_;
            const auto digits = [&] {
                const size_t d = pos_;
                while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
                if (pos_ == d) error("expected a digit");
            };
            if (pos_ < s_.size() && s_[pos_] == '0') {
                ++pos_;
            } else {
                digits();
            }
            if (pos_ < s_.size() && s_[pos_] == '.') {
                ++pos_;
                digits();
            }
            if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
                ++pos_;
                if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
                digits();
            }
            v.kind = Json::Kind::Number;
            v.text = std::string(s_.substr(start, pos_ - start));
            return v;
        }
        error("unexpected character");
    }
    static void put_utf8(std::string& out, uint32_t cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    uint32_t hex4() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i, ++pos_) {
            if (pos_ >= s_.size()) error("unfinished \\u escape");
            const char h = s_[pos_];
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) error("expected a hex digit");
            v = v * 16 + static_cast<uint32_t>(d);
        }
        return v;
    }
    std::string string() {
        ++pos_;  // the opening quote
        std::string out;
        while (true) {
            if (pos_ >= s_.size()) error("unterminated string");
            const char c = s_[pos_++];
            if (c == '"') {
                if (!is_valid_utf8(out)) error("invalid UTF-8 in a string");
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= s_.size()) error("unfinished escape");
            const char e = s_[pos_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
                        pos_ += 2;
                        const uint32_t lo = hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                        error("unpaired surrogate");
                    }
                    put_utf8(out, cp);
                    break;
                }
                default: error("unknown escape");
            }
        }
    }
    std::string_view s_;
    size_t pos_ = 0;
};

// JSON text of a value as a model must write it for enum/const (compact).
void write_json(const Json& v, std::string& out) {
    switch (v.kind) {
        case Json::Kind::Null: out += "null"; return;
        case Json::Kind::Bool: out += v.b ? "true" : "false"; return;
        case Json::Kind::Number: out += v.text; return;
        case Json::Kind::String: {
            out += '"';
            for (const char ch : v.text) {
                const unsigned char c = static_cast<unsigned char>(ch);
                if (c == '"') {
                    out += "\\\"";
                } else if (c == '\\') {
                    out += "\\\\";
                } else if (c == '\n') {
                    out += "\\n";
                } else if (c == '\r') {
                    out += "\\r";
                } else if (c == '\t') {
                    out += "\\t";
                } else if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
            }
            out += '"';
            return;
        }
        case Json::Kind::Array:
            out += '[';
            for (size_t i = 0; i < v.items.size(); ++i) {
                if (i) out += ',';
                write_json(v.items[i], out);
            }
            out += ']';
            return;
        case Json::Kind::Object:
            out += '{';
            for (size_t i = 0; i < v.members.size(); ++i) {
                if (i) out += ',';
                Json key;
                key.kind = Json::Kind::String;
                key.text = v.members[i].first;
                write_json(key, out);
                out += ':';
                write_json(v.members[i].second, out);
            }
            out += '}';
            return;
    }
}

// A GBNF string literal matching exactly `text`.
std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (const char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

// ---------------------------------------------------------- the converter ---

// The primitive rules, as llama.cpp's (whitespace bounded as in Grammar::json_object()).
const std::map<std::string, std::string>& primitives() {
    static const std::map<std::string, std::string> p = {
        {"space", R"(| " " | "\n" [ \t]{0,20})"},
        {"boolean", R"(("true" | "false") space)"},
        {"null", R"("null" space)"},
        {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
        {"integer", R"(("-"? integral-part) space)"},
        {"number", R"(("-"? integral-part) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? space)"},
        {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
        {"string", R"("\"" char* "\"" space)"},
        {"value", R"(object | array | string | number | boolean | null)"},
        {"object", R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"},
        {"array", R"("[" space ( value ("," space value)* )? "]" space)"},
    };
    return p;
}
// Which primitives each one uses.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
    static const std::map<std::string, std::vector<std::string>> d = {
        {"boolean", {"space"}},
        {"null", {"space"}},
        {"integer", {"integral-part", "space"}},
        {"number", {"integral-part", "space"}},
        {"string", {"char", "space"}},
        {"value", {"object", "array", "string", "number", "boolean", "null"}},
        {"object", {"string", "space", "value"}},
        {"array", {"value", "space"}},
    };
    return d;
}

class Converter {
public:
    explicit Converter(const Json& root) : root_(root) {}

    // The rules of a value of the schema with rule `prefix` its entry and
    // every other rule but the primitives named "<prefix>-...", so that
    // several schemas' rules can share one grammar (engine/tool_call_grammar).
    std::string rules(const std::string& prefix) {
        prefix_ = prefix + "-";
        const std::string value = visit(root_, "value", "");
        std::string out = prefix + " ::= " + value + "\n";
        for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
        return out;
    }

    std::string run() {
        const std::string value = visit(root_, "root-value", "");
        rules_["root"] = "[ \\t\\n]{0,2} " + value;
        std::string out;
        out += "root ::= " + rules_["root"] + "\n";
        for (const auto& [name, body] : rules_) {
            if (name != "root") out += name + " ::= " + body + "\n";
        }
        return out;
    }

private:
    // The rule name for a value of `schema`, adding its rules. `name`: a
    // name for the rule (made unique); `at`: its JSON pointer, for errors.
    std::string visit(const Json& schema, const std::string& name, const std::string& at) {
        if (schema.kind == Json::Kind::Bool) {
            if (!schema.b) fail("at " + where(at) + ": the schema false admits nothing");
            return primitive("value");
        }
        if (schema.kind != Json::Kind::Object) fail("at " + where(at) + ": a schema must be an object or a boolean");
        check_keywords(schema, at);

        if (const Json* ref = schema.get("$ref")) return reference(*ref, at);
        if (const Json* c = schema.get("const")) return add(name, literal_of(*c));
        if (const Json* e = schema.get("enum")) {
            if (e->kind != Json::Kind::Array || e->items.empty()) fail("at " + where(at) + ": enum must be a non-empty array");
            std::string body;
            for (size_t i = 0; i < e->items.size(); ++i) body += (i ? " | " : "") + literal_of(e->items[i]);
            return add(name, "(" + body + ")");
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (const Json* alts = schema.get(key)) {
                if (alts->kind != Json::Kind::Array || alts->items.empty()) fail("at " + where(at) + ": " + key + " must be a non-empty array");
                std::string body;
                for (size_t i = 0; i < alts->items.size(); ++i) {
                    body += (i ? " | " : "") + visit(alts->items[i], name + "-" + std::to_string(i), at + "/" + key + "/" + std::to_string(i));
                }
                return add(name, body);
            }
        }
        const Json* type = schema.get("type");
        if (type && type->kind == Json::Kind::Array) {
            if (type->items.empty()) fail("at " + where(at) + ": type must not be an empty list");
            std::string body;
            for (size_t i = 0; i < type->items.size(); ++i) {
                if (type->items[i].kind != Json::Kind::String) fail("at " + where(at) + ": type lists names of types");
                body += (i ? " | " : "") + typed(schema, type->items[i].text, name + "-" + type->items[i].text, at);
            }
            return add(name, body);
        }
        if (type && type->kind != Json::Kind::String) fail("at " + where(at) + ": type must be a string or a list of strings");
        std::string t = type ? type->text : "";
        if (t.empty()) {
            // Untyped: what its keywords imply, else any value.
            if (schema.get("properties") || schema.get("additionalProperties") || schema.get("required")) t = "object";
            else if (schema.get("items") || schema.get("minItems") || schema.get("maxItems")) t = "array";
            else if (schema.get("minLength") || schema.get("maxLength")) t = "string";
            else return primitive("value");
        }
        return typed(schema, t, name, at);
    }

    std::string typed(const Json& schema, const std::string& t, const std::string& name, const std::string& at) {
        if (t == "string") {
            const Json* lo = schema.get("minLength");
            const Json* hi = schema.get("maxLength");
            if (!lo && !hi) return primitive("string");
            const long min = lo ? count(*lo, "minLength", at) : 0;
            const long max = hi ? count(*hi, "maxLength", at) : -1;
            if (max >= 0 && max < min) fail("at " + where(at) + ": maxLength is below minLength");
            if (max > 1000 || min > 1000) fail("at " + where(at) + ": minLength/maxLength above 1000 are not supported");
            primitive("char");
            primitive("space");
            return add(name, "\"\\\"\" char{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "} \"\\\"\" space");
        }
        if (t == "number" || t == "integer" || t == "boolean" || t == "null") return primitive(t);
        if (t == "array") return array(schema, name, at);
        if (t == "object") return object(schema, name, at);
        fail("at " + where(at) + ": unknown type \"" + t + "\"");
    }

    std::string array(const Json& schema, const std::string& name, const std::string& at) {
        const Json* items = schema.get("items");
        const std::string item = items ? visit(*items, name + "-item", at + "/items") : primitive("value");
        const long min = schema.get("minItems") ? count(*schema.get("minItems"), "minItems", at) : 0;
        const long max = schema.get("maxItems") ? count(*schema.get("maxItems"), "maxItems", at) : -1;
        if (max >= 0 && max < min) fail("at " + where(at) + ": maxItems is below minItems");
        if (max > 1000 || min > 1000) fail("at " + where(at) + ": minItems/maxItems above 1000 are not supported");
        primitive("space");
        std::string body = "\"[\" space ";
        if (max == 0) return add(name, body + "\"]\" space");
        // item ("," space item){min-1, max-1}, optional as a whole when min is 0.
        const std::string rest = "(\",\" space " + item + "){" + std::to_string(min > 0 ? min - 1 : 0) + "," +
                                 (max >= 0 ? std::to_string(max - 1) : "") + "}";
        if (min == 0) body += "( " + item + " " + rest + " )?";
        else body += item + " " + rest;
        return add(name, body + " \"]\" space");
    }

    std::string object(const Json& schema, const std::string& name, const std::string& at) {
        const Json* props = schema.get("properties");
        const Json* extra = schema.get("additionalProperties");
        const Json* required = schema.get("required");
        if (props && props->kind != Json::Kind::Object) fail("at " + where(at) + ": properties must be an object");
        if (required && required->kind != Json::Kind::Array) fail("at " + where(at) + ": required must be an array of names");
        std::set<std::string> must;
        if (required) {
            for (const Json& r : required->items) {
                if (r.kind != Json::Kind::String) fail("at " + where(at) + ": required must be an array of names");
                if (!props || !props->get(r.text))
                    fail("at " + where(at) + ": required property \"" + r.text + "\" is not in properties");
                must.insert(r.text);
            }
        }
        const bool extra_allowed = extra && !(extra->kind == Json::Kind::Bool && !extra->b);
        primitive("space");
        if (!props || props->members.empty()) {
            if (!extra_allowed && extra) return add(name, "\"{\" space \"}\" space");  // additionalProperties false: only {}
            if (!extra || (extra->kind == Json::Kind::Bool && extra->b)) return primitive("object");
            // Values of one schema under any key.
            const std::string v = visit(*extra, name + "-additional", at + "/additionalProperties");
            const std::string kv = add(name + "-kv", primitive("string") + " \":\" space " + v);
            return add(name, "\"{\" space ( " + kv + " (\",\" space " + kv + ")* )? \"}\" space");
        }
        if (extra_allowed)
            fail("at " + where(at) + ": additionalProperties other than false beside properties is not supported (use strict schemas)");
        // Properties in the schema's order, each required one present, each
        // optional one maybe: rule tail(i, first) matches properties i.. given
        // whether one was written before (so commas fall right).
        std::vector<std::string> kvs;
        std::vector<bool> needed;
        for (const auto& [key, sub] : props->members) {
            const std::string v = visit(sub, name + "-" + key, at + "/properties/" + key);
            kvs.push_back(add(name + "-" + key + "-kv", gbnf_literal("\"" + escape_key(key) + "\"") + " space \":\" space " + v));
            needed.push_back(must.count(key) != 0);
        }
        const size_t n = kvs.size();
        std::vector<std::string> tail_first(n + 1), tail_more(n + 1);  // rule bodies; "" = matches nothing more
        for (size_t i = n; i-- > 0;) {
            for (int first = 0; first < 2; ++first) {
                const std::string lead = first ? "" : "\",\" space ";
                const std::string next = tail_more[i + 1];
                std::string take = lead + kvs[i] + (next.empty() ? "" : " " + next);
                std::string body;
                if (needed[i]) {
                    body = take;
                } else {
                    const std::string skip = first ? tail_first[i + 1] : tail_more[i + 1];
                    body = "( " + take + " )" + (skip.empty() ? "?" : " | " + skip);
                    if (!skip.empty()) body = "( " + body + " )";
                }
                const std::string rule = add(name + "-from" + std::to_string(i) + (first ? "-first" : "-more"), body);
                (first ? tail_first : tail_more)[i] = rule;
            }
        }
        return add(name, "\"{\" space " + tail_first[0] + " \"}\" space");
    }

    std::string reference(const Json& ref, const std::string& at) {
        if (ref.kind != Json::Kind::String) fail("at " + where(at) + ": $ref must be a string");
        const std::string& path = ref.text;
        if (auto it = refs_.find(path); it != refs_.end()) return it->second;
        std::string rest;
        if (path.rfind("#/$defs/", 0) == 0) rest = path.substr(8);
        else if (path.rfind("#/definitions/", 0) == 0) rest = path.substr(14);
        else fail("at " + where(at) + ": $ref \"" + path + "\" is not supported (only #/$defs/... and #/definitions/...)");
        const Json* defs = root_.get(path[2] == '$' ? "$defs" : "definitions");
        const Json* target = defs ? defs->get(unescape_pointer(rest)) : nullptr;
        if (!target) fail("at " + where(at) + ": $ref \"" + path + "\" points at nothing");
        // Named before it is visited, so a recursive reference finds it.
        const std::string rule = unique("ref-" + unescape_pointer(rest));
        refs_[path] = rule;
        rules_[rule] = "";  // reserved
        const std::string body = visit(*target, rule + "-value", path.substr(1));
        rules_[rule] = body;
        return rule;
    }

    std::string literal_of(const Json& v) {
        std::string text;
        write_json(v, text);
        primitive("space");
        return gbnf_literal(text) + " space";
    }

    // A JSON object key as it appears between the quotes of its JSON text.
    static std::string escape_key(const std::string& key) {
        Json k;
        k.kind = Json::Kind::String;
        k.text = key;
        std::string out;
        write_json(k, out);
        return out.substr(1, out.size() - 2);
    }
    static std::string unescape_pointer(const std::string& s) {
        std::string out;
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '~' && i + 1 < s.size() && (s[i + 1] == '0' || s[i + 1] == '1')) {
                out += s[i + 1] == '0' ? '~' : '/';
                ++i;
            } else {
                out += s[i];
            }
        }
        return out;
    }
    static std::string where(const std::string& at) { return at.empty() ? "the top" : at; }

    long count(const Json& v, const char* key, const std::string& at) {
        if (v.kind != Json::Kind::Number || v.text.find_first_of(".eE-") != std::string::npos || v.text.size() > 9)
            fail("at " + where(at) + ": " + key + " must be a non-negative integer");
        return std::stol(v.text);
    }

    void check_keywords(const Json& schema, const std::string& at) {
        static const std::set<std::string> known = {
            "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems", "maxItems",
            "anyOf", "oneOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
            // annotations: no effect on what is valid
            "title", "description", "$schema", "$id", "$comment", "default", "examples", "strict"};
        for (const auto& [key, v] : schema.members) {
            if (!known.count(key)) fail("at " + where(at) + ": unsupported keyword \"" + key + "\"");
        }
        int exclusive = 0;
        for (const char* key : {"$ref", "const", "enum", "anyOf", "oneOf"}) exclusive += schema.get(key) != nullptr;
        if (exclusive > 1) fail("at " + where(at) + ": combining $ref, const, enum, anyOf and oneOf in one schema is not supported");
    }

    std::string primitive(const std::string& p) {
        if (!rules_.count(p)) {
            rules_[p] = primitives().at(p);
            if (auto it = primitive_deps().find(p); it != primitive_deps().end()) {
                for (const std::string& d : it->second) primitive(d);
            }
        }
        return p;
    }

    std::string unique(std::string base) {
        for (char& c : base) {
            const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
            if (!ok) c = '-';
        }
        if (base.empty()) base = "r";
        base = prefix_ + base;
        std::string name = base;
        for (int i = 2; rules_.count(name) || primitives().count(name); ++i) name = base + std::to_string(i);
        return name;
    }
    std::string add(const std::string& base, const std::string& body) {
        const std::string name = unique(base);
        rules_[name] = body;
        if (rules_.size() > 10000) fail("the schema makes a grammar of more than 10000 rules");
        return name;
    }

    const Json& root_;
    std::string prefix_;                        // of every rule name but the primitives' ("" for a whole grammar)
    std::map<std::string, std::string> rules_;  // name -> body
    std::map<std::string, std::string> refs_;   // $ref -> rule
};

}  // namespace

std::string json_schema_to_grammar(std::string_view schema_json) {
    if (schema_json.size() > kMaxJsonSchemaBytes)
        fail("the schema is " + std::to_string(schema_json.size()) + " bytes; at most " + std::to_string(kMaxJsonSchemaBytes));
    const Json root = JsonReader(schema_json).document();
    std::string gbnf = Converter(root).run();
    // What the API accepts must not fail later: the grammar parser's own
    // limits (its size, once repetitions are expanded) are checked here.
    try {
        Grammar::parse(gbnf);
    } catch (const Error& e) {
        fail(std::string("the schema's grammar is refused: ") + e.what());
    }
    return gbnf;
}

std::string json_schema_rules(std::string_view schema_json, std::string_view prefix) {
    if (schema_json.size() > kMaxJsonSchemaBytes)
        fail("the schema is " + std::to_string(schema_json.size()) + " bytes; at most " + std::to_string(kMaxJsonSchemaBytes));
    const Json root = JsonReader(schema_json).document();
    return Converter(root).rules(std::string(prefix));
}

}  // namespace specd
