// transformers 4.47 slow T5 tokenizer on top of the sentencepiece model: added/special tokens split out of the
// text first (with their lstrip/rstrip/single_word rules), the `legacy` flag, </s> appended, truncation, padding.
#include "models/text/tokenizers/t5_tokenizer.h"

#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "models/registry/registry.h"
#include "models/text/tokenizers/added_tokens.h"
#include "models/text/tokenizers/sentencepiece.h"
#include "runtime/core/error.h"

namespace kiln::text {

namespace {

using nlohmann::json;

constexpr std::string_view kUnderline = "\xe2\x96\x81";  // "▁"

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

class SlowT5Tokenizer final : public Tokenizer {
public:
    SlowT5Tokenizer(const TokenizerFiles& files, const std::string& where);

    Tokens encode(const std::string& utf8, int max_length, bool pad) const override;
    int32_t pad_id() const override { return pad_id_; }
    int model_max_length() const override { return model_max_length_; }
    std::string class_name() const override { return models::class_name(models::ComponentKind::t5_tokenizer); }

    std::vector<std::string> tokenize(const std::string& text) const;

private:
    std::vector<std::string> base_tokenize(const std::string& text) const;
    std::vector<std::string> sp_tokenize(const std::string& text) const;
    int32_t token_id(const std::string& token) const;

    SentencePieceModel sp_;
    AddedTokens added_;
    size_t max_added_bytes_ = 0;
    std::set<std::string> all_special_;
    bool legacy_ = true;
    bool add_prefix_space_ = true;
    std::string unk_token_ = "<unk>";
    size_t unk_token_length_ = 0;
    int32_t eos_id_ = 1, pad_id_ = 0;
    int model_max_length_ = 0;
};

SlowT5Tokenizer::SlowT5Tokenizer(const TokenizerFiles& files, const std::string& where) {
    auto model = files.find("spiece.model");
    KILN_CHECK(model != files.end(), where, ": spiece.model missing");
    sp_ = SentencePieceModel::parse(model->second, where);

    const json config = parse_tokenizer_json(files, "tokenizer_config.json", where);
    const json special_map = parse_tokenizer_json(files, "special_tokens_map.json", where);
    const json added_json = parse_tokenizer_json(files, "added_tokens.json", where);
    const std::string cfg_what = where + " tokenizer_config.json";

    // legacy=None (absent) means legacy=True in transformers, with a warning.
    if (config.contains("legacy") && config["legacy"].is_boolean()) legacy_ = config["legacy"].get<bool>();
    if (config.contains("add_prefix_space") && config["add_prefix_space"].is_boolean())
        add_prefix_space_ = config["add_prefix_space"].get<bool>();
    if (config.contains("model_max_length") && config["model_max_length"].is_number()) {
        const double m = config["model_max_length"].get<double>();
        model_max_length_ = (m > 1e6 || m < 0) ? 0 : static_cast<int>(m);
    }
    // Non-legacy loads the model with add_dummy_prefix = False.
    if (!legacy_) sp_.set_add_dummy_prefix(false);

    // special token names: special_tokens_map.json first, then tokenizer_config.json, then T5's defaults.
    auto special_name = [&](const char* key, const char* fallback) {
        if (special_map.contains(key) && !special_map[key].is_null())
            return token_content(special_map[key], where + " special_tokens_map.json " + key);
        if (config.contains(key) && !config[key].is_null()) return token_content(config[key], cfg_what + " " + key);
        return std::string(fallback);
    };
    const std::string eos = special_name("eos_token", "</s>");
    const std::string pad = special_name("pad_token", "<pad>");
    unk_token_ = special_name("unk_token", "<unk>");
    all_special_ = {eos, pad, unk_token_};
    for (const json* src : {&special_map, &config}) {
        if (src->contains("additional_special_tokens") && (*src)["additional_special_tokens"].is_array())
            for (const json& t : (*src)["additional_special_tokens"])
                all_special_.insert(token_content(t, where + " additional_special_tokens"));
    }

    auto add = [&](const std::string& content, AddedToken t) {
        KILN_CHECK(!content.empty(), where, ": empty added token");
        KILN_CHECK(t.id >= 0, where, ": added token '", content, "' has a negative id");
        added_[content] = t;
        max_added_bytes_ = std::max(max_added_bytes_, content.size());
    };
    if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
        for (const auto& [key, t] : config["added_tokens_decoder"].items()) {
            AddedToken a;
            try {
                a.id = std::stoi(key);
            } catch (const std::exception&) {
                KILN_FAIL(cfg_what, ": added_tokens_decoder key '", key, "' is not an id");
            }
            a.lstrip = json_flag(t, "lstrip");
            a.rstrip = json_flag(t, "rstrip");
            a.single_word = json_flag(t, "single_word");
            a.special = json_flag(t, "special");
            add(token_content(t, cfg_what + " added_tokens_decoder " + key), a);
        }
    } else {
        // Older folders: added_tokens.json plus the special tokens; T5's <extra_id_N> strip on both sides.
        for (const auto& [content, id] : added_json.items()) {
            KILN_CHECK(id.is_number_integer(), where, " added_tokens.json: id of '", content, "' is not an integer");
            const bool extra = content.find("<extra_id_") != std::string::npos;
            add(content, {id.get<int32_t>(), extra, extra, false, all_special_.count(content) > 0});
        }
        for (const std::string& s : {pad, eos, unk_token_})
            if (!added_.count(s)) add(s, {sp_.piece_to_id(s), false, false, false, true});
    }
    for (const auto& [content, t] : added_)
        if (t.special) all_special_.insert(content);

