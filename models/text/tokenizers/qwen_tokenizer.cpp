// transformers 4.57 Qwen2Tokenizer (slow: tokenization_qwen2.py) and Qwen2TokenizerFast (tokenizer.json through the
// Rust tokenizers): prepare_for_tokenization's NFC, the added-tokens trie (PreTrainedTokenizer.tokenize), the
// pre-tokenizer regex, bytes_to_unicode and BPE by merge rank, ids through the added tokens then the vocabulary.
#include "models/text/tokenizers/qwen_tokenizer.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

#include "models/registry/registry.h"
#include "models/text/tokenizers/qwen_pretokenize.h"
#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"

namespace kiln::text {

namespace {

using nlohmann::json;

bool is_qwen_class(const std::string& cls) {
    const models::ComponentClass* c = models::find_component_class(cls);
    return c && c->kind == models::ComponentKind::qwen2_tokenizer;
}

// The pattern as tokenizer.json stores it (JSON-escaped), to recognise the file without parsing its megabytes.
std::string json_escaped_pattern() {
    std::string s;
    for (const char* p = qwen::kPattern; *p; ++p) s += *p == '\\' ? std::string("\\\\") : std::string(1, *p);
    return s;
}

// Whitespace removed: the chat template is recognised by its statements, not its indentation.
std::string squeeze(const std::string& s) {
    std::string out;
    for (char c : s)
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') out += c;
    return out;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// j[key], or null when absent (without copying: tokenizer.json's model holds the whole vocabulary).
const json& field(const json& j, const char* key) {
    static const json null;
    auto it = j.find(key);
    return it == j.end() ? null : *it;
}

}  // namespace

bool is_qwen_tokenizer(const TokenizerFiles& files) {
    if (auto c = files.find("tokenizer_config.json"); c != files.end()) {
        json j = json::parse(c->second, nullptr, false);
        if (j.is_object() && j.contains("tokenizer_class") && j["tokenizer_class"].is_string())
            return is_qwen_class(j["tokenizer_class"].get<std::string>());
    }
    auto t = files.find("tokenizer.json");
    return t != files.end() && t->second.find(json_escaped_pattern()) != std::string::npos;
}

QwenTokenizer::QwenTokenizer(const TokenizerFiles& files, const std::string& where) : where_(where) {
    const json config = parse_tokenizer_json(files, "tokenizer_config.json", where);
    const json special_map = parse_tokenizer_json(files, "special_tokens_map.json", where);
    try {
        if (files.count("tokenizer.json")) {
            fast_ = true;
            load_fast(files);
        } else {
            load_slow(files, config, special_map);
        }
    } catch (const json::exception& e) {  // a field of an unexpected JSON type
        KILN_FAIL(where, fast_ ? "/tokenizer.json: " : ": ", e.what());
    }

    // special_tokens_map.json overrides tokenizer_config.json, which overrides Qwen2Tokenizer's defaults
    // (eos, pad and unk "<|endoftext|>"); an explicit null means none.
    auto special = [&](const char* key, const char* fallback) {
        if (special_map.contains(key) && !special_map[key].is_null())
            return token_content(special_map[key], where + "/special_tokens_map.json " + key);
        if (config.contains(key))
            return config[key].is_null() ? std::string()
                                         : token_content(config[key], where + "/tokenizer_config.json " + key);
        return std::string(fallback);
    };
    const std::string pad = special("pad_token", "<|endoftext|>"), eos = special("eos_token", "<|endoftext|>");
    for (const std::string* s : {&pad, &eos}) {  // a special token the files lack becomes a new added token
        if (s->empty() || token_id(*s) >= 0) continue;
        AddedToken t;
        t.id = 0;
        for (const auto& [c, a] : added_) t.id = std::max(t.id, a.id + 1);
        t.id = std::max(t.id, static_cast<int32_t>(bpe_.vocab_size()));
        t.special = true;
        added_[*s] = t;
    }
    for (const auto& [content, t] : added_) max_added_bytes_ = std::max(max_added_bytes_, content.size());
    pad_id_ = pad.empty() ? -1 : token_id(pad);
    eos_id_ = eos.empty() ? -1 : token_id(eos);

    if (config.contains("model_max_length") && config["model_max_length"].is_number()) {
        const double m = config["model_max_length"].get<double>();
        model_max_length_ = (m > 1e6 || m < 0) ? 0 : static_cast<int>(m);  // transformers' "unset" is 1e30
    }
    for (const char* side : {"padding_side", "truncation_side"}) {
        const std::string v =
            config.contains(side) && config[side].is_string() ? config[side].get<std::string>() : std::string("right");
        KILN_CHECK(v == "right" || v == "left", where, "/tokenizer_config.json: ", side, " \"", v,
                   "\" is neither \"left\" nor \"right\"");
        (side[0] == 'p' ? pad_left_ : truncate_left_) = v == "left";
    }
    // split_special_tokens: the added tokens are not cut out of the text (tokenized as plain text).
    if (json_flag(config, "split_special_tokens")) max_added_bytes_ = 0;

    if (auto t = files.find("chat_template.jinja"); t != files.end()) {
        chat_template_ = t->second;  // transformers prefers the separate file
    } else if (config.contains("chat_template")) {
        const json& c = config["chat_template"];
        if (c.is_string()) chat_template_ = c.get<std::string>();
        if (c.is_array())  // named templates: [{"name": "default", "template": ...}, ...]
            for (const json& e : c)
                if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
                    e["template"].is_string())
                    chat_template_ = e["template"].get<std::string>();
    }
}

void QwenTokenizer::load_slow(const TokenizerFiles& files, const json& config, const json& special_map) {
    auto vocab = files.find("vocab.json"), merges = files.find("merges.txt");
    KILN_CHECK(vocab != files.end() && merges != files.end(), where_,
               ": a Qwen tokenizer needs tokenizer.json, or vocab.json and merges.txt");
    bpe_.read_vocab(vocab->second, where_ + "/vocab.json");
    bpe_.read_merges(merges->second, ByteBpe::MergesFormat::gpt2, where_ + "/merges.txt");
    added_ = read_added_tokens(
        files, config, special_map, {}, static_cast<int32_t>(bpe_.vocab_size()),
        [this](const std::string& s) { return bpe_.find(s); }, where_);
    nfc_ = true;  // Qwen2Tokenizer.prepare_for_tokenization: unicodedata.normalize("NFC", text)
}

void QwenTokenizer::load_fast(const TokenizerFiles& files) {
    const std::string what = where_ + "/tokenizer.json";
    json tj = json::parse(files.at("tokenizer.json"), nullptr, false);
    KILN_CHECK(!tj.is_discarded() && tj.is_object(), what, ": not a JSON object");

    // normalizer: none, NFC, or a sequence of NFC.
    const json& norm = field(tj, "normalizer");
    auto is_nfc = [](const json& n) { return n.is_object() && n.value("type", "") == "NFC"; };
    const bool nfc_seq = norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers") &&
                         norm["normalizers"].is_array() && !norm["normalizers"].empty() &&
                         std::all_of(norm["normalizers"].begin(), norm["normalizers"].end(), is_nfc);
    KILN_CHECK(norm.is_null() || is_nfc(norm) || nfc_seq, what, ": normalizer ", norm.dump().substr(0, 200),
               " is not supported (Qwen's tokenizer uses NFC)");
    nfc_ = !norm.is_null();

    // pre_tokenizer: Sequence[Split(Qwen's regex, Isolated), ByteLevel(no prefix space, no regex)].
    const json& pre = field(tj, "pre_tokenizer");
    bool qwen_pre = pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
                    pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2;
    if (qwen_pre) {
        const json& split = pre["pretokenizers"][0];
        const json& bl = pre["pretokenizers"][1];
        qwen_pre = split.is_object() && bl.is_object() && split.value("type", "") == "Split" &&
                   split.contains("pattern") && split["pattern"].is_object() &&
                   split["pattern"].value("Regex", "") == qwen::kPattern && split.value("behavior", "") == "Isolated" &&
                   !split.value("invert", false) && bl.value("type", "") == "ByteLevel" &&
                   !bl.value("add_prefix_space", false) && !bl.value("use_regex", true);
    }
    KILN_CHECK(qwen_pre, what, ": pre_tokenizer is not Qwen's (Split on its regex, then ByteLevel without a regex)");
    const json& post = field(tj, "post_processor");
    KILN_CHECK(post.is_null() || (post.is_object() && post.value("type", "") == "ByteLevel"), what, ": post_processor ",
               post.is_object() ? post.value("type", "?") : post.dump(),
               " is not supported (Qwen's adds no tokens: ByteLevel or none)");

    const json& model = field(tj, "model");
    KILN_CHECK(model.is_object() && model.value("type", "") == "BPE", what, ": model is not BPE");
    KILN_CHECK(
        model.contains("vocab") && model["vocab"].is_object() && model.contains("merges") && model["merges"].is_array(),
        what, ": model.vocab / model.merges missing");
    KILN_CHECK(!model.value("byte_fallback", false), what, ": BPE byte_fallback is not supported");
    KILN_CHECK(field(model, "dropout").is_null(), what, ": BPE dropout is not supported");
    const json& prefix = field(model, "continuing_subword_prefix");
    KILN_CHECK(prefix.is_null() || prefix == "", what, ": BPE continuing_subword_prefix is not supported");
    const json& suffix = field(model, "end_of_word_suffix");
    if (suffix.is_string()) bpe_.set_end_of_word_suffix(suffix.get<std::string>());
    bpe_.set_ignore_merges(model.value("ignore_merges", false));

    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(model["vocab"].size());
    for (auto& [token, id] : model["vocab"].items()) {
        KILN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX, what,
                   ": the id of token \"", token, "\" is not a non-negative integer");
        vocab[token] = id.get<int32_t>();
    }
    bpe_.set_vocab(std::move(vocab));
    size_t i = 0;
    for (const json& m : model["merges"]) {  // "first second" (older files) or ["first", "second"]
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const size_t sp = s.find(' ');
            KILN_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, what, ": merge ", i, " \"",
                       s, "\" is not \"first second\"");
            bpe_.add_merge(s.substr(0, sp), s.substr(sp + 1));
        } else {
            KILN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), what, ": merge ", i,
                       " is neither \"first second\" nor [first, second]");
            bpe_.add_merge(m[0].get<std::string>(), m[1].get<std::string>());
        }
        ++i;
    }

    if (field(tj, "added_tokens").is_array()) {
        for (const json& t : tj.at("added_tokens")) {
            KILN_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                           t["content"].is_string() && !t["content"].get<std::string>().empty(),
                       what, ": an added_tokens entry lacks its id or content");
            AddedToken a;
            a.id = t["id"].get<int32_t>();
            a.lstrip = json_flag(t, "lstrip");
            a.rstrip = json_flag(t, "rstrip");
            a.single_word = json_flag(t, "single_word");
            a.special = json_flag(t, "special");
            added_[t["content"].get<std::string>()] = a;
        }
    }
}

