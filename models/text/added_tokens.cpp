#include "models/text/added_tokens.h"

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
