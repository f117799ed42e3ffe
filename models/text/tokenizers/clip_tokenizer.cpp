// transformers' slow CLIP tokenizer (4.47.1, ftfy not installed). encode() follows tokenizer(text,
// padding="max_length", max_length=N, truncation=True): the added-tokens trie splits special tokens out of the
// text, the rest goes through BasicTokenizer + CLIP's regex (clip_pretokenize.cpp), each regex piece is mapped
// byte by byte through bytes_to_unicode and merged by BPE (word end marked "</w>"), then BOS + ids + EOS,
// truncation to BOS + first N-2 + EOS, padding with the pad token.
#include "models/text/tokenizers/clip_tokenizer.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "models/registry/registry.h"
#include "models/text/tokenizers/byte_bpe.h"
#include "models/text/tokenizers/clip_pretokenize.h"
#include "runtime/core/error.h"

namespace kiln::text {

namespace {

using json = nlohmann::json;

struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false, rstrip = false, single_word = false;
};

json parse_json(const TokenizerFiles& files, const std::string& name, const std::string& where, bool required) {
    auto it = files.find(name);
    if (it == files.end()) {
        KILN_CHECK(!required, where, ": ", name, " is missing");
        return json::object();
    }
    json j = json::parse(it->second, nullptr, false);
    KILN_CHECK(!j.is_discarded(), where, "/", name, ": not valid JSON");
    KILN_CHECK(j.is_object(), where, "/", name, ": expected a JSON object");
    return j;
}

// A special-token entry: "text", {"content": "text", ...} or null (absent token).
bool token_entry(const json& v, AddedToken& t, const std::string& what) {
    if (v.is_null()) return false;
    if (v.is_string()) {
        t = AddedToken{v.get<std::string>()};
        return true;
    }
    KILN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), what,
               ": expected a string or an object with a \"content\" string");
    t.content = v["content"].get<std::string>();
    t.lstrip = v.value("lstrip", false);
    t.rstrip = v.value("rstrip", false);
    t.single_word = v.value("single_word", false);
    return true;
}

class ClipTokenizer final : public Tokenizer {
public:
    ClipTokenizer(const TokenizerFiles& files, const std::string& where);

    Tokens encode(const std::string& utf8, int max_length, bool pad) const override;
    int32_t pad_id() const override { return pad_id_; }
    int model_max_length() const override { return model_max_length_; }
    std::string class_name() const override { return models::class_name(models::ComponentKind::clip_tokenizer); }

private:
    int32_t token_id(const std::string& token) const;
    void append_text_ids(const std::string& text, std::vector<int32_t>& ids) const;
    std::vector<int32_t> tokenize(const std::string& text) const;

    std::string where_;
    ByteBpe bpe_;                    // vocab.json, merges.txt (CLIP's reading), "</w>" word ends
    std::vector<AddedToken> added_;  // the added-tokens trie's entries (special tokens included)
    std::unordered_map<std::string, int32_t> added_ids_;
    int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
    int model_max_length_ = 0;
};

