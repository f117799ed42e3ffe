#include "models/text/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "models/text/clip_tokenizer.h"
#include "models/text/gemma_tokenizer.h"
#include "models/text/qwen_tokenizer.h"
#include "models/text/t5_tokenizer.h"
#include "runtime/core/error.h"

namespace kiln::text {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerFiles& files, const std::string& where) {
    // Qwen's folders hold vocab.json + merges.txt too: told apart by tokenizer_class (or tokenizer.json's regex).
    if (is_qwen_tokenizer(files)) return load_qwen_tokenizer(files, where);
    if (files.count("vocab.json") && files.count("merges.txt")) return load_clip_tokenizer(files, where);
    if (files.count("spiece.model")) return load_t5_tokenizer(files, where);
    if (files.count("tokenizer.model")) return load_gemma_tokenizer(files, where);
    KILN_FAIL(where, ": no tokenizer files (need vocab.json + merges.txt for CLIP, spiece.model for T5, ",
              "tokenizer.model for Gemma, or tokenizer.json / vocab.json + merges.txt with tokenizer_class ",
              "Qwen2Tokenizer for Qwen)");
}

TokenizerFiles read_tokenizer_folder(const std::string& dir) {
    TokenizerFiles files;
    auto read = [&](const char* name) {
        fs::path p = fs::path(dir) / name;
        if (!fs::exists(p)) return;
        std::ifstream f(p, std::ios::binary);
        KILN_CHECK(f.good(), p.string(), ": cannot open");
        files[name] = std::string(std::istreambuf_iterator<char>(f), {});
    };
    for (const char* name : {"vocab.json", "merges.txt", "spiece.model", "tokenizer.model", "tokenizer_config.json",
                             "special_tokens_map.json", "added_tokens.json"})
        read(name);
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
