#pragma once
// Tokenizers for the text encoders, in plain C++ (no Python, no tokenizers library): CLIP's and Qwen's byte-level
// BPE, T5's SentencePiece unigram and Gemma's SentencePiece BPE. A tokenizer is loaded from the files of a tokenizer
// folder as transformers saves it (vocab.json + merges.txt, tokenizer.json, spiece.model or tokenizer.model, plus
// tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja), given by name -> contents
// so that a folder on disk and a Kiln model file (which stores those files) load the same way.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::text {

using TokenizerFiles = std::map<std::string, std::string>;  // file name -> bytes

struct Tokens {
    std::vector<int32_t> ids;   // with the special tokens (CLIP: BOS .. EOS; T5: .. </s>), padded if asked
    std::vector<int32_t> mask;  // 1 = real token, 0 = padding; same length as ids
    size_t untruncated = 0;     // length with special tokens before truncation (diffusers warns when > max)
};

class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    // The ids of one prompt (UTF-8; invalid UTF-8 is a kiln::Error naming the byte offset).
    // max_length > 0: truncate as transformers does with truncation=True (the special tokens are kept:
    // CLIP keeps BOS and EOS around the first max_length-2 tokens, T5 appends </s> to the first
    // max_length-1) and, when pad, pad with the tokenizer's own pad token to max_length
    // (padding="max_length"). max_length <= 0: neither.
    virtual Tokens encode(const std::string& utf8, int max_length, bool pad = true) const = 0;
    virtual int32_t pad_id() const = 0;
    // tokenizer_config.json's model_max_length (CLIP 77; T5 512); values over 1e6 (transformers'
    // "unset" 1e30) are reported as 0.
    virtual int model_max_length() const = 0;
    virtual std::string class_name() const = 0;  // the registry's class_name(ComponentKind::*_tokenizer)
};

// Loads the tokenizer the files describe: tokenizer_config.json's tokenizer_class, else the kind whose model files
// are present (models/registry/registry.h tokenizer_formats(): vocab.json + merges.txt CLIP, spiece.model T5,
// tokenizer.model Gemma, vocab.json + merges.txt or tokenizer.json with tokenizer_class Qwen2Tokenizer
// Qwen). `where` names the source in error messages.
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerFiles& files, const std::string& where);
// Reads the tokenizer files of a folder on disk (the ones listed above that exist; tokenizer.json and
// chat_template.jinja only for a Qwen tokenizer or a folder with none of the other vocabularies).
TokenizerFiles read_tokenizer_folder(const std::string& dir);

// Throws kiln::Error if s is not valid UTF-8 (names `what` and the offset of the first bad byte).
void check_utf8(const std::string& s, const std::string& what);

}  // namespace kiln::text
