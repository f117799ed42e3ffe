#pragma once
// The Qwen2 / Qwen3 tokenizer (transformers' Qwen2Tokenizer and Qwen2TokenizerFast), the one Z-Image and FLUX.2
// [klein] give their Qwen3 text encoder: NFC, the added tokens split out of the text (all of them, special or not:
// "<|im_start|>", "<think>", ...), Qwen's pre-tokenizer regex (qwen_pretokenize.h), byte-level BPE. No BOS or EOS is
// added; padding and truncation as tokenizer_config.json says (right by default).
//
// Files: tokenizer.json (the fast tokenizer: model.vocab / model.merges, normalizer, pre-tokenizer, added_tokens) when
// present, else vocab.json + merges.txt with tokenizer_config.json's added_tokens_decoder (or added_tokens.json), as
// the slow tokenizer reads them; tokenizer_config.json and special_tokens_map.json for the pad token and
// model_max_length; chat_template.jinja or tokenizer_config.json's chat_template for chat_prompt().
#include <memory>
#include <string>
#include <vector>

#include "models/text/tokenizers/added_tokens.h"
#include "models/text/tokenizers/byte_bpe.h"
#include "models/text/tokenizers/tokenizer.h"

namespace kiln::text {

class QwenTokenizer final : public Tokenizer {
public:
    // `where` names the source in error messages.
    QwenTokenizer(const TokenizerFiles& files, const std::string& where);

    // tokenizer(text)["input_ids"]: no special tokens are added.
    std::vector<int32_t> encode_ids(const std::string& utf8) const;
    // tokenizer(text, padding="max_length", max_length=max_length, truncation=True) when max_length > 0 (padding only
    // when `pad`): the first max_length ids (truncation_side "right"; a long chat prompt loses its template tail), the
    // pad token on the padding side; untruncated = the id count before truncation. max_length <= 0: neither.
    Tokens encode(const std::string& utf8, int max_length, bool pad = true) const override;

    // tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True,
    // enable_thinking=enable_thinking), for the Qwen3 ChatML template (the one Qwen3 ships and the pipelines'
    // tokenizer folders carry): "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", then, when the
    // template has Qwen3's thinking switch and enable_thinking is false, "<think>\n\n</think>\n\n". ZImagePipeline
    // calls it with enable_thinking=True, Flux2KleinPipeline with False. The user text is inserted as it is. A
    // tokenizer without a chat template, or with one this does not recognise (a default system message, another
    // generation prompt), is a kiln::Error.
    std::string chat_prompt(const std::string& user, bool enable_thinking) const;
    // encode(chat_prompt(user, enable_thinking), max_length, true): the ids and mask a pipeline feeds its Qwen3 text
    // encoder (Z-Image: enable_thinking=true, its rows kept where the mask is 1; klein: false, every row).
    Tokens encode_chat(const std::string& user, bool enable_thinking, int max_length) const;

    // The tokens tokenize() gives (added-token contents and byte-mapped BPE tokens), for tests and messages.
    std::vector<std::string> tokenize(const std::string& utf8) const;

    int32_t pad_id() const override { return pad_id_; }  // -1 when there is no pad token
    int32_t eos_id() const { return eos_id_; }
    int32_t token_id(const std::string& token) const;  // -1 when not a token
    int model_max_length() const override { return model_max_length_; }
    std::string class_name() const override;
    bool from_tokenizer_json() const { return fast_; }

private:
    void load_fast(const TokenizerFiles& files);
    void load_slow(const TokenizerFiles& files, const nlohmann::json& config, const nlohmann::json& special_map);
    std::vector<std::string> split(const std::string& utf8) const;  // NFC (if so) and the added tokens cut out

    std::string where_;
    ByteBpe bpe_;
    AddedTokens added_;
    size_t max_added_bytes_ = 0;
    bool fast_ = false, nfc_ = true, pad_left_ = false, truncate_left_ = false;
    int32_t pad_id_ = -1, eos_id_ = -1;
    int model_max_length_ = 0;
    std::string chat_template_;
};

// load_tokenizer's shape: a QwenTokenizer from tokenizer folder files.
std::unique_ptr<Tokenizer> load_qwen_tokenizer(const TokenizerFiles& files, const std::string& where);
// Whether the files are a Qwen tokenizer's: tokenizer_config.json's tokenizer_class is Qwen2Tokenizer(Fast), or a
// tokenizer.json with Qwen's pre-tokenizer regex.
bool is_qwen_tokenizer(const TokenizerFiles& files);

}  // namespace kiln::text
