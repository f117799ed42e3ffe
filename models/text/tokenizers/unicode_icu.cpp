// unicode.h from ICU (Debian libicu-dev): the Unicode version Python's unicodedata may differ from only in
// code points assigned since.
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"

namespace kiln::text::unicode {

namespace {
uint32_t gc_mask(char32_t c) { return U_GET_GC_MASK((UChar32)c); }

icu::UnicodeString to_icu(const char32_t* b, const char32_t* e) {
    return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(b), (int32_t)(e - b));
}

std::u32string from_icu(const icu::UnicodeString& s) {
    std::u32string out;
    for (int32_t i = 0; i < s.length();) {
        UChar32 c = s.char32At(i);
        out.push_back((char32_t)c);
        i += U16_LENGTH(c);
    }
    return out;
}
}  // namespace

bool available() { return true; }
bool is_control(char32_t c) { return gc_mask(c) & U_GC_C_MASK; }
bool is_space_separator(char32_t c) { return gc_mask(c) & U_GC_ZS_MASK; }
bool is_letter(char32_t c) { return gc_mask(c) & U_GC_L_MASK; }
bool is_number(char32_t c) { return gc_mask(c) & U_GC_N_MASK; }
bool is_white_space(char32_t c) { return u_isUWhiteSpace((UChar32)c); }
char32_t fold(char32_t c) { return (char32_t)u_foldCase((UChar32)c, U_FOLD_CASE_DEFAULT); }

std::u32string nfc(const std::u32string& s) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
    KILN_CHECK(U_SUCCESS(err), "ICU: cannot load the NFC normalizer data (", u_errorName(err), ")");
    icu::UnicodeString out = n->normalize(to_icu(s.data(), s.data() + s.size()), err);
    KILN_CHECK(U_SUCCESS(err), "ICU: NFC normalization failed (", u_errorName(err), ")");
    return from_icu(out);
}

std::u32string lower(const char32_t* b, const char32_t* e) {
    icu::UnicodeString s = to_icu(b, e);
    s.toLower(icu::Locale::getRoot());
    return from_icu(s);
}

}  // namespace kiln::text::unicode