ClipTokenizer::ClipTokenizer(const TokenizerFiles& files, const std::string& where) : where_(where) {
    auto vocab = files.find("vocab.json"), merges = files.find("merges.txt");
    KILN_CHECK(vocab != files.end(), where, ": vocab.json is missing");
    KILN_CHECK(merges != files.end(), where, ": merges.txt is missing");
    bpe_.read_vocab(vocab->second, where + "/vocab.json");
    bpe_.read_merges(merges->second, ByteBpe::MergesFormat::clip, where + "/merges.txt");
    bpe_.set_end_of_word_suffix("</w>");
    json config = parse_json(files, "tokenizer_config.json", where, false);
    json special = parse_json(files, "special_tokens_map.json", where, false);

    // Added tokens: tokenizer_config.json's added_tokens_decoder, or (legacy) added_tokens.json.
    if (config.contains("added_tokens_decoder")) {
        const json& dec = config["added_tokens_decoder"];
        KILN_CHECK(dec.is_object(), where, "/tokenizer_config.json: added_tokens_decoder is not an object");
        for (auto& [idx, v] : dec.items()) {
            AddedToken t;
            token_entry(v, t, where + "/tokenizer_config.json: added_tokens_decoder[" + idx + "]");
            try {
                t.id = (int32_t)std::stol(idx);
            } catch (const std::exception&) {
                KILN_FAIL(where, "/tokenizer_config.json: added_tokens_decoder key \"", idx, "\" is not an id");
            }
            added_.push_back(t);
        }
    } else if (files.count("added_tokens.json")) {
        json j = parse_json(files, "added_tokens.json", where, true);
        for (auto& [content, id] : j.items()) {
            KILN_CHECK(id.is_number_integer(), where, "/added_tokens.json: the id of \"", content,
                       "\" is not an integer");
            added_.push_back(AddedToken{content, id.get<int32_t>()});
        }
    }
    for (const AddedToken& t : added_) added_ids_[t.content] = t.id;

    // Special tokens: special_tokens_map.json overrides tokenizer_config.json, which overrides the tokenizer class's
    // defaults. Those not yet added become added tokens (vocab id, or the next free id), as transformers does.
    auto entry = [&](const std::string& key, const char* fallback, AddedToken& t) {
        if (special.contains(key)) return token_entry(special[key], t, where + "/special_tokens_map.json: " + key);
        if (config.contains(key)) return token_entry(config[key], t, where + "/tokenizer_config.json: " + key);
        if (!fallback) return false;
        t = AddedToken{fallback};
        return true;
    };
    std::vector<AddedToken> specials;
    AddedToken bos, eos, unk, pad, t;
    bool has_bos = entry("bos_token", "<|startoftext|>", bos), has_eos = entry("eos_token", "<|endoftext|>", eos);
    bool has_unk = entry("unk_token", "<|endoftext|>", unk), has_pad = entry("pad_token", "<|endoftext|>", pad);
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
        if (entry(key, nullptr, t)) specials.push_back(t);
    // additional_special_tokens: tokenizer_config.json's list, then special_tokens_map.json's new ones.
    for (const json* src : {&config, &special})
        if (src->contains("additional_special_tokens") && (*src)["additional_special_tokens"].is_array())
            for (const json& v : (*src)["additional_special_tokens"])
                if (token_entry(v, t, where + ": additional_special_tokens")) specials.push_back(t);
    size_t next_id = bpe_.vocab_size();
    for (const auto& [content, id] : added_ids_) next_id += bpe_.find(content) >= 0 ? 0 : 1;
    for (AddedToken& s : specials) {
        if (s.content.empty() || added_ids_.count(s.content)) continue;
        const int32_t v = bpe_.find(s.content);
        s.id = v >= 0 ? v : (int32_t)next_id++;
        added_.push_back(s);
        added_ids_[s.content] = s.id;
    }

    KILN_CHECK(has_unk, where, ": no unk_token");
    const int32_t u = bpe_.find(unk.content);
    KILN_CHECK(u >= 0 || added_ids_.count(unk.content), where, ": unk_token \"", unk.content,
               "\" is not in vocab.json");
    unk_id_ = u >= 0 ? u : added_ids_.at(unk.content);
    KILN_CHECK(has_bos && has_eos, where, ": ", class_name(), " needs bos_token and eos_token");
    bos_id_ = token_id(bos.content);
    eos_id_ = token_id(eos.content);
    pad_id_ = has_pad ? token_id(pad.content) : -1;

    if (config.contains("model_max_length")) {
        const json& m = config["model_max_length"];
        KILN_CHECK(m.is_number(), where, "/tokenizer_config.json: model_max_length is not a number");
        double v = m.get<double>();
        model_max_length_ = v > 1e6 || v < 0 ? 0 : (int)v;
    }
    for (const char* side : {"padding_side", "truncation_side"})
        KILN_CHECK(config.value(side, std::string("right")) == "right", where, "/tokenizer_config.json: ", side,
                   " other than \"right\" is not supported");
}

int32_t ClipTokenizer::token_id(const std::string& token) const {
    if (auto a = added_ids_.find(token); a != added_ids_.end()) return a->second;
    const int32_t v = bpe_.find(token);
    return v >= 0 ? v : unk_id_;
}

