#pragma once
// The pre-tokenizer regex of Qwen2 / Qwen2.5 / Qwen3 (private to the Qwen tokenizer), on code points, with the Unicode
// data (categories, White_Space, case folding) from models/text/tokenizers/unicode.h.
#include <string>
#include <vector>

namespace kiln::text::qwen {

// The pattern, as tokenization_qwen2.py's PRETOKENIZE_REGEX and tokenizer.json's Split pre-tokenizer spell it.
extern const char* const kPattern;

// regex.findall(kPattern, text) (the `regex` module; Rust tokenizers' Split(..., "isolated") gives the same pieces):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N} | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ |
//   \s+(?!\S) | \s+
// Every code point lands in exactly one piece, so the pieces concatenate back to `utf8`. utf8 must be valid UTF-8.
std::vector<std::string> pre_tokenize(const std::string& utf8);

}  // namespace kiln::text::qwen