std::string QwenTokenizer::class_name() const { return models::class_name(models::ComponentKind::qwen2_tokenizer); }

int32_t QwenTokenizer::token_id(const std::string& token) const {
    auto it = added_.find(token);
    return it != added_.end() ? it->second.id : bpe_.find(token);
}

std::vector<std::string> QwenTokenizer::split(const std::string& utf8) const {
    check_utf8(utf8, where_ + ": prompt");
    // The slow tokenizer normalises the whole text, then cuts out the added tokens; the fast one cuts out the
    // (non-normalized) added tokens first. They agree whenever NFC leaves the added tokens' edges alone (the added
    // tokens are ASCII and start and end with a character nothing composes with).
    const std::string text =
        nfc_ ? [&] {
            const std::u32string cps = unicode::nfc(unicode::decode_utf8(utf8));
            return unicode::encode_utf8(cps.data(), cps.data() + cps.size());
        }()
             : utf8;
    if (max_added_bytes_ == 0) return {text};
    return split_added(text, added_, max_added_bytes_);
}

std::vector<std::string> QwenTokenizer::tokenize(const std::string& utf8) const {
    std::vector<std::string> tokens;
    for (const std::string& part : split(utf8)) {
        if (part.empty()) continue;
        if (max_added_bytes_ > 0 && added_.count(part)) {
            tokens.push_back(part);
            continue;
        }
        for (const std::string& piece : qwen::pre_tokenize(part))
            for (std::string& t : bpe_.merge(piece)) tokens.push_back(std::move(t));
    }
    return tokens;
}

