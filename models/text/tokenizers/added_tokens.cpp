#include "models/text/tokenizers/added_tokens.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace kiln::text {

using nlohmann::json;

json parse_tokenizer_json(const TokenizerFiles& files, const std::string& name, const std::string& where) {
    auto it = files.find(name);
    if (it == files.end()) return json::object();
    json j = json::parse(it->second, nullptr, false);
    KILN_CHECK(!j.is_discarded() && j.is_object(), where, " ", name, ": not a JSON object");
    return j;
}

std::string token_content(const json& j, const std::string& what) {
    if (j.is_string()) return j.get<std::string>();
    KILN_CHECK(j.is_object() && j.contains("content") && j["content"].is_string(), what,
               ": expected a string or {\"content\": ...}");
    return j["content"].get<std::string>();
}

bool json_flag(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

namespace {
// Python's str.isspace() for one code point.
bool is_py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point of the (valid) UTF-8 character at s[i] and its length.
size_t decode_at(const std::string& s, size_t i, uint32_t* cp) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len && i + k < s.size(); ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    *cp = v;
    return len;
}

}  // namespace

std::string py_lstrip(const std::string& s) {
    size_t i = 0;
    for (uint32_t cp; i < s.size();) {
        const size_t n = decode_at(s, i, &cp);
        if (!is_py_space(cp)) break;
        i += n;
    }
    return s.substr(i);
}

std::string py_rstrip(const std::string& s) {
    size_t keep = 0;  // end of the last non-space character
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        i += decode_at(s, i, &cp);
        if (!is_py_space(cp)) keep = i;
    }
    return s.substr(0, keep);
}

AddedTokens read_added_tokens(const TokenizerFiles& files, const json& config, const json& special_map,
                              std::vector<std::string> specials, int32_t vocab_size,
                              const std::function<int32_t(const std::string&)>& vocab_id, const std::string& where) {
    const std::string cfg_what = where + " tokenizer_config.json";
    AddedTokens added;
    int32_t next_id = vocab_size;
    auto add = [&](const std::string& content, AddedToken t) {
        KILN_CHECK(!content.empty(), where, ": empty added token");
        KILN_CHECK(t.id >= 0, where, ": added token '", content, "' has a negative id");
        added[content] = t;
        next_id = std::max(next_id, t.id + 1);
    };
    if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
        for (const auto& [key, t] : config["added_tokens_decoder"].items()) {
            AddedToken a;
            size_t used = 0;
            try {
                a.id = std::stoi(key, &used);
            } catch (const std::exception&) {
            }
            KILN_CHECK(used > 0 && used == key.size(), cfg_what, ": added_tokens_decoder key '", key, "' is not an id");
            a.lstrip = json_flag(t, "lstrip");
            a.rstrip = json_flag(t, "rstrip");
            a.single_word = json_flag(t, "single_word");
            a.special = json_flag(t, "special");
            add(token_content(t, cfg_what + " added_tokens_decoder " + key), a);
        }
    } else {
        const json added_json = parse_tokenizer_json(files, "added_tokens.json", where);
        for (const auto& [content, id] : added_json.items()) {
            KILN_CHECK(id.is_number_integer(), where, " added_tokens.json: id of '", content, "' is not an integer");
            add(content, {id.get<int32_t>()});
        }
    }
    for (const json* src : {&special_map, &config}) {
        if (src->contains("additional_special_tokens") && (*src)["additional_special_tokens"].is_array())
            for (const json& t : (*src)["additional_special_tokens"])
                specials.push_back(token_content(t, where + " additional_special_tokens"));
    }
    for (const std::string& s : specials) {
        if (s.empty() || added.count(s)) continue;
        const int32_t id = vocab_id(s);
        AddedToken t;
        t.id = id >= 0 ? id : next_id;
        t.special = true;
        add(s, t);
    }
    return added;
}

std::vector<std::string> split_added(const std::string& text, const AddedTokens& added, size_t max_bytes) {
    // transformers' Trie.split.
    std::vector<std::string> parts;
    size_t begin = 0;
    for (size_t i = 0; i < text.size();) {
        size_t match = 0;
        for (size_t n = std::min(max_bytes, text.size() - i); n > 0 && match == 0; --n)
            if (added.count(text.substr(i, n))) match = n;
        if (match == 0) {
            ++i;
            continue;
        }
        if (i > begin) parts.push_back(text.substr(begin, i - begin));
        parts.push_back(text.substr(i, match));
        i += match;
        begin = i;
    }
    if (begin < text.size()) parts.push_back(text.substr(begin));
    for (size_t i = 0; i < parts.size(); ++i) {
        auto it = added.find(parts[i]);
        if (it == added.end()) continue;
        const AddedToken& t = it->second;
        const bool has_left = i > 0 && !parts[i - 1].empty();
        const bool has_right = i + 1 < parts.size() && !parts[i + 1].empty();
        if (t.rstrip && has_right) parts[i + 1] = py_lstrip(parts[i + 1]);
        if (t.lstrip && has_left) parts[i - 1] = py_rstrip(parts[i - 1]);
        if (t.single_word && has_left && parts[i - 1].back() != ' ') {
            parts[i - 1] += parts[i];
            parts[i].clear();
        } else if (t.single_word && has_right && parts[i + 1][0] != ' ') {
            parts[i] += parts[i + 1];
            parts[i + 1].clear();
        }
    }
    return parts;
}

}  // namespace kiln::text
