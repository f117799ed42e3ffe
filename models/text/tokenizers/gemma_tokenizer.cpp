// transformers 4.47 GemmaTokenizer (slow): PreTrainedTokenizer.tokenize (added tokens split out with a trie, their
// strip rules applied to the neighbours), sp_model.encode(chunk, out_type=str) for the rest, ids through the added
// tokens then sentencepiece's PieceToId, build_inputs_with_special_tokens = [<bos>] + ids + [<eos>] by the flags.
#include "models/text/tokenizers/gemma_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace kiln::text {

namespace {
using nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

GemmaTokenizer::GemmaTokenizer(const TokenizerFiles& files, const std::string& where) {
    auto model = files.find("tokenizer.model");
    KILN_CHECK(model != files.end(), where, ": tokenizer.model missing (GemmaTokenizer needs it)");
    KILN_CHECK(!model->second.empty(), where, " tokenizer.model: empty file");
    sp_ = SentencePieceModel::parse(model->second, where, SentencePieceModel::Algorithm::bpe, "tokenizer.model");

    const json config = parse_tokenizer_json(files, "tokenizer_config.json", where);
    const json special_map = parse_tokenizer_json(files, "special_tokens_map.json", where);
    const std::string cfg_what = where + " tokenizer_config.json";
    auto config_bool = [&](const char* key, bool fallback) {
        if (!config.contains(key) || config[key].is_null()) return fallback;
        KILN_CHECK(config[key].is_boolean(), cfg_what, ": ", key, " is not a boolean");
        return config[key].get<bool>();
    };
    add_bos_ = config_bool("add_bos_token", true);
    add_eos_ = config_bool("add_eos_token", false);
    if (config.contains("model_max_length") && config["model_max_length"].is_number()) {
        const double m = config["model_max_length"].get<double>();
        model_max_length_ = (m > 1e6 || m < 0) ? 0 : static_cast<int>(m);  // transformers' "unset" is 1e30
    }

    // special_tokens_map.json overrides tokenizer_config.json, which overrides GemmaTokenizer's defaults; an
    // explicit null in the config means no such token.
    auto special = [&](const char* key, const char* fallback) {
        if (special_map.contains(key) && !special_map[key].is_null())
            return token_content(special_map[key], where + " special_tokens_map.json " + key);
        if (config.contains(key))
            return config[key].is_null() ? std::string() : token_content(config[key], cfg_what + " " + key);
        return std::string(fallback);
    };
    bos_ = special("bos_token", "<bos>");
    eos_ = special("eos_token", "<eos>");
    pad_ = special("pad_token", "<pad>");
    unk_ = special("unk_token", "<unk>");
    auto vocab_id = [this](const std::string& s) {
        const int32_t id = sp_.piece_to_id(s);
        return sp_.piece(static_cast<size_t>(id)).piece == s ? id : -1;
    };
    added_ = read_added_tokens(files, config, special_map, {bos_, eos_, unk_, pad_}, static_cast<int32_t>(sp_.size()),
                               vocab_id, where);
    for (const auto& [content, t] : added_) max_added_bytes_ = std::max(max_added_bytes_, content.size());

    auto id_of = [&](const std::string& t) { return t.empty() ? -1 : token_id(t); };
    bos_id_ = id_of(bos_);
    eos_id_ = id_of(eos_);
    pad_id_ = id_of(pad_);
    KILN_CHECK(!add_bos_ || bos_id_ >= 0, cfg_what, ": add_bos_token is set but there is no bos_token");
    KILN_CHECK(!add_eos_ || eos_id_ >= 0, cfg_what, ": add_eos_token is set but there is no eos_token");
}

int32_t GemmaTokenizer::token_id(const std::string& token) const {
    auto it = added_.find(token);
    return it != added_.end() ? it->second.id : sp_.piece_to_id(token);
}

std::vector<std::string> GemmaTokenizer::tokenize(const std::string& utf8) const {
    check_utf8(utf8, class_name() + " prompt");
    const std::vector<std::string> parts = split_added(utf8, added_, max_added_bytes_);
    std::vector<std::string> tokens;
    for (const std::string& p : parts) {
        if (p.empty()) continue;
        if (added_.count(p)) {
            tokens.push_back(p);
            continue;
        }
        for (auto& e : sp_.encode(p)) tokens.push_back(std::move(e.piece));
    }
    return tokens;
}

std::vector<int32_t> GemmaTokenizer::encode_ids(const std::string& utf8, bool add_special_tokens) const {
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_) ids.push_back(bos_id_);
    for (const std::string& t : tokenize(utf8)) ids.push_back(token_id(t));
    if (add_special_tokens && add_eos_) ids.push_back(eos_id_);
    return ids;
}

Tokens GemmaTokenizer::encode(const std::string& utf8, int max_length, bool pad) const {
    std::vector<int32_t> ids = encode_ids(utf8, false);
    const size_t n_special = (add_bos_ ? 1 : 0) + (add_eos_ ? 1 : 0);
    Tokens out;
    out.untruncated = ids.size() + n_special;
    if (max_length > 0 && out.untruncated > static_cast<size_t>(max_length)) {
        // truncate_sequences (longest_first, one sequence, right side) leaves room for the special tokens and
        // removes nothing when that would take every id.
        const size_t remove = out.untruncated - static_cast<size_t>(max_length);
        if (ids.size() > remove) ids.resize(ids.size() - remove);
    }
    if (add_bos_) out.ids.push_back(bos_id_);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    if (add_eos_) out.ids.push_back(eos_id_);
    out.mask.assign(out.ids.size(), 1);
    if (max_length > 0 && pad && out.ids.size() < static_cast<size_t>(max_length)) {
        KILN_CHECK(pad_id_ >= 0, class_name(), ": padding to ", max_length, " asked but there is no pad_token");
        out.ids.resize(static_cast<size_t>(max_length), pad_id_);  // padding_side "right"
        out.mask.resize(static_cast<size_t>(max_length), 0);
    }
    return out;
}

TokenizerFiles GemmaTokenizer::read_folder(const std::string& dir) {
    KILN_CHECK(fs::is_directory(dir), dir, ": not a tokenizer folder");
    return read_tokenizer_folder(dir);
}

std::unique_ptr<GemmaTokenizer> GemmaTokenizer::from_folder(const std::string& dir) {
    return std::make_unique<GemmaTokenizer>(read_folder(dir), dir);
}

std::unique_ptr<Tokenizer> load_gemma_tokenizer(const TokenizerFiles& files, const std::string& where) {
    return std::make_unique<GemmaTokenizer>(files, where);
}

}  // namespace kiln::text
