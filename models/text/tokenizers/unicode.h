#pragma once
// The Unicode data the CLIP pre-tokenizer needs (private to models/text): general categories, White_Space, NFC,
// full lower-casing and simple case folding. unicode_icu.cpp answers from ICU; unicode_ascii.cpp, built where ICU
// is absent (KILN_ICU=OFF: the Windows cross build), answers exactly for ASCII and throws kiln::Error naming the
// code point for anything else, so that no prompt is tokenized with guessed Unicode data.
#include <string>

namespace kiln::text::unicode {

// Whether this build has the full Unicode data (ICU). Without it, the functions below accept ASCII only.
bool available();

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s);
// UTF-8 (valid: the callers check) to code points, and back.
std::u32string decode_utf8(const std::string& utf8);
std::string encode_utf8(const char32_t* b, const char32_t* e);

bool is_control(char32_t c);          // general category C* (Cc, Cf, Cs, Co, Cn)
bool is_space_separator(char32_t c);  // Zs
bool is_letter(char32_t c);           // L*
bool is_number(char32_t c);           // N*
bool is_white_space(char32_t c);      // the White_Space property
char32_t fold(char32_t c);            // simple case folding
std::u32string nfc(const std::u32string& s);
// Python's str.lower(): full mappings, language-independent (root locale), with Final_Sigma.
std::u32string lower(const char32_t* b, const char32_t* e);

}  // namespace kiln::text::unicode
