#include "converter/tokenizer_files.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "converter/convert.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/gguf.h"

namespace kiln::converter {

namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    KILN_CHECK(f.good(), p.string(), ": cannot open");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    KILN_CHECK(!f.bad(), p.string(), ": read failed");
    return s;
}

json parse_object(const std::string& text, const std::string& where) {
    json j;
    try {
        j = json::parse(python_json_to_json(text));
    } catch (const std::exception& e) {
        KILN_FAIL(where, ": invalid JSON: ", e.what());
    }
    KILN_CHECK(j.is_object(), where, ": expected a JSON object");
    return j;
}

// The tokenizer kind of a class Kiln reads; nullptr for any other class.
const models::ComponentClass* tokenizer_class(const std::string& cls) {
    const models::ComponentClass* c = models::find_component_class(cls);
    return c && c->role == models::Role::tokenizer ? c : nullptr;
}

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

const std::vector<std::string>& tokenizer_file_names() { return models::tokenizer_file_names(); }

bool is_supported_tokenizer(const std::string& cls) { return tokenizer_class(cls) != nullptr; }

std::string tokenizer_class_of_dir(const std::string& dir) {
    const fs::path d(dir), cfg = d / "tokenizer_config.json";
    std::string config_class;
    if (fs::exists(cfg)) {
        json j = parse_object(read_file(cfg), cfg.string());
        if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string())
            config_class = j["tokenizer_class"].get<std::string>();
    }
    const std::string cls =
        models::tokenizer_class_of(config_class, [&](const std::string& n) { return fs::is_regular_file(d / n); });
    if (!cls.empty()) return cls;
    std::string files;
    for (const auto& f : models::tokenizer_formats()) {
        std::string set;
        for (const auto& n : f.model_files) set += (set.empty() ? "" : " + ") + n;
        files += (files.empty() ? "" : ", ") + set;
    }
    KILN_FAIL(dir, ": not a tokenizer folder (no tokenizer_config.json with tokenizer_class, nor ", files, ")");
}

FileMap read_tokenizer_dir(const std::string& dir, const std::string& cls, std::vector<std::string>* skipped) {
    const fs::path d(dir);
    KILN_CHECK(fs::is_directory(d), dir, ": tokenizer folder does not exist");
    const models::ComponentClass* tc = tokenizer_class(cls);
    KILN_CHECK(tc, dir, ": unsupported tokenizer class '", cls,
               "' (supported: ", models::class_list({models::Role::tokenizer}), ")");
    const auto& names = tokenizer_file_names();
    FileMap files;
    for (auto& n : names)
        if (fs::exists(d / n)) files[n] = read_file(d / n);
    if (skipped)
        for (auto& e : fs::directory_iterator(d))
            if (e.is_regular_file() &&
                std::find(names.begin(), names.end(), e.path().filename().string()) == names.end())
                skipped->push_back(e.path().filename().string());
    // The Qwen tokenizer also reads its chat template (the pipelines apply it to every prompt) and, in a fast-only
    // folder, tokenizer.json (megabytes: kept only where vocab.json + merges.txt are absent).
    const bool qwen = tc->kind == models::ComponentKind::qwen2_tokenizer;
    if (qwen && fs::exists(d / "chat_template.jinja"))
        files["chat_template.jinja"] = read_file(d / "chat_template.jinja");
    const std::string missing =
        models::missing_tokenizer_files(tc->kind, [&](const std::string& n) { return files.count(n) > 0; });
    if (qwen && !missing.empty() && fs::exists(d / "tokenizer.json")) {
        files["tokenizer.json"] = read_file(d / "tokenizer.json");
        KILN_CHECK(!files.at("tokenizer.json").empty(), (d / "tokenizer.json").string(), ": empty file");
    } else {
        const std::string fast_hint = fs::exists(d / "tokenizer.json")
                                          ? " (only tokenizer.json: fast-only tokenizer folders are read for Qwen only)"
                                          : "";
        KILN_CHECK(missing.empty(), dir, ": ", missing, fast_hint);
        for (const auto& n : models::tokenizer_format(tc->kind).model_files)
            KILN_CHECK(!files.at(n).empty(), (d / n).string(), ": empty file");
    }
    if (skipped)
        skipped->erase(
            std::remove_if(skipped->begin(), skipped->end(), [&](const std::string& n) { return files.count(n) > 0; }),
            skipped->end());
    for (auto& [n, text] : files)
        if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) parse_object(text, (d / n).string());
    return files;
}