std::vector<int32_t> QwenTokenizer::encode_ids(const std::string& utf8) const {
    auto id_of = [this](const std::string& t) {
        const int32_t id = token_id(t);
        KILN_CHECK(id >= 0, where_, ": BPE token \"", t,
                   "\" is not in the vocabulary (merges and vocabulary disagree)");
        return id;
    };
    std::vector<int32_t> ids;
    for (const std::string& part : split(utf8)) {
        if (part.empty()) continue;
        if (auto a = max_added_bytes_ > 0 ? added_.find(part) : added_.end(); a != added_.end()) {
            ids.push_back(a->second.id);
            continue;
        }
        for (const std::string& piece : qwen::pre_tokenize(part)) bpe_.append_ids(piece, id_of, ids);
    }
    return ids;
}

Tokens QwenTokenizer::encode(const std::string& utf8, int max_length, bool pad) const {
    std::vector<int32_t> ids = encode_ids(utf8);
    Tokens out;
    out.untruncated = ids.size();
    const auto m = static_cast<size_t>(std::max(max_length, 0));
    if (max_length > 0 && ids.size() > m) {
        if (truncate_left_) ids.erase(ids.begin(), ids.end() - static_cast<ptrdiff_t>(m));
        ids.resize(m);
    }
    out.ids = std::move(ids);
    out.mask.assign(out.ids.size(), 1);
    if (max_length > 0 && pad && out.ids.size() < m) {
        KILN_CHECK(pad_id_ >= 0, where_, ": padding to ", max_length, " asked but there is no pad_token");
        const size_t n = m - out.ids.size();
        out.ids.insert(pad_left_ ? out.ids.begin() : out.ids.end(), n, pad_id_);
        out.mask.insert(pad_left_ ? out.mask.begin() : out.mask.end(), n, 0);
    }
    return out;
}