void ClipTokenizer::append_text_ids(const std::string& text, std::vector<int32_t>& ids) const {
    for (const std::string& piece : clip::pre_tokenize(text)) {
        // transformers' bpe cache starts with these two, returned whole and without "</w>".
        if (piece == "<|startoftext|>" || piece == "<|endoftext|>")
            ids.push_back(token_id(piece));
        else
            bpe_.append_ids(
                piece, [this](const std::string& t) { return token_id(t); }, ids);
    }
}

// PreTrainedTokenizer.tokenize + convert_tokens_to_ids: the added-tokens trie cuts the text at the leftmost
// (then longest) added token; lstrip/rstrip/single_word are applied to the neighbours; the rest is _tokenize'd.
std::vector<int32_t> ClipTokenizer::tokenize(const std::string& text) const {
    std::vector<std::string> chunks;
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
        const AddedToken* best = nullptr;
        for (const AddedToken& t : added_)
            if (!t.content.empty() && (!best || t.content.size() > best->content.size()) &&
                text.compare(i, t.content.size(), t.content) == 0)
                best = &t;
        if (!best) {
            ++i;
            continue;
        }
        if (i > start) chunks.push_back(text.substr(start, i - start));
        chunks.push_back(best->content);
        i += best->content.size();
        start = i;
    }
    if (start < text.size()) chunks.push_back(text.substr(start));

    auto added = [&](const std::string& s) -> const AddedToken* {
        for (const AddedToken& t : added_)
            if (t.content == s) return &t;
        return nullptr;
    };
    for (size_t i = 0; i < chunks.size(); ++i) {
        const AddedToken* t = added(chunks[i]);
        if (!t) continue;
        // As transformers: the neighbours are taken before stripping; single_word looks at the unstripped ones.
        const std::string left = i > 0 ? chunks[i - 1] : std::string(),
                          right = i + 1 < chunks.size() ? chunks[i + 1] : std::string();
        if (t->rstrip && !right.empty()) chunks[i + 1] = clip::py_strip(right, true, false);
        if (t->lstrip && !left.empty()) chunks[i - 1] = clip::py_strip(left, false, true);
        if (t->single_word && !left.empty() && left.back() != ' ') {
            chunks[i - 1] += chunks[i];
            chunks[i].clear();
        } else if (t->single_word && !right.empty() && right.front() != ' ') {
            chunks[i + 1] = chunks[i] + chunks[i + 1];
            chunks[i].clear();
        }
    }
    std::vector<int32_t> ids;
    for (const std::string& c : chunks) {
        if (c.empty()) continue;
        if (added_ids_.count(c))
            ids.push_back(added_ids_.at(c));
        else
            append_text_ids(c, ids);
    }
    return ids;
}

Tokens ClipTokenizer::encode(const std::string& utf8, int max_length, bool pad) const {
    check_utf8(utf8, where_ + ": prompt");
    KILN_CHECK(max_length <= 0 || max_length >= 2, where_, ": max_length ", max_length,
               " leaves no room for BOS and EOS");
    std::vector<int32_t> body = tokenize(utf8);
    Tokens out;
    out.untruncated = body.size() + 2;
    if (max_length > 0 && body.size() + 2 > (size_t)max_length) body.resize((size_t)max_length - 2);
    out.ids.reserve(max_length > 0 ? (size_t)max_length : body.size() + 2);
    out.ids.push_back(bos_id_);
    out.ids.insert(out.ids.end(), body.begin(), body.end());
    out.ids.push_back(eos_id_);
    out.mask.assign(out.ids.size(), 1);
    if (max_length > 0 && pad && out.ids.size() < (size_t)max_length) {
        KILN_CHECK(pad_id_ >= 0, where_, ": padding asked for but the tokenizer has no pad_token");
        out.ids.resize((size_t)max_length, pad_id_);
        out.mask.resize((size_t)max_length, 0);
    }
    return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_clip_tokenizer(const TokenizerFiles& files, const std::string& where) {
    return std::make_unique<ClipTokenizer>(files, where);
}

}  // namespace kiln::text