void write_tokenizer_files(GgufWriter& w, const std::string& comp, const FileMap& files) {
    const std::string p = "kiln." + comp + ".";
    std::vector<std::string> names, encodings;
    for (auto& [n, bytes] : files) {
        const bool text = is_utf8(bytes);
        names.push_back(n);
        encodings.push_back(text ? "utf8" : "base64");
        w.set_string(p + "file." + n, text ? bytes : base64_encode(bytes));
    }
    w.set_string_array(p + "files", names);
    w.set_string_array(p + "file_encodings", encodings);
}

FileMap read_tokenizer_files(const GgufFile& f, const std::string& comp) {
    const std::string p = "kiln." + comp + ".";
    KILN_CHECK(f.has(p + "files"), f.path(), ": component '", comp, "' has no tokenizer files (no ", p, "files)");
    auto names = f.get_string_array(p + "files");
    auto enc = f.get_string_array(p + "file_encodings");
    KILN_CHECK(enc.size() == names.size(), f.path(), ": ", p, "file_encodings has ", enc.size(), " entries for ",
               names.size(), " files");
    FileMap out;
    for (size_t i = 0; i < names.size(); ++i) {
        const std::string key = p + "file." + names[i];
        std::string s = f.get_string(key);
        if (enc[i] == "base64")
            out[names[i]] = base64_decode(s, f.path() + ": " + key);
        else if (enc[i] == "utf8")
            out[names[i]] = std::move(s);
        else
            KILN_FAIL(f.path(), ": ", p, "file_encodings: unknown encoding '", enc[i], "' for ", names[i]);
    }
    return out;
}

std::string base64_encode(const std::string& in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    const auto* b = reinterpret_cast<const unsigned char*>(in.data());
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (uint32_t)b[i + 1] << 8 | b[i + 2];
        for (int k = 3; k >= 0; --k) out += kB64[(v >> (6 * k)) & 63];
    }
    if (i < in.size()) {  // 1 or 2 bytes left: pad with '='
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < in.size() ? (uint32_t)b[i + 1] << 8 : 0);
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::string base64_decode(const std::string& s, const std::string& where) {
    KILN_CHECK(s.size() % 4 == 0, where, ": invalid base64 (length ", s.size(), " is not a multiple of 4)");
    std::string out;
    out.reserve(s.size() / 4 * 3);
    for (size_t i = 0; i < s.size(); i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; ++k) {
            char ch = s[i + k];
            int d;
            if (ch == '=' && i + 4 == s.size() && k >= 2) {
                d = 0;
                pad++;
            } else {
                const char* pos = ch ? std::strchr(kB64, ch) : nullptr;
                KILN_CHECK(pos && !pad, where, ": invalid base64 at offset ", i + k);
                d = (int)(pos - kB64);
            }
            v = v << 6 | (uint32_t)d;
        }
        out += (char)(v >> 16);
        if (pad < 2) out += (char)(v >> 8 & 0xFF);
        if (pad < 1) out += (char)(v & 0xFF);
    }
    return out;
}

bool is_utf8(const std::string& s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + (size_t)len > n) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        for (int k = 1; k < len; ++k) {
            if ((p[i + (size_t)k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + (size_t)k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return false;
        i += (size_t)len;
    }
    return true;
}

}  // namespace kiln::converter
