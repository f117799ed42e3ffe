// CLIPTokenizer against transformers 4.47.1's slow CLIPTokenizer (no ftfy): the tok_clip fixture's prompts
// (empty, whitespace, punctuation, unicode, CJK, emoji, special tokens in the text, over-long), and the CLIP
// tokenizers of the SD3 and Flux pipeline fixtures as the pipelines call them (max_length 77).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "models/text/tokenizers/tokenizer.h"
#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::text;
using json = nlohmann::json;

namespace {

std::vector<int64_t> read_i64(const SafeTensors& st, const std::string& name) {
    Tensor t = st.read(name);
    REQUIRE(t.dtype == DType::i64);
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

std::vector<int64_t> widen(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

bool throws_with(const std::function<void()>& f, const std::string& fragment) {
    try {
        f();
    } catch (const Error& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).find(fragment) != std::string::npos);
        return true;
    }
    return false;
}

}  // namespace

TEST_CASE("clip tokenizer matches transformers on the tok_clip prompts", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/tok_clip");
    auto tok = load_tokenizer(read_tokenizer_folder(dir), dir);
    REQUIRE(tok->class_name() == "CLIPTokenizer");
    CHECK(tok->model_max_length() == 0);  // the fixture leaves transformers' "unset" 1e30
    json io = read_json(dir + "/io.json");
    CHECK(tok->pad_id() == io["tokenizer"]["pad_token_id"].get<int32_t>());

    SafeTensors st = SafeTensors::open(dir + "/io.safetensors");
    Tensor flat = st.read("prompt_utf8_flat");
    std::vector<int64_t> offsets = read_i64(st, "prompt_utf8_offsets");
    std::vector<int64_t> ids = read_i64(st, "input_ids"), mask = read_i64(st, "attention_mask");
    std::vector<int64_t> un_flat = read_i64(st, "ids_untruncated_flat");
    std::vector<int64_t> un_off = read_i64(st, "ids_untruncated_offsets");
    const size_t n = offsets.size() - 1, L = 77;
    REQUIRE(n == io["prompts"].size());
    REQUIRE(ids.size() == n * L);
    size_t truncated = 0, refused = 0;
    for (size_t i = 0; i < n; ++i) {
        std::string prompt(reinterpret_cast<const char*>(flat.bytes.data()) + offsets[i],
                           (size_t)(offsets[i + 1] - offsets[i]));
        REQUIRE(prompt == io["prompts"][i].get<std::string>());
        INFO("prompt " << i << ": \"" << prompt << "\"");
        if (!unicode::available() && !std::all_of(prompt.begin(), prompt.end(), [](char c) { return c >= 0; })) {
            // A build without ICU (KILN_ICU=OFF) refuses non-ASCII prompts rather than guess their tokens.
            CHECK(throws_with([&] { tok->encode(prompt, (int)L, true); }, "this build has none"));
            ++refused;
            continue;
        }
        Tokens t = tok->encode(prompt, (int)L, true);
        CHECK(widen(t.ids) == std::vector<int64_t>(ids.begin() + (long)(i * L), ids.begin() + (long)((i + 1) * L)));
        CHECK(widen(t.mask) == std::vector<int64_t>(mask.begin() + (long)(i * L), mask.begin() + (long)((i + 1) * L)));
        std::vector<int64_t> want_un(un_flat.begin() + un_off[i], un_flat.begin() + un_off[i + 1]);
        CHECK(t.untruncated == want_un.size());
        // No max_length: neither truncation nor padding, the whole sequence.
        Tokens full = tok->encode(prompt, 0);
        CHECK(widen(full.ids) == want_un);
        CHECK(full.mask == std::vector<int32_t>(want_un.size(), 1));
        truncated += want_un.size() > L;
    }
    CHECK(truncated >= 2);  // the fixture has over-long prompts, so truncation is exercised
    // Without ICU: the unicode prompts refused, the ASCII ones still compared.
    if (!unicode::available()) CHECK((refused > 0 && refused < n));
}

