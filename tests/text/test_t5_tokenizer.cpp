// T5Tokenizer against transformers 4.47.1 (slow, sentencepiece 0.1.97): the tok_t5 prompts and the T5
// tokenizers of the pixart / sd3 / flux pipeline fixtures; malformed inputs are kiln::Error.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/text/tokenizers/sentencepiece.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::text;

namespace {

std::vector<int64_t> read_i64(const SafeTensors& st, const std::string& name) {
    Tensor t = st.read(name).astype(DType::i64);
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

// Ragged rows stored as X_flat + X_offsets.
std::vector<std::vector<int64_t>> ragged(const SafeTensors& st, const std::string& base) {
    const auto flat = read_i64(st, base + "_flat");
    const auto off = read_i64(st, base + "_offsets");
    std::vector<std::vector<int64_t>> rows;
    for (size_t i = 0; i + 1 < off.size(); ++i) rows.emplace_back(flat.begin() + off[i], flat.begin() + off[i + 1]);
    return rows;
}

std::vector<int64_t> to64(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

const std::string kDir = "fixtures/tok_t5";

}  // namespace

TEST_CASE("t5 tokenizer matches transformers on every tok_t5 prompt", "[t5_tokenizer]") {
    const auto files = read_tokenizer_folder(test::data_path(kDir));
    auto tok = load_tokenizer(files, kDir);
    REQUIRE(tok->class_name() == "T5Tokenizer");
    CHECK(tok->pad_id() == 0);
    CHECK(tok->model_max_length() == 0);  // the config's 1e30 "unset"

    const auto io = read_json(test::data_path(kDir + "/io.json"));
    const auto prompts = io["prompts"].get<std::vector<std::string>>();
    const SafeTensors st = SafeTensors::open(test::data_path(kDir + "/io.safetensors"));
    const auto ids = ragged(st, "ids");
    const auto ids_no_special = ragged(st, "ids_no_special");
    const auto sp_ids = ragged(st, "sentencepiece_ids");
    const auto ids32 = read_i64(st, "input_ids_max_length_32");
    const auto mask32 = read_i64(st, "attention_mask_max_length_32");
    REQUIRE(ids.size() == prompts.size());
    REQUIRE(ids32.size() == prompts.size() * 32);

    const auto sp = SentencePieceModel::parse(files.at("spiece.model"), kDir);
    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("prompt " << i << ": '" << prompts[i] << "'");
        // raw sentencepiece
        std::vector<int64_t> got_sp;
        for (const auto& e : sp.encode(prompts[i])) got_sp.push_back(e.id);
        CHECK(got_sp == sp_ids[i]);

        const Tokens full = tok->encode(prompts[i], 0);
        CHECK(to64(full.ids) == ids[i]);
        CHECK(full.mask == std::vector<int32_t>(full.ids.size(), 1));
        CHECK(full.untruncated == ids[i].size());
        // add_special_tokens=False is the same ids without the appended </s> (none appended when already last).
        std::vector<int64_t> expect_full = ids_no_special[i];
        if (expect_full.empty() || expect_full.back() != 1) expect_full.push_back(1);
        CHECK(expect_full == ids[i]);

        const Tokens t32 = tok->encode(prompts[i], 32);
        CHECK(to64(t32.ids) == std::vector<int64_t>(ids32.begin() + i * 32, ids32.begin() + (i + 1) * 32));
        CHECK(to64(t32.mask) == std::vector<int64_t>(mask32.begin() + i * 32, mask32.begin() + (i + 1) * 32));
        CHECK(t32.untruncated == ids[i].size());

        const Tokens unpadded = tok->encode(prompts[i], 32, false);
        CHECK(unpadded.ids.size() == std::min<size_t>(32, ids[i].size()));
        CHECK(unpadded.ids.back() == 1);
    }
}

TEST_CASE("t5 tokenizers of the pipeline fixtures give the pipelines' input ids", "[t5_tokenizer]") {
    struct Case {
        std::string pipeline, tokenizer, ids;
        int max_length;
        bool lower_strip;  // PixArt's _text_preprocessing without clean_caption: text.lower().strip()
    };
    for (const Case& c : {Case{"pixart_pipeline", "tokenizer", "text_encoder", 300, true},
                          Case{"sd3_pipeline", "tokenizer_3", "text_encoder_3", 256, false},
                          Case{"flux_pipeline", "tokenizer_2", "text_encoder_2", 512, false}}) {
        INFO(c.pipeline);
        const std::string dir = "fixtures/" + c.pipeline;
        auto tok = load_tokenizer(read_tokenizer_folder(test::data_path(dir + "/" + c.tokenizer)), c.pipeline);
        CHECK(tok->model_max_length() == 512);
        const auto io = read_json(test::data_path(dir + "/io.json"));
        const SafeTensors st = SafeTensors::open(test::data_path(dir + "/io.safetensors"));
        auto prep = [&](std::string s) {
            if (!c.lower_strip) return s;
            for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            const auto b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
            return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
        };
        auto check_rows = [&](const std::vector<std::string>& prompts, const std::string& name) {
            const auto expect = read_i64(st, name);
            REQUIRE(expect.size() == prompts.size() * static_cast<size_t>(c.max_length));
            for (size_t i = 0; i < prompts.size(); ++i) {
                INFO(name << " row " << i << ": '" << prompts[i] << "'");
                const Tokens t = tok->encode(prep(prompts[i]), c.max_length);
                CHECK(to64(t.ids) ==
                      std::vector<int64_t>(expect.begin() + i * c.max_length, expect.begin() + (i + 1) * c.max_length));
            }
        };
        auto as_list = [](const nlohmann::json& j) {
            return j.is_string() ? std::vector<std::string>{j.get<std::string>()} : j.get<std::vector<std::string>>();
        };
        const auto prompts = as_list(io["prompt"]);
        check_rows(prompts, c.ids + "_input_ids");
        if (st.find(c.ids + "_negative_input_ids")) {
            REQUIRE(!io["negative_prompt"].is_null());
            auto neg = as_list(io["negative_prompt"]);
            if (neg.size() == 1 && prompts.size() > 1) neg.resize(prompts.size(), neg[0]);
            check_rows(neg, c.ids + "_negative_input_ids");
            if (c.pipeline == "pixart_pipeline") {  // the attention mask the transformer receives
                const auto mask = read_i64(st, "negative_prompt_attention_mask");
                CHECK(to64(tok->encode(prep(neg[0]), c.max_length).mask) ==
                      std::vector<int64_t>(mask.begin(), mask.begin() + c.max_length));
            }
        }
    }
}

TEST_CASE("t5 tokenizer truncation keeps </s> and reports the untruncated length", "[t5_tokenizer]") {
    auto tok = load_tokenizer(read_tokenizer_folder(test::data_path(kDir)), kDir);
    const Tokens all = tok->encode("a photo of a cat", 0);  // 9 pieces + </s>
    REQUIRE(all.ids.size() == 10);
    const Tokens t = tok->encode("a photo of a cat", 5);
    CHECK(t.ids == std::vector<int32_t>{all.ids[0], all.ids[1], all.ids[2], all.ids[3], 1});
    CHECK(t.mask == std::vector<int32_t>(5, 1));
    CHECK(t.untruncated == 10);
    // A </s> written in the text is not doubled.
    const Tokens e = tok->encode("a cat </s>", 0);
    CHECK(e.ids.back() == 1);
    CHECK(e.ids[e.ids.size() - 2] != 1);
}

TEST_CASE("t5 tokenizer rejects invalid UTF-8 and malformed spiece.model", "[t5_tokenizer]") {
    auto files = read_tokenizer_folder(test::data_path(kDir));
    auto tok = load_tokenizer(files, kDir);
    CHECK_THROWS_AS(tok->encode("a \xff cat", 0), Error);
    CHECK_THROWS_AS(tok->encode("\xe6\x9d", 0), Error);  // truncated sequence
    CHECK_THROWS_AS(tok->encode("\xc0\xaf", 0), Error);  // overlong

    const std::string model = files.at("spiece.model");
    for (size_t cut : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(100), model.size() / 3, model.size() / 2,
                       model.size() - 100, model.size() - 1}) {
        INFO("cut at " << cut);
        auto bad = files;
        bad["spiece.model"] = model.substr(0, cut);
        CHECK_THROWS_AS(load_tokenizer(bad, "truncated"), Error);
    }
    for (unsigned seed = 0; seed < 20; ++seed) {
        std::string garbage(64 + seed * 37, '\0');
        uint32_t x = 2463534242u + seed;
        for (char& ch : garbage) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            ch = static_cast<char>(x);
        }
        auto bad = files;
        bad["spiece.model"] = garbage;
        CHECK_THROWS_AS(load_tokenizer(bad, "garbage"), Error);
    }
    // A corrupted byte inside the model must not crash (it may still parse).
    for (size_t pos = 0; pos < model.size(); pos += model.size() / 50) {
        auto bad = files;
        bad["spiece.model"][pos] = static_cast<char>(0xFF);
        try {
            load_tokenizer(bad, "corrupted")->encode("a photo of a cat, 東京", 16);
        } catch (const Error&) {
        }
    }
}

