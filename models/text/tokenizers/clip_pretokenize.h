#pragma once
// The CLIP tokenizer's text pre-processing as transformers runs it without ftfy (private to the CLIP tokenizer):
// BasicTokenizer(strip_accents=False, do_split_on_punc=False), then CLIP's pre-tokenizer regex.
#include <string>
#include <vector>

namespace kiln::text::clip {

// " ".join(BasicTokenizer.tokenize(text)) split by CLIP's regex
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+  (IGNORECASE);
// returns the matches as UTF-8. utf8 must be valid UTF-8.
std::vector<std::string> pre_tokenize(const std::string& utf8);

// Python's str.strip()/lstrip()/rstrip() on UTF-8 (Python's Unicode whitespace).
std::string py_strip(const std::string& utf8, bool left, bool right);

}  // namespace kiln::text::clip
