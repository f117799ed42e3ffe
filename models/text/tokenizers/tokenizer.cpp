#include "models/text/tokenizers/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/registry/registry.h"
#include "models/text/tokenizers/clip_tokenizer.h"
#include "models/text/tokenizers/gemma_tokenizer.h"
#include "models/text/tokenizers/qwen_tokenizer.h"
#include "models/text/tokenizers/t5_tokenizer.h"
#include "runtime/core/error.h"

namespace kiln::text {

namespace fs = std::filesystem;

namespace {
// tokenizer_config.json's tokenizer_class; "" when the files have none (or an unreadable config: the tokenizer's own
// loader names that problem).
std::string config_class(const TokenizerFiles& files) {
    auto it = files.find("tokenizer_config.json");
    if (it == files.end()) return "";
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (!j.is_object() || !j.contains("tokenizer_class") || !j["tokenizer_class"].is_string()) return "";
    return j["tokenizer_class"].get<std::string>();
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerFiles& files, const std::string& where) {
    // Qwen's folders hold vocab.json + merges.txt too: told apart by tokenizer_class (or tokenizer.json's regex).
    if (is_qwen_tokenizer(files)) return load_qwen_tokenizer(files, where);
    auto present = [&](const std::string& n) { return files.count(n) > 0; };
    const std::string cls = models::tokenizer_class_of(config_class(files), present);
    if (cls.empty()) {
        std::string need;
        for (const auto& f : models::tokenizer_formats()) {
            std::string set;
            for (const auto& n : f.model_files) set += (set.empty() ? "" : " + ") + n;
            need += (need.empty() ? "" : ", ") + set + " (" + models::class_name(f.kind) + ")";
        }
        KILN_FAIL(where, ": no tokenizer files (need one of ", need, ")");
    }
    const models::ComponentClass* c = models::find_component_class(cls);
    KILN_CHECK(c && c->role == models::Role::tokenizer, where, ": unsupported tokenizer class '", cls,
               "' (supported: ", models::class_list({models::Role::tokenizer}), ")");
    const std::string missing = models::missing_tokenizer_files(c->kind, present);
    KILN_CHECK(missing.empty(), where, ": no tokenizer files: ", missing);
    switch (c->kind) {
        case models::ComponentKind::clip_tokenizer:
            return load_clip_tokenizer(files, where);
        case models::ComponentKind::t5_tokenizer:
            return load_t5_tokenizer(files, where);
        case models::ComponentKind::gemma_tokenizer:
            return load_gemma_tokenizer(files, where);
        case models::ComponentKind::qwen2_tokenizer:
            return load_qwen_tokenizer(files, where);
        default:
            break;
    }
    KILN_FAIL("internal: tokenizer class ", cls, " has no loader");
}

TokenizerFiles read_tokenizer_folder(const std::string& dir) {
    TokenizerFiles files;
    auto read = [&](const std::string& name) {
        fs::path p = fs::path(dir) / name;
        if (!fs::exists(p)) return;
        std::ifstream f(p, std::ios::binary);
        KILN_CHECK(f.good(), p.string(), ": cannot open");
        files[name] = std::string(std::istreambuf_iterator<char>(f), {});
    };
    for (const std::string& name : models::tokenizer_file_names()) read(name);
    // The fast tokenizer's file (megabytes: read only where it is the one used) and the chat template.
    const bool other = files.count("vocab.json") || files.count("spiece.model") || files.count("tokenizer.model");
    if (is_qwen_tokenizer(files) || !other) {
        read("tokenizer.json");
        read("chat_template.jinja");
    }
    return files;
}

void check_utf8(const std::string& s, const std::string& what) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = len > 0 && i + (size_t)len <= n;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; ok && k < len; ++k) {
            ok = (p[i + (size_t)k] & 0xC0) == 0x80;
            cp = (cp << 6) | (p[i + (size_t)k] & 0x3F);
        }
        // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
            ok = false;
        KILN_CHECK(ok, what, ": invalid UTF-8 at byte ", i);
        i += (size_t)len;
    }
}

}  // namespace kiln::text
