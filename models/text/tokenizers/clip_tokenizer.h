#pragma once
// transformers' CLIP tokenizer (tokenization_clip.py, slow, no-ftfy path): BasicTokenizer clean-up and lower-casing,
// CLIP's pre-tokenizer regex, byte-level BPE with "</w>" word ends, BOS/EOS, truncation, padding.
#include "models/text/tokenizers/tokenizer.h"

namespace kiln::text {
std::unique_ptr<Tokenizer> load_clip_tokenizer(const TokenizerFiles& files, const std::string& where);
}  // namespace kiln::text
