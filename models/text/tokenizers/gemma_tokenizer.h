#pragma once
// transformers' GemmaTokenizer (models/gemma/tokenization_gemma.py, slow) over a SentencePiece BPE tokenizer.model:
// added/special tokens written in the text are split out first (with their lstrip/rstrip/single_word rules), every
// other chunk is sentencepiece-encoded as it is (the model's own normaliser, no prefix space), <bos> is prepended and
// <eos> appended as tokenizer_config.json's add_bos_token / add_eos_token say, and tokenizer(text,
// padding="max_length", max_length=N, truncation=True) truncates and pads on the right with the pad token.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/text/tokenizers/added_tokens.h"
#include "models/text/tokenizers/sentencepiece.h"
#include "models/text/tokenizers/tokenizer.h"

namespace kiln::text {

class GemmaTokenizer final : public Tokenizer {
public:
    // From the files of a tokenizer folder: tokenizer.model (required), tokenizer_config.json,
    // special_tokens_map.json, added_tokens.json. `where` names the source in error messages.
    GemmaTokenizer(const TokenizerFiles& files, const std::string& where);
    // Reads those files from a folder on disk (kiln::Error when tokenizer.model is missing or unreadable).
    static std::unique_ptr<GemmaTokenizer> from_folder(const std::string& dir);
    static TokenizerFiles read_folder(const std::string& dir);

    // tokenizer(text, add_special_tokens=...)["input_ids"]: no truncation, no padding.
    std::vector<int32_t> encode_ids(const std::string& utf8, bool add_special_tokens = true) const;
    // tokenizer(text, padding="max_length", max_length=max_length, truncation=True): ids and mask of max_length
    // (longer only when max_length cannot even hold the special tokens: transformers then truncates nothing), and
    // the untruncated length with the special tokens.
    Tokens encode_padded(const std::string& utf8, int max_length) const { return encode(utf8, max_length, true); }
    // Tokenizer: max_length > 0 truncates as above and pads when `pad`; max_length <= 0 does neither.
    Tokens encode(const std::string& utf8, int max_length, bool pad = true) const override;
    // tokenizer.tokenize(text): added-token contents and sentencepiece pieces, no special tokens added.
    std::vector<std::string> tokenize(const std::string& utf8) const;

    int32_t pad_id() const override { return pad_id_; }  // -1 when the config has no pad token
    int32_t bos_id() const { return bos_id_; }
    int32_t eos_id() const { return eos_id_; }
    bool add_bos_token() const { return add_bos_; }
    bool add_eos_token() const { return add_eos_; }
    int model_max_length() const override { return model_max_length_; }
    std::string class_name() const override { return "GemmaTokenizer"; }
    const SentencePieceModel& sentencepiece() const { return sp_; }

private:
    int32_t token_id(const std::string& token) const;

    SentencePieceModel sp_;
    AddedTokens added_;
    size_t max_added_bytes_ = 0;
    std::string bos_, eos_, pad_, unk_;  // special token contents; pad_ empty when there is none
    int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
    bool add_bos_ = true, add_eos_ = false;
    int model_max_length_ = 0;
};

// load_tokenizer's shape: a GemmaTokenizer from tokenizer folder files.
std::unique_ptr<Tokenizer> load_gemma_tokenizer(const TokenizerFiles& files, const std::string& where);

}  // namespace kiln::text
