// transformers' BasicTokenizer (the no-ftfy path of the CLIP tokenizer) and CLIP's pre-tokenizer regex, on code points,
// with the Unicode data (categories, NFC, full lower-casing) from unicode.h. The order of the steps is
// transformers': _clean_text, _tokenize_chinese_chars, NFC, whitespace split, str.lower per word, " ".join,
// regex.findall.
#include "models/text/tokenizers/clip_pretokenize.h"

#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"

namespace kiln::text::clip {

namespace {

using U32 = std::u32string;

using unicode::decode_utf8;
using unicode::encode_utf8;

// Python's str.isspace(): bidirectional class WS, B or S, or category Zs. A fixed set.
bool py_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// BasicTokenizer._is_chinese_char: the CJK Unified Ideographs blocks (not Japanese kana or Korean hangul).
bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// _clean_text + _tokenize_chinese_chars: drop NUL, U+FFFD and category C* except \t \n \r; whitespace
// (\t \n \r space, Zs) becomes " "; CJK ideographs get a space on each side.
U32 clean(const U32& in) {
    U32 out;
    out.reserve(in.size());
    for (char32_t c : in) {
        bool tnr = c == '\t' || c == '\n' || c == '\r';
        if (c == 0 || c == 0xFFFD || (!tnr && unicode::is_control(c))) continue;
        if (tnr || c == ' ' || unicode::is_space_separator(c)) {
            out.push_back(' ');
        } else if (is_cjk(c)) {
            out.push_back(' ');
            out.push_back(c);
            out.push_back(' ');
        } else {
            out.push_back(c);
        }
    }
    return out;
}

using unicode::fold;
using unicode::is_letter;
using unicode::is_number;
using unicode::lower;
using unicode::nfc;

// The regex runs with IGNORECASE: literals compare by simple case folding (the `regex` module's default).
// Length (in code points) of the literal `lit` matched case-insensitively at s[i], or 0.
size_t match_literal(const U32& s, size_t i, const char* lit) {
    size_t n = 0;
    for (; lit[n]; ++n)
        if (i + n >= s.size() || fold(s[i + n]) != fold((char32_t)(unsigned char)lit[n])) return 0;
    return n;
}

bool is_regex_space(char32_t c) { return unicode::is_white_space(c) || (c >= 0x09 && c <= 0x0D); }

// Length of the regex match at s[i] (alternatives tried in order, as the regex engine does), or 0 for none.
size_t match_at(const U32& s, size_t i) {
    static const char* const literals[] = {
        "<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (const char* lit : literals)
        if (size_t n = match_literal(s, i, lit)) return n;
    size_t j = i;
    if (is_letter(s[i])) {  // [\p{L}]+
        while (j < s.size() && is_letter(s[j])) ++j;
        return j - i;
    }
    if (is_number(s[i])) return 1;  // [\p{N}]
    while (j < s.size() && !is_regex_space(s[j]) && !is_letter(s[j]) && !is_number(s[j])) ++j;
    return j - i;  // [^\s\p{L}\p{N}]+ (0 on whitespace)
}

}  // namespace

std::vector<std::string> pre_tokenize(const std::string& utf8) {
    U32 text = nfc(clean(decode_utf8(utf8)));
    // whitespace_tokenize (str.split()), lower-case each word, " ".join.
    U32 joined;
    for (size_t i = 0; i < text.size();) {
        if (py_isspace(text[i])) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < text.size() && !py_isspace(text[j])) ++j;
        if (!joined.empty()) joined.push_back(' ');
        joined += lower(text.data() + i, text.data() + j);
        i = j;
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < joined.size();) {
        size_t n = match_at(joined, i);
        if (n == 0) {
            ++i;
            continue;
        }
        pieces.push_back(encode_utf8(joined.data() + i, joined.data() + i + n));
        i += n;
    }
    return pieces;
}

std::string py_strip(const std::string& utf8, bool left, bool right) {
    U32 s = decode_utf8(utf8);
    size_t b = 0, e = s.size();
    while (left && b < e && py_isspace(s[b])) ++b;
    while (right && e > b && py_isspace(s[e - 1])) --e;
    return encode_utf8(s.data() + b, s.data() + e);
}

}  // namespace kiln::text::clip
