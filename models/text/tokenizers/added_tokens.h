#pragma once
// What transformers' slow tokenizers (PreTrainedTokenizer) share, for the T5 and Gemma tokenizers: the JSON of a
// tokenizer folder, Python's str.lstrip/rstrip, and the added tokens: the text cut around them (Trie.split) with
// each token's strip rules applied to its neighbours.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/text/tokenizers/tokenizer.h"

namespace kiln::text {

// files[name] parsed as a JSON object (an empty object when absent); one line naming `where` and the file if not.
nlohmann::json parse_tokenizer_json(const TokenizerFiles& files, const std::string& name, const std::string& where);
// A token entry: a string or an AddedToken dict {"content": ...}.
std::string token_content(const nlohmann::json& j, const std::string& what);
// j[key] when it is a true boolean.
bool json_flag(const nlohmann::json& j, const char* key);

// Python's str.lstrip() / str.rstrip() (Unicode whitespace, str.isspace()) of valid UTF-8.
std::string py_lstrip(const std::string& s);
std::string py_rstrip(const std::string& s);

// An added token's id and the strip rules tokenize applies to its neighbours.
struct AddedToken {
    int32_t id = 0;
    bool lstrip = false, rstrip = false, single_word = false, special = false;
};
using AddedTokens = std::unordered_map<std::string, AddedToken>;  // content -> token

// PreTrainedTokenizer's added tokens: tokenizer_config.json's added_tokens_decoder (else the older added_tokens.json),
// then every token of `specials` and of the additional_special_tokens lists not among them (transformers adds those as
// special tokens, with the vocabulary's id from vocab_id, -1 when absent, or else the next free id from vocab_size).
AddedTokens read_added_tokens(const TokenizerFiles& files, const nlohmann::json& config,
                              const nlohmann::json& special_map, std::vector<std::string> specials, int32_t vocab_size,
                              const std::function<int32_t(const std::string&)>& vocab_id, const std::string& where);

// PreTrainedTokenizer.tokenize's first half: `text` cut around the added tokens (leftmost match first, the longest
// among those; max_bytes: the longest content), then each token's lstrip/rstrip/single_word applied to its
// neighbours. The parts are added tokens or text between them; some may be empty.
std::vector<std::string> split_added(const std::string& text, const AddedTokens& added, size_t max_bytes);

}  // namespace kiln::text
