#pragma once
// transformers' T5 tokenizer (tokenization_t5.py, slow, sentencepiece): the unigram model of spiece.model (its protobuf
// parsed here), sentencepiece's normalisation, Viterbi segmentation, "▁" for whitespace, <unk>, the appended </s>.
#include "models/text/tokenizers/tokenizer.h"

namespace kiln::text {
std::unique_ptr<Tokenizer> load_t5_tokenizer(const TokenizerFiles& files, const std::string& where);
}  // namespace kiln::text
