// unicode.h without ICU (KILN_ICU=OFF): ASCII only. For ASCII the answers are exact and fixed (NFC is the
// identity, lower-casing and folding map A-Z to a-z, the categories are those below); any other code point is an
// error rather than a guess, so a tokenizer never returns ids that differ from transformers'.
#include <cstdio>

#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"

namespace kiln::text::unicode {

namespace {
void require_ascii(char32_t c) {
    if (c < 0x80) return;
    char cp[16];
    std::snprintf(cp, sizeof cp, "U+%04X", (unsigned)c);
    KILN_FAIL("the tokenizer needs Unicode data for ", cp,
              " and this build has none (built without ICU, KILN_ICU=OFF: the Windows build); give an ASCII prompt");
}
}  // namespace

bool available() { return false; }

bool is_control(char32_t c) {
    require_ascii(c);
    return c < 0x20 || c == 0x7F;  // Cc
}
bool is_space_separator(char32_t c) {
    require_ascii(c);
    return c == ' ';
}
bool is_letter(char32_t c) {
    require_ascii(c);
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_number(char32_t c) {
    require_ascii(c);
    return c >= '0' && c <= '9';
}
bool is_white_space(char32_t c) {
    require_ascii(c);
    return (c >= 0x09 && c <= 0x0D) || c == ' ';
}
char32_t fold(char32_t c) {
    require_ascii(c);
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}
std::u32string nfc(const std::u32string& s) {
    for (char32_t c : s) require_ascii(c);
    return s;
}
std::u32string lower(const char32_t* b, const char32_t* e) {
    std::u32string out(b, e);
    for (char32_t& c : out) c = fold(c);
    return out;
}

}  // namespace kiln::text::unicode