    eos_id_ = token_id(eos);
    pad_id_ = token_id(pad);
    unk_token_length_ = sp_.encode(unk_token_).size();
}

int32_t SlowT5Tokenizer::token_id(const std::string& token) const {
    auto it = added_.find(token);
    return it != added_.end() ? it->second.id : sp_.piece_to_id(token);
}

// PreTrainedTokenizer.tokenize: split, apply each added token's strip rules to its neighbours, then
// sentencepiece on the text between.
std::vector<std::string> SlowT5Tokenizer::base_tokenize(const std::string& text) const {
    const std::vector<std::string> parts = split_added(text, added_, max_added_bytes_);
    std::vector<std::string> tokens;
    for (const std::string& p : parts) {
        if (p.empty()) continue;
        if (added_.count(p)) {
            tokens.push_back(p);
        } else {
            auto pieces = sp_tokenize(p);
            tokens.insert(tokens.end(), pieces.begin(), pieces.end());
        }
    }
    return tokens;
}

// tokenization_t5.py _tokenize: legacy encodes as is; otherwise text starting with a space is encoded behind the
// unk token (so no dummy "▁" is invented) and the unk token's pieces dropped.
std::vector<std::string> SlowT5Tokenizer::sp_tokenize(const std::string& text) const {
    const bool behind_unk = !legacy_ && (starts_with(text, kUnderline) || starts_with(text, " "));
    std::vector<std::string> out;
    for (auto& e : sp_.encode(behind_unk ? unk_token_ + text : text)) out.push_back(std::move(e.piece));
    if (behind_unk && out.size() >= unk_token_length_) out.erase(out.begin(), out.begin() + unk_token_length_);
    return out;
}

std::vector<std::string> SlowT5Tokenizer::tokenize(const std::string& text) const {
    if (legacy_ || text.empty()) return base_tokenize(text);
    std::string t;
    for (size_t i = 0; i < text.size();) {  // "▁" -> " "
        if (text.compare(i, kUnderline.size(), kUnderline) == 0) {
            t += ' ';
            i += kUnderline.size();
        } else {
            t += text[i++];
        }
    }
    if (add_prefix_space_) t = std::string(kUnderline) + t;
    std::vector<std::string> tokens = base_tokenize(t);
    if (tokens.size() > 1 && tokens[0] == kUnderline && all_special_.count(tokens[1])) tokens.erase(tokens.begin());
    return tokens;
}

Tokens SlowT5Tokenizer::encode(const std::string& utf8, int max_length, bool pad) const {
    check_utf8(utf8, class_name() + " prompt");
    std::vector<int32_t> ids;
    for (const std::string& t : tokenize(utf8)) ids.push_back(token_id(t));
    // build_inputs_with_special_tokens: </s> appended unless already last.
    auto with_eos = [&](std::vector<int32_t>& v) {
        if (v.empty() || v.back() != eos_id_) v.push_back(eos_id_);
    };
    Tokens out;
    out.untruncated = ids.size() + ((ids.empty() || ids.back() != eos_id_) ? 1 : 0);
    if (max_length > 0) {
        // truncate_sequences counts one special token; it removes nothing when that would empty the ids.
        const size_t total = ids.size() + 1;
        if (total > static_cast<size_t>(max_length)) {
            const size_t remove = total - static_cast<size_t>(max_length);
            if (ids.size() > remove) ids.resize(ids.size() - remove);
        }
    }
    with_eos(ids);
    out.ids = std::move(ids);
    out.mask.assign(out.ids.size(), 1);
    if (max_length > 0 && pad && out.ids.size() < static_cast<size_t>(max_length)) {
        out.ids.resize(static_cast<size_t>(max_length), pad_id_);
        out.mask.resize(static_cast<size_t>(max_length), 0);
    }
    return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_t5_tokenizer(const TokenizerFiles& files, const std::string& where) {
    return std::make_unique<SlowT5Tokenizer>(files, where);
}

}  // namespace kiln::text
