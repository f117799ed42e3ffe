// UTF-8 to code points and back, for models/text/tokenizers/unicode.h's users (no Unicode data needed).
#include "models/text/tokenizers/unicode.h"

namespace kiln::text::unicode {

bool valid_utf8(const std::string& s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0, n = s.size(); i < n;) {
        const unsigned c = p[i];
        const size_t len = c < 0x80                  ? 1
                           : (c >= 0xC2 && c < 0xE0) ? 2
                           : (c >= 0xE0 && c < 0xF0) ? 3
                           : (c >= 0xF0 && c < 0xF5) ? 4
                                                     : 0;
        if (len == 0 || i + len > n) return false;
        for (size_t k = 1; k < len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        // The second byte's range excludes overlong forms (E0, F0), surrogates (ED) and past U+10FFFF (F4).
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] >= 0xA0) || (c == 0xF0 && p[i + 1] < 0x90) ||
            (c == 0xF4 && p[i + 1] >= 0x90))
            return false;
        i += len;
    }
    return true;
}

std::u32string decode_utf8(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0; i < s.size();) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < len && i + (size_t)k < s.size(); ++k) cp = (cp << 6) | (p[i + (size_t)k] & 0x3F);
        out.push_back(cp);
        i += (size_t)len;
    }
    return out;
}

namespace {
void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out += (char)c;
    } else if (c < 0x800) {
        out += (char)(0xC0 | (c >> 6));
        out += (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += (char)(0xE0 | (c >> 12));
        out += (char)(0x80 | ((c >> 6) & 0x3F));
        out += (char)(0x80 | (c & 0x3F));
    } else {
        out += (char)(0xF0 | (c >> 18));
        out += (char)(0x80 | ((c >> 12) & 0x3F));
        out += (char)(0x80 | ((c >> 6) & 0x3F));
        out += (char)(0x80 | (c & 0x3F));
    }
}

}  // namespace

std::string encode_utf8(const char32_t* b, const char32_t* e) {
    std::string out;
    for (; b != e; ++b) append_utf8(out, *b);
    return out;
}

}  // namespace kiln::text::unicode