TEST_CASE("t5 tokenizer legacy=false drops the dummy prefix after special tokens", "[t5_tokenizer]") {
    auto files = read_tokenizer_folder(test::data_path(kDir));
    auto legacy = load_tokenizer(files, kDir);
    auto config = nlohmann::json::parse(files.at("tokenizer_config.json"));
    REQUIRE(config["legacy"] == true);
    config["legacy"] = false;
    files["tokenizer_config.json"] = config.dump();
    auto modern = load_tokenizer(files, kDir);

    auto sp = SentencePieceModel::parse(files.at("spiece.model"), kDir);
    auto sp_ids = [&](const std::string& s) {
        std::vector<int32_t> v;
        for (const auto& e : sp.encode(s)) v.push_back(e.id);
        return v;
    };
    // Plain text: the same ids either way (the leading "▁" comes from add_prefix_space instead).
    for (const char* s : {"a photo of a cat", "  a  photo  ", "Hello, World!", "東京タワーの夜景"})
        CHECK(modern->encode(s, 0).ids == legacy->encode(s, 0).ids);
    // Text glued to a special token: legacy invents a "▁" there, legacy=false does not.
    const int32_t extra0 = 599;
    std::vector<int32_t> expect_legacy = {extra0};
    for (int32_t id : sp_ids("cat")) expect_legacy.push_back(id);
    expect_legacy.push_back(1);
    CHECK(legacy->encode("<extra_id_0>cat", 0).ids == expect_legacy);
    sp.set_add_dummy_prefix(false);
    std::vector<int32_t> expect_modern = {extra0};
    for (int32_t id : sp_ids("cat")) expect_modern.push_back(id);
    expect_modern.push_back(1);
    CHECK(modern->encode("<extra_id_0>cat", 0).ids == expect_modern);
    CHECK(expect_modern != expect_legacy);
}