TEST_CASE("clip tokenizer truncates and pads as asked", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/tok_clip");
    auto tok = load_tokenizer(read_tokenizer_folder(dir), dir);
    Tokens full = tok->encode("a photo of a cat", 0);
    REQUIRE(full.ids.size() == 9);
    Tokens cut = tok->encode("a photo of a cat", 5);  // BOS + first 3 + EOS
    CHECK(cut.ids == std::vector<int32_t>{full.ids[0], full.ids[1], full.ids[2], full.ids[3], full.ids.back()});
    CHECK(cut.untruncated == 9);
    Tokens nopad = tok->encode("a photo of a cat", 20, false);
    CHECK(nopad.ids == full.ids);
    Tokens padded = tok->encode("a photo of a cat", 12, true);
    CHECK(padded.ids.size() == 12);
    CHECK(padded.ids[9] == tok->pad_id());
    CHECK(padded.mask == std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0});
}

TEST_CASE("clip tokenizers of the SD3 and Flux pipelines match their input ids", "[clip_tokenizer]") {
    struct Case {
        const char* pipeline;
        const char* tokenizer;
        const char* encoder;
    };
    for (Case c :
         {Case{"sd3_pipeline", "tokenizer", "text_encoder"}, Case{"sd3_pipeline", "tokenizer_2", "text_encoder_2"},
          Case{"flux_pipeline", "tokenizer", "text_encoder"}}) {
        const std::string dir = test::data_path(std::string("fixtures/") + c.pipeline);
        INFO(c.pipeline << "/" << c.tokenizer);
        auto tok = load_tokenizer(read_tokenizer_folder(dir + "/" + c.tokenizer), dir + "/" + c.tokenizer);
        CHECK(tok->model_max_length() == 77);
        json io = read_json(dir + "/io.json");
        SafeTensors st = SafeTensors::open(dir + "/io.safetensors");
        std::vector<std::pair<std::string, std::string>> runs;  // (tensor, prompt)
        for (size_t b = 0; b < io["prompt"].size(); ++b)
            runs.push_back({std::string(c.encoder) + "_input_ids", io["prompt"][b].get<std::string>()});
        if (io.contains("negative_prompt") && io["negative_prompt"].is_string())
            runs.push_back({std::string(c.encoder) + "_negative_input_ids", io["negative_prompt"].get<std::string>()});
        std::map<std::string, size_t> row;
        for (auto& [name, prompt] : runs) {
            INFO(name << ": \"" << prompt << "\"");
            std::vector<int64_t> want = read_i64(st, name);
            size_t r = row[name]++;
            REQUIRE(want.size() >= (r + 1) * 77);
            Tokens t = tok->encode(prompt, 77, true);
            CHECK(widen(t.ids) ==
                  std::vector<int64_t>(want.begin() + (long)(r * 77), want.begin() + (long)(r * 77 + 77)));
            if (name.find("negative") == std::string::npos && io.contains("untruncated_token_counts"))
                CHECK(t.untruncated == io["untruncated_token_counts"][c.tokenizer][r].get<size_t>());
        }
    }
}

TEST_CASE("clip tokenizer pads with the pad token its files name", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/sd3_pipeline/tokenizer_2");
    TokenizerFiles files = read_tokenizer_folder(dir);
    json vocab = json::parse(files.at("vocab.json"));
    const int32_t bang = vocab.at("!").get<int32_t>(), eot = vocab.at("<|endoftext|>").get<int32_t>();
    REQUIRE(bang != eot);
    CHECK(load_tokenizer(files, dir)->pad_id() == eot);

    for (bool as_object : {false, true}) {
        json special = json::parse(files.at("special_tokens_map.json"));
        special["pad_token"] = as_object ? json{{"content", "!"}, {"lstrip", false}, {"rstrip", false}} : json("!");
        files["special_tokens_map.json"] = special.dump();
        auto tok = load_tokenizer(files, dir + " (pad_token \"!\")");
        CHECK(tok->pad_id() == bang);
        Tokens t = tok->encode("a cat", 77, true);
        CHECK(t.ids[3] == eot);  // EOS stays <|endoftext|>
        CHECK(t.ids[4] == bang);
        CHECK(t.ids[76] == bang);
        CHECK(t.mask[4] == 0);
        // As in transformers, the pad token becomes an added token: a "!" in the text is split out as the
        // token itself, not BPE'd (SD3's real tokenizer_2 behaves so).
        Tokens w = tok->encode("cat!", 0);
        CHECK(w.ids.size() == 4);
        CHECK(w.ids[2] == bang);
    }
}

