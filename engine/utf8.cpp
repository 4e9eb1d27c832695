#include "engine/utf8.h"

namespace specd {

void Utf8Repair::reset() {
    n_pending_ = 0;
    n_needed_ = 0;
    lower_ = 0x80;
    upper_ = 0xBF;
}

void Utf8Repair::feed(std::string_view bytes, std::string& out) {
    for (size_t i = 0; i < bytes.size();) {
        const auto b = static_cast<uint8_t>(bytes[i]);
        if (n_needed_ == 0) {
            ++i;
            if (b <= 0x7F) {
                out += static_cast<char>(b);
                continue;
            }
            if (b >= 0xC2 && b <= 0xDF) {
                n_needed_ = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                if (b == 0xE0) lower_ = 0xA0;  // no overlong forms
                if (b == 0xED) upper_ = 0x9F;  // no surrogates
                n_needed_ = 2;
            } else if (b >= 0xF0 && b <= 0xF4) {
                if (b == 0xF0) lower_ = 0x90;
                if (b == 0xF4) upper_ = 0x8F;  // nothing above U+10FFFF
                n_needed_ = 3;
            } else {
                out += kUtf8Replacement;
                continue;
            }
            pending_[0] = b;
            n_pending_ = 1;
            continue;
        }
        if (b < lower_ || b > upper_) {
            // The character broke off: replace what we have, and read b afresh.
            out += kUtf8Replacement;
            reset();
            continue;
        }
        ++i;
        lower_ = 0x80;
        upper_ = 0xBF;
        pending_[n_pending_++] = b;
        if (--n_needed_ == 0) {
            out.append(reinterpret_cast<const char*>(pending_), static_cast<size_t>(n_pending_));
            n_pending_ = 0;
        }
    }
}

void Utf8Repair::finish(std::string& out) {
    if (n_needed_ > 0) out += kUtf8Replacement;
    reset();
}

std::string valid_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    Utf8Repair repair;
    repair.feed(bytes, out);
    repair.finish(out);
    return out;
}

bool is_valid_utf8(std::string_view bytes) { return valid_utf8(bytes) == bytes; }

std::string utf8_excerpt(std::string_view bytes, size_t max_bytes) {
    std::string text = valid_utf8(bytes);
    if (text.size() <= max_bytes) return text;
    size_t cut = max_bytes;
    while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;  // back to a character start
    text.resize(cut);
    return text + "...";
}

}  // namespace specd