std::string QwenTokenizer::chat_prompt(const std::string& user, bool enable_thinking) const {
    KILN_CHECK(!chat_template_.empty(), where_,
               ": no chat template (neither chat_template.jinja nor tokenizer_config.json's chat_template); the Qwen "
               "pipelines apply one to every prompt");
    // The statements a one-user-turn render goes through, whitespace removed (Qwen2.5 writes the turn with
    // message.content, Qwen3's newer templates with `content`).
    const std::string t = squeeze(chat_template_);
    const bool user_turn = contains(t, R"('<|im_start|>'+message.role+'\n'+message.content+'<|im_end|>'+'\n')") ||
                           contains(t, R"('<|im_start|>'+message.role+'\n'+content+'<|im_end|>'+'\n')");
    const char* gen = R"({%-ifadd_generation_prompt%}{{-'<|im_start|>assistant\n'}})";
    const std::string think = std::string(gen) + R"({%-ifenable_thinkingisdefinedandenable_thinkingisfalse%})"
                                                 R"({{-'<think>\n\n</think>\n\n'}}{%-endif%}{%-endif%})";
    const bool has_think = contains(t, think.c_str());
    const bool plain = contains(t, (std::string(gen) + "{%-endif%}").c_str());
    // Qwen2 / Qwen2.5 open with a default system message: a literal "<|im_start|>system\n" with text baked in
    // ("You are Qwen, ..."). Qwen3 writes that opening only as a literal of its own, before the caller's system
    // message or its tools.
    bool default_system = false;
    const std::string sys = R"(<|im_start|>system\n)";
    for (size_t at = t.find(sys); at != std::string::npos; at = t.find(sys, at + 1)) {
        const size_t next = at + sys.size();
        default_system = default_system || next >= t.size() || (t[next] != '\'' && t[next] != '"');
    }
    KILN_CHECK(user_turn && (has_think || plain) && !default_system, where_,
               ": the chat template is not Qwen3's ChatML one (a user turn '<|im_start|>user\\n...<|im_end|>\\n', no "
               "default system message, then '<|im_start|>assistant\\n'); Kiln renders only that one");
    std::string s = "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
    if (has_think && !enable_thinking) s += "<think>\n\n</think>\n\n";
    return s;
}

Tokens QwenTokenizer::encode_chat(const std::string& user, bool enable_thinking, int max_length) const {
    return encode(chat_prompt(user, enable_thinking), max_length, true);
}

std::unique_ptr<Tokenizer> load_qwen_tokenizer(const TokenizerFiles& files, const std::string& where) {
    return std::make_unique<QwenTokenizer>(files, where);
}

}  // namespace kiln::text