TEST_CASE("clip tokenizer rejects bad input with a clear error", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/tok_clip");
    const TokenizerFiles good = read_tokenizer_folder(dir);
    auto tok = load_tokenizer(good, dir);
    CHECK(throws_with([&] { tok->encode("a \xC3\x28 cat", 77); }, "invalid UTF-8 at byte 2"));
    CHECK(throws_with([&] { tok->encode("\xED\xA0\x80", 77); }, "invalid UTF-8"));  // a surrogate
    CHECK(throws_with([&] { tok->encode("cat", 1); }, "max_length"));

    auto load_with = [&](const std::string& name, const std::string* contents) {
        TokenizerFiles f = good;
        if (contents)
            f[name] = *contents;
        else
            f.erase(name);
        return [f, dir] { load_tokenizer(f, dir); };
    };
    const std::string not_json = "{\"a\": 1,", array = "[1, 2]", bad_id = "{\"a\": \"x\"}", empty = "";
    const std::string one_sym = "#version: 0.2\nt h\nthe\n", bad_utf8 = "#version: 0.2\nt \xFF\n";
    CHECK(throws_with(load_with("vocab.json", &not_json), "vocab.json: not valid JSON"));
    CHECK(throws_with(load_with("vocab.json", &array), "vocab.json"));
    CHECK(throws_with(load_with("vocab.json", &bad_id), "vocab.json: the id of token \"a\""));
    CHECK(throws_with(load_with("merges.txt", &empty), "merges.txt: no merges"));
    CHECK(throws_with(load_with("merges.txt", &one_sym), "merges.txt: line 3"));
    CHECK(throws_with(load_with("merges.txt", &bad_utf8), "merges.txt: invalid UTF-8"));
    CHECK(throws_with(load_with("tokenizer_config.json", &not_json), "tokenizer_config.json: not valid JSON"));
    // Without vocab.json or merges.txt the folder is not a CLIP tokenizer at all.
    CHECK(throws_with(load_with("vocab.json", nullptr), "no tokenizer files"));
    CHECK(throws_with(load_with("merges.txt", nullptr), "no tokenizer files"));
}

TEST_CASE("clip tokenizer handles special tokens and case in the text", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/tok_clip");
    auto tok = load_tokenizer(read_tokenizer_folder(dir), dir);
    json vocab = json::parse(read_tokenizer_folder(dir).at("vocab.json"));
    const int32_t sot = vocab.at("<|startoftext|>").get<int32_t>(), eot = vocab.at("<|endoftext|>").get<int32_t>();
    // Upper-case special tokens miss the (case-sensitive) trie but, lower-cased, match CLIP's regex and BPE's
    // cache, so they still become the special ids.
    CHECK(tok->encode("<|STARTOFTEXT|>", 0).ids == std::vector<int32_t>{sot, sot, eot});
    CHECK(tok->encode("\tA  photo\r\nOF a CAT ", 0).ids == tok->encode("a photo of a cat", 0).ids);
    if (!unicode::available()) {  // built without ICU: non-ASCII text is refused, naming the code point
        CHECK(throws_with([&] { tok->encode("<|endof\xE2\x80\x8Btext|>", 0); }, "Unicode data for U+200B"));
        return;
    }
    // A control character inside is dropped by the clean-up, after which the regex finds the token.
    CHECK(tok->encode("<|endof\xE2\x80\x8Btext|>", 0).ids == std::vector<int32_t>{sot, eot, eot});
    // Case, NFC and whitespace do not change the ids.
    CHECK(tok->encode("  CAFE\xCC\x81\t\xE2\x80\xA8 Cat ", 0).ids == tok->encode("caf\xC3\xA9 cat", 0).ids);
}

TEST_CASE("clip tokenizer is fast on 77-token prompts", "[clip_tokenizer]") {
    const std::string dir = test::data_path("fixtures/tok_clip");
    auto tok = load_tokenizer(read_tokenizer_folder(dir), dir);
    std::string prompt;
    for (int i = 0; i < 40; ++i) prompt += "word" + std::to_string(i) + " detail, ";
    const int reps = 50;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) CHECK(tok->encode(prompt, 77).ids.size() == 77);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
    INFO(ms << " ms per prompt");
    CHECK(ms < 5.0);  // a loose bound for a loaded CI machine; typically well under 1 ms
}
