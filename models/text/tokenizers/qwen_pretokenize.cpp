// Qwen's pre-tokenizer regex as a hand-written matcher: at each position the alternatives are tried in order, each
// with the backtracking the regex engine would do worked out in closed form (comments below), and findall moves on
// to the end of the match.
#include "models/text/tokenizers/qwen_pretokenize.h"

#include "models/text/tokenizers/unicode.h"

namespace kiln::text::qwen {

const char* const kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using U32 = std::u32string;
using unicode::is_letter;
using unicode::is_number;

// \s: the White_Space property (the `regex` module's and Oniguruma's Unicode \s).
bool is_space(char32_t c) { return unicode::is_white_space(c) || (c >= 0x09 && c <= 0x0D); }
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }
// [^\s\p{L}\p{N}]
bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

// Length of the match at s[i] (i < s.size()), or 0 for none.
size_t match_at(const U32& s, size_t i) {
    const size_t n = s.size();
    // (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive by simple case folding ('S, 'ſ).
    if (s[i] == '\'' && i + 1 < n) {
        for (const char* lit : {"s", "t", "re", "ve", "m", "ll", "d"}) {
            size_t k = 0;
            while (lit[k] && i + 1 + k < n && unicode::fold(s[i + 1 + k]) == (char32_t)lit[k]) ++k;
            if (!lit[k]) return 1 + k;
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: the optional character is taken when a letter follows it; a letter itself is not in
    // its class, so otherwise the match starts at a letter or fails.
    size_t j = i;
    if (!is_newline(s[i]) && !is_letter(s[i]) && !is_number(s[i]) && i + 1 < n && is_letter(s[i + 1])) j = i + 1;
    if (is_letter(s[j])) {
        while (j < n && is_letter(s[j])) ++j;
        return j - i;
    }
    if (is_number(s[i])) return 1;  // \p{N}: digits one by one
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*': a space is taken only before a symbol (without it, the symbol class cannot start at
    // a space); the symbol run cannot contain \r or \n, so nothing backtracks.
    j = s[i] == ' ' ? i + 1 : i;
    if (j < n && is_other(s[j])) {
        while (j < n && is_other(s[j])) ++j;
        while (j < n && is_newline(s[j])) ++j;
        return j - i;
    }
    if (!is_space(s[i])) return 0;
    size_t e = i;  // the whitespace run s[i, e)
    while (e < n && is_space(s[e])) ++e;
    // \s*[\r\n]+: \s* backtracks from the end of the run to its last \r or \n, which [\r\n]+ then takes (nothing
    // after it in the run is a newline).
    for (size_t k = e; k > i; --k)
        if (is_newline(s[k - 1])) return k - i;
    // \s+(?!\S): the whole run at the end of the text; before a non-space, the run but its last character.
    if (e == n) return e - i;
    if (e - i >= 2) return e - i - 1;
    return e - i;  // \s+
}

}  // namespace

std::vector<std::string> pre_tokenize(const std::string& utf8) {
    const U32 s = unicode::decode_utf8(utf8);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < s.size();) {
        size_t len = match_at(s, i);
        if (len == 0) {  // cannot happen (every code point is \s, \p{L}, \p{N} or none of them); findall skips it
            ++i;
            continue;
        }
        pieces.push_back(unicode::encode_utf8(s.data() + i, s.data() + i + len));
        i += len;
    }
    return pieces;
}

}  // namespace kiln::text::qwen
