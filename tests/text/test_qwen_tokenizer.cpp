// Qwen2Tokenizer against transformers 4.57.3 (slow Qwen2Tokenizer; a tokenizer.json implementation gave the same ids)
// on the tok_qwen3 fixture (the real Qwen3 vocabulary cut to the merges its texts use: tests/data/fixtures/tok_qwen3/
// README.md): raw prompts, the chat templates ZImagePipeline and Flux2KleinPipeline apply, their padded and truncated
// rows; the z_image / klein pipeline fixtures' own tokenizer and ids; the pre-tokenizer regex against Python's
// `regex` module; byte-level BPE against transformers' bpe() written out plainly.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "models/text/tokenizers/byte_bpe.h"
#include "models/text/tokenizers/qwen_pretokenize.h"
#include "models/text/tokenizers/qwen_tokenizer.h"
#include "models/text/tokenizers/unicode.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::text;
using json = nlohmann::json;

namespace {

const char* kDir = "fixtures/tok_qwen3";

std::vector<int64_t> read_i64(const SafeTensors& st, const std::string& name) {
    Tensor t = st.read(name);
    REQUIRE(t.dtype == DType::i64);
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

// A ragged X_flat / X_offsets pair as rows.
std::vector<std::vector<int64_t>> ragged(const SafeTensors& st, const std::string& name) {
    std::vector<int64_t> flat = read_i64(st, name + "_flat"), off = read_i64(st, name + "_offsets");
    std::vector<std::vector<int64_t>> rows;
    for (size_t i = 0; i + 1 < off.size(); ++i) rows.emplace_back(flat.begin() + off[i], flat.begin() + off[i + 1]);
    return rows;
}

std::vector<std::string> ragged_text(const SafeTensors& st, const std::string& name) {
    Tensor flat = st.read(name + "_flat");
    std::vector<int64_t> off = read_i64(st, name + "_offsets");
    std::vector<std::string> rows;
    for (size_t i = 0; i + 1 < off.size(); ++i)
        rows.emplace_back(reinterpret_cast<const char*>(flat.bytes.data()) + off[i], (size_t)(off[i + 1] - off[i]));
    return rows;
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

std::vector<int64_t> widen(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

bool is_ascii(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// A build without ICU (KILN_ICU=OFF: the Windows cross build) refuses non-ASCII text rather than guess its tokens:
// true (after checking that refusal) when `text` is such a case, to be skipped.
bool refused_without_icu(const std::string& text, const std::function<void()>& f) {
    if (unicode::available() || is_ascii(text)) return false;
    std::string e;
    try {
        f();
    } catch (const Error& err) {
        e = err.what();
    }
    INFO(e);
    CHECK(e.find("this build has none") != std::string::npos);
    return true;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TokenizerFiles fixture_files() { return read_tokenizer_folder(test::data_path(kDir)); }

QwenTokenizer fixture_tokenizer() { return QwenTokenizer(fixture_files(), kDir); }

// The padded row transformers gives: the real ids, then the pad id up to M; mask 1 then 0.
void check_row(const Tokens& t, const std::vector<int64_t>& real, size_t M, int32_t pad) {
    REQUIRE(t.ids.size() == M);
    REQUIRE(t.mask.size() == M);
    REQUIRE(real.size() <= M);
    std::vector<int64_t> want = real, mask(real.size(), 1);
    want.resize(M, pad);
    mask.resize(M, 0);
    CHECK(widen(t.ids) == want);
    CHECK(widen(t.mask) == mask);
}

}  // namespace

TEST_CASE("qwen tokenizer matches transformers on the tok_qwen3 prompts", "[qwen_tokenizer]") {
    const TokenizerFiles files = fixture_files();
    REQUIRE(files.count("vocab.json"));
    REQUIRE(files.count("chat_template.jinja"));
    auto any = load_tokenizer(files, kDir);  // tokenizer_class Qwen2Tokenizer: not CLIP, though vocab.json is there
    REQUIRE(any->class_name() == "Qwen2Tokenizer");
    const QwenTokenizer& tok = dynamic_cast<const QwenTokenizer&>(*any);
    CHECK_FALSE(tok.from_tokenizer_json());
    json io = read_json(test::data_path(kDir) + "/io.json");
    CHECK(tok.pad_id() == io["tokenizer"]["special_tokens"]["pad"][1].get<int32_t>());
    CHECK(tok.eos_id() == io["tokenizer"]["special_tokens"]["eos"][1].get<int32_t>());
    CHECK(tok.model_max_length() == io["tokenizer"]["model_max_length"].get<int>());
    for (auto& [id, entry] : io["tokenizer"]["added_tokens"].items())
        CHECK(tok.token_id(entry[0].get<std::string>()) == std::stoi(id));

    SafeTensors st = SafeTensors::open(test::data_path(kDir) + "/io.safetensors");
    const std::vector<std::string> prompts = ragged_text(st, "prompt_utf8");
    const auto ids = ragged(st, "ids");
    REQUIRE(prompts.size() == io["prompts"].size());
    REQUIRE(ids.size() == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("prompt " << i << ": " << prompts[i]);
        CHECK(prompts[i] == io["prompts"][i].get<std::string>());
        if (refused_without_icu(prompts[i], [&] { tok.encode_ids(prompts[i]); })) continue;
        CHECK(widen(tok.encode_ids(prompts[i])) == ids[i]);
        Tokens t = tok.encode(prompts[i], 0);  // no max_length: neither truncation nor padding
        CHECK(widen(t.ids) == ids[i]);
        CHECK(t.mask == std::vector<int32_t>(ids[i].size(), 1));
        CHECK(t.untruncated == ids[i].size());
    }
    CHECK(ids[0].empty());  // the empty prompt: no ids (no BOS or EOS)
    CHECK(tok.encode("", 4).ids == std::vector<int32_t>(4, tok.pad_id()));
    CHECK(tok.encode("", 4).mask == std::vector<int32_t>(4, 0));
}

TEST_CASE("qwen tokenizer applies the chat template as ZImagePipeline and Flux2KleinPipeline do", "[qwen_tokenizer]") {
    const QwenTokenizer tok = fixture_tokenizer();
    json io = read_json(test::data_path(kDir) + "/io.json");
    SafeTensors st = SafeTensors::open(test::data_path(kDir) + "/io.safetensors");
    const std::vector<std::string> prompts = ragged_text(st, "prompt_utf8");
    const std::vector<std::string> ztext = ragged_text(st, "zimage_text_utf8"),
                                   ktext = ragged_text(st, "klein_text_utf8");
    const auto& counts = io["templated_token_counts_untruncated"];
    size_t truncated = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("prompt " << i << ": " << prompts[i]);
        CHECK(tok.chat_prompt(prompts[i], true) == ztext[i]);   // Z-Image: enable_thinking=True
        CHECK(tok.chat_prompt(prompts[i], false) == ktext[i]);  // klein: enable_thinking=False
    }
    CHECK(ztext[0] == "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    CHECK(ktext[0] == ztext[0] + "<think>\n\n</think>\n\n");
    for (int M : io["max_lengths"].get<std::vector<int>>()) {
        const auto zrows = ragged(st, "zimage_ids_max_length_" + std::to_string(M));
        const auto krows = ragged(st, "klein_ids_max_length_" + std::to_string(M));
        for (size_t i = 0; i < prompts.size(); ++i) {
            INFO("prompt " << i << ", max_length " << M);
            if (refused_without_icu(prompts[i], [&] { tok.encode_chat(prompts[i], true, M); })) continue;
            Tokens z = tok.encode_chat(prompts[i], true, M), k = tok.encode_chat(prompts[i], false, M);
            check_row(z, zrows[i], (size_t)M, tok.pad_id());
            check_row(k, krows[i], (size_t)M, tok.pad_id());
            CHECK(z.untruncated == counts["zimage"][i].get<size_t>());
            CHECK(k.untruncated == counts["klein"][i].get<size_t>());
            if (z.untruncated > (size_t)M) {
                // truncation keeps the first M ids: the template's tail (<|im_end|> ...) is lost
                ++truncated;
                CHECK(z.ids.back() != tok.token_id("<|im_end|>"));
                const std::vector<int32_t> full = tok.encode_ids(ztext[i]);
                CHECK(std::vector<int32_t>(full.begin(), full.begin() + M) == z.ids);
            }
        }
    }
    CHECK(truncated >= 2);  // the long prompts at M = 40, and the 608-token one at M = 512
}

TEST_CASE("qwen tokenizer gives the ids the z_image and klein pipeline fixtures fed their text encoders",
          "[qwen_tokenizer]") {
    // Their tokenizer is the Qwen3 vocabulary cut to 1000 merges with the added tokens renumbered after it: the ids of
    // <|im_start|> etc. come from the files.
    const std::string dir = test::data_path("fixtures/tok_qwen3_pipelines");
    auto any = load_tokenizer(read_tokenizer_folder(dir + "/tokenizer"), "tok_qwen3_pipelines");
    const QwenTokenizer& tok = dynamic_cast<const QwenTokenizer&>(*any);
    CHECK(tok.token_id("<|im_start|>") == 1257);
    json io = read_json(dir + "/io.json");
    SafeTensors st = SafeTensors::open(dir + "/io.safetensors");
    size_t rows_checked = 0;
    for (const char* pipe : {"zimage", "klein"}) {
        const bool thinking = std::string(pipe) == "zimage";  // ZImagePipeline: enable_thinking=True
        const json& runs = io["runs"][pipe];
        for (size_t r = 0; r < runs.size(); ++r) {
            for (bool negative : {false, true}) {
                const std::string name = std::string(pipe) + "_run" + std::to_string(r) + (negative ? "_negative" : "");
                if (!st.find(name + "_ids_flat")) continue;  // a run without classifier-free guidance
                const auto rows = ragged(st, name + "_ids");
                const int M = (int)read_i64(st, name + "_ids_max_length")[0];
                CHECK(M == runs[r]["max_sequence_length"].get<int>());
                const json& prompts = runs[r]["prompt"];
                REQUIRE(rows.size() == prompts.size());
                for (size_t i = 0; i < rows.size(); ++i) {
                    INFO(name << " row " << i);
                    // the negative prompt defaults to "" in both pipelines
                    const std::string p = negative ? std::string() : prompts[i].get<std::string>();
                    ++rows_checked;
                    if (refused_without_icu(p, [&] { tok.encode_chat(p, thinking, M); })) continue;
                    check_row(tok.encode_chat(p, thinking, M), rows[i], (size_t)M, tok.pad_id());
                }
            }
        }
    }
    CHECK(rows_checked == 9);  // z_image: 1 + 2 + 2 negative; klein: 1 + 1 negative + 2
}

TEST_CASE("qwen tokenizer reads tokenizer.json as the fast tokenizer does", "[qwen_tokenizer]") {
    // A tokenizer.json in the layout Qwen3 publishes, made from the fixture's vocab.json / merges.txt / added tokens.
    const TokenizerFiles slow = fixture_files();
    json vocab = json::parse(slow.at("vocab.json"));
    json merges = json::array();
    std::istringstream lines(slow.at("merges.txt"));
    std::string line;
    for (int i = 0; std::getline(lines, line);) {
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        const size_t sp = line.find(' ');
        if (i++ % 2)  // both spellings: "first second" and ["first", "second"]
            merges.push_back(line);
        else
            merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    }
    json config = json::parse(slow.at("tokenizer_config.json"));
    json added = json::array();
    for (auto& [id, t] : config["added_tokens_decoder"].items()) {
        json a = t;
        a["id"] = std::stoi(id);
        added.push_back(a);
    }
    const json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    json tj = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", qwen::kPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level}}}},
        {"post_processor", byte_level},
        {"decoder", byte_level},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", merges}}}};
    // Without added_tokens_decoder (the fast tokenizer takes the added tokens from tokenizer.json) and without
    // tokenizer_class (recognised by its pre-tokenizer).
    json cfg = config;
    cfg.erase("added_tokens_decoder");
    cfg.erase("tokenizer_class");
    TokenizerFiles fast = {{"tokenizer.json", tj.dump()},
                           {"tokenizer_config.json", cfg.dump()},
                           {"chat_template.jinja", slow.at("chat_template.jinja")}};
    REQUIRE(is_qwen_tokenizer(fast));
    auto any = load_tokenizer(fast, "fast");
    const QwenTokenizer& tok = dynamic_cast<const QwenTokenizer&>(*any);
    CHECK(tok.from_tokenizer_json());
    const QwenTokenizer ref = fixture_tokenizer();
    SafeTensors st = SafeTensors::open(test::data_path(kDir) + "/io.safetensors");
    const std::vector<std::string> prompts = ragged_text(st, "prompt_utf8");
    const auto ids = ragged(st, "ids");
    for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("prompt " << i);
        if (refused_without_icu(prompts[i], [&] { tok.encode_ids(prompts[i]); })) continue;
        CHECK(widen(tok.encode_ids(prompts[i])) == ids[i]);
        CHECK(tok.encode_chat(prompts[i], false, 40).ids == ref.encode_chat(prompts[i], false, 40).ids);
    }
    CHECK(tok.pad_id() == ref.pad_id());

    // "normalizer": null: no NFC, so the decomposed é of prompt 32 stays two code points.
    const std::string nfc_prompt = "ﬁ ligature and e\xCC\x81 combining (NFC)";
    REQUIRE(prompts[32] == nfc_prompt);
    json no_nfc = tj;
    no_nfc["normalizer"] = nullptr;
    QwenTokenizer raw({{"tokenizer.json", no_nfc.dump()}, {"tokenizer_config.json", cfg.dump()}}, "no-nfc");
    if (unicode::available()) CHECK(widen(raw.encode_ids(prompts[32])) != ids[32]);
    CHECK(widen(raw.encode_ids(prompts[5])) == ids[5]);

    // What this tokenizer does not implement is one clear error, not other ids.
    auto fails = [&](const std::function<void(json&)>& edit, const std::string& fragment) {
        json bad = tj;
        edit(bad);
        TokenizerFiles f = fast;
        f["tokenizer.json"] = bad.dump();
        const std::string e = error_of([&] { QwenTokenizer(f, "bad"); });
        INFO(e);
        CHECK(e.find(fragment) != std::string::npos);
    };
    fails([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,3}"; },
          "pre_tokenizer is not Qwen's");
    fails([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer");
    fails([](json& j) { j["model"]["type"] = "Unigram"; }, "model is not BPE");
    fails([](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback");
    fails([](json& j) { j["model"]["merges"][3] = "a b c"; }, "merge 3");
    fails([](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, "post_processor");
}

TEST_CASE("qwen tokenizer splits out added tokens, special or not", "[qwen_tokenizer]") {
    const QwenTokenizer tok = fixture_tokenizer();
    const int32_t im_start = tok.token_id("<|im_start|>"), im_end = tok.token_id("<|im_end|>");
    const int32_t think = tok.token_id("<think>"), think_end = tok.token_id("</think>");
    REQUIRE(im_start >= 0);
    REQUIRE(think >= 0);  // not special, still cut out of the text
    CHECK(tok.tokenize("<|im_start|>user\nhi<|im_end|>") ==
          std::vector<std::string>{"<|im_start|>", "user", "Ċ", "hi", "<|im_end|>"});
    const std::vector<int32_t> ids = tok.encode_ids("<think>\n\n</think>\n\n");
    CHECK(ids.front() == think);
    CHECK(ids[2] == think_end);
    // split_special_tokens: the same text is plain text, none of the added ids appear.
    TokenizerFiles files = fixture_files();
    json cfg = json::parse(files.at("tokenizer_config.json"));
    cfg["split_special_tokens"] = true;
    files["tokenizer_config.json"] = cfg.dump();
    const QwenTokenizer split(files, "split");
    for (int32_t id : split.encode_ids("<|im_start|>user\nhi<|im_end|><think>"))
        CHECK((id != im_start && id != im_end && id != think));
}

TEST_CASE("qwen tokenizer pads and truncates as tokenizer_config.json says", "[qwen_tokenizer]") {
    const QwenTokenizer right = fixture_tokenizer();
    const std::vector<int32_t> ids = right.encode_ids("a photo of a cat");
    REQUIRE(ids.size() == 5);
    Tokens t = right.encode("a photo of a cat", 3);  // truncation keeps the first 3
    CHECK(t.ids == std::vector<int32_t>(ids.begin(), ids.begin() + 3));
    CHECK(t.mask == std::vector<int32_t>{1, 1, 1});
    CHECK(t.untruncated == 5);
    t = right.encode("a photo of a cat", 7, false);  // no padding asked
    CHECK(t.ids == ids);

    TokenizerFiles files = fixture_files();
    json cfg = json::parse(files.at("tokenizer_config.json"));
    cfg["padding_side"] = "left";
    cfg["truncation_side"] = "left";
    files["tokenizer_config.json"] = cfg.dump();
    const QwenTokenizer left(files, "left");
    t = left.encode("a photo of a cat", 7);
    CHECK(t.ids == std::vector<int32_t>{left.pad_id(), left.pad_id(), ids[0], ids[1], ids[2], ids[3], ids[4]});
    CHECK(t.mask == std::vector<int32_t>{0, 0, 1, 1, 1, 1, 1});
    CHECK(left.encode("a photo of a cat", 2).ids == std::vector<int32_t>{ids[3], ids[4]});  // keeps the last 2

    cfg["pad_token"] = nullptr;
    files["tokenizer_config.json"] = cfg.dump();
    json special = json::parse(files.at("special_tokens_map.json"));
    special.erase("pad_token");
    files["special_tokens_map.json"] = special.dump();
    const QwenTokenizer no_pad(files, "no-pad");
    CHECK(no_pad.pad_id() == -1);
    CHECK(error_of([&] { no_pad.encode("a", 4); }).find("no pad_token") != std::string::npos);
    CHECK(no_pad.encode("a", 4, false).ids.size() == 1);
}

TEST_CASE("qwen tokenizer refuses invalid UTF-8 and chat templates it cannot render", "[qwen_tokenizer]") {
    const QwenTokenizer tok = fixture_tokenizer();
    // transformers takes a Python str, which cannot hold invalid UTF-8: one clear error naming the byte.
    for (const std::string& bad :
         {std::string("a\xff"), std::string("caf\xC3"), std::string("\xED\xA0\x80"), std::string("\xC0\xAF")}) {
        const std::string e = error_of([&] { tok.encode_ids(bad); });
        INFO(e);
        CHECK(e.find("invalid UTF-8 at byte") != std::string::npos);
        CHECK(error_of([&] { tok.encode_chat(bad, true, 16); }).find("invalid UTF-8") != std::string::npos);
    }

    TokenizerFiles files = fixture_files();
    const std::string qwen3 = files.at("chat_template.jinja");
    auto with_template = [&](const std::string* tpl) {
        TokenizerFiles f = files;
        f.erase("chat_template.jinja");
        if (tpl) f["chat_template.jinja"] = *tpl;
        return QwenTokenizer(f, "tpl");
    };
    CHECK(error_of([&] { with_template(nullptr).chat_prompt("a", true); }).find("no chat template") !=
          std::string::npos);
    // tokenizer_config.json's chat_template is read when there is no chat_template.jinja.
    {
        TokenizerFiles f = files;
        f.erase("chat_template.jinja");
        json cfg = json::parse(f.at("tokenizer_config.json"));
        cfg["chat_template"] = qwen3;
        f["tokenizer_config.json"] = cfg.dump();
        CHECK(QwenTokenizer(f, "cfg").chat_prompt("a", false) == tok.chat_prompt("a", false));
    }
    // Qwen2.5's template opens with a default system message: refused rather than rendered without it.
    std::string qwen25 = qwen3;
    const std::string sys_branch =
        "{%- if messages[0].role == 'system' %}\n        {{- '<|im_start|>system\\n' + "
        "messages[0].content + '<|im_end|>\\n' }}\n    {%- endif %}";
    const size_t at = qwen25.rfind(sys_branch);
    REQUIRE(at != std::string::npos);
    qwen25.replace(
        at, sys_branch.size(),
        "{%- if messages[0].role == 'system' %}\n        {{- '<|im_start|>system\\n' + "
        "messages[0].content + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou "
        "are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}");
    CHECK(error_of([&] { with_template(&qwen25).chat_prompt("a", true); }).find("not Qwen3's ChatML") !=
          std::string::npos);
    // A template without the thinking switch ignores enable_thinking (as Jinja would).
    std::string plain = qwen3;
    const std::string think =
        "\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        "
        "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}";
    REQUIRE(plain.find(think) != std::string::npos);
    plain.erase(plain.find(think), think.size());
    CHECK(with_template(&plain).chat_prompt("a", false) == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n");
    const std::string bare = "{{ messages[0].content }}";
    CHECK(error_of([&] { with_template(&bare).chat_prompt("a", true); }).find("not Qwen3's ChatML") !=
          std::string::npos);
}

TEST_CASE("qwen pre-tokenizer splits as Python's regex module does", "[qwen_tokenizer]") {
    // Expected pieces from regex.findall(PRETOKENIZE_REGEX, s) (regex 2026.5.9).
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"a  b", {"a", " ", " b"}},
        {"  a", {" ", " a"}},
        {"a  ", {"a", "  "}},
        {"x \n\n  y", {"x", " \n\n", " ", " y"}},
        {"x\t\n \ty", {"x", "\t\n", " ", "\ty"}},
        {"it'S ok", {"it", "'S", " ok"}},
        {"'\u017f x'S", {"'\u017f", " x", "'S"}},  // ſ folds to s
        {"'Ve 'LL'd", {"'Ve", " '", "LL", "'d"}},
        {" !! a", {" !!", " a"}},
        {"a!!\n\nb", {"a", "!!\n\n", "b"}},
        {"a ?\r\n", {"a", " ?\r\n"}},
        {"12ab3", {"1", "2", "ab", "3"}},
        {"\u00e9?", {"\u00e9", "?"}},
        {"\u00a0x", {"\u00a0x"}},
        {"\u3000y\u3000", {"\u3000y", "\u3000"}},
        {"a\u200bb", {"a", "\u200bb"}},
        {" \u0301x", {" \u0301", "x"}},
        {"\U0001F600 \U0001F600", {"\U0001F600", " \U0001F600"}},
        {"\r\n", {"\r\n"}},
        {"", {}},
        {"'", {"'"}},
        {"x'", {"x", "'"}},
        {"\u216b\u00bd", {"\u216b", "\u00bd"}},
        {"a \n b\n", {"a", " \n", " b", "\n"}},
        {" \t", {" \t"}},
    };
    for (const auto& [text, want] : cases) {
        INFO(json(text).dump());
        if (refused_without_icu(text, [&] { qwen::pre_tokenize(text); })) continue;
        CHECK(qwen::pre_tokenize(text) == want);
    }
}

TEST_CASE("byte-level BPE merges as transformers' bpe() does", "[qwen_tokenizer]") {
    // transformers' bpe(), written out plainly: merge every occurrence of the lowest-ranked adjacent pair, left to
    // right without overlap, until none has a rank.
    auto reference = [](std::vector<std::string> word, const std::map<std::pair<std::string, std::string>, int>& r) {
        while (word.size() > 1) {
            int best = INT32_MAX;
            std::pair<std::string, std::string> pair;
            for (size_t i = 0; i + 1 < word.size(); ++i)
                if (auto it = r.find({word[i], word[i + 1]}); it != r.end() && it->second < best)
                    best = it->second, pair = it->first;
            if (best == INT32_MAX) break;
            std::vector<std::string> out;
            for (size_t i = 0; i < word.size();) {
                if (i + 1 < word.size() && word[i] == pair.first && word[i + 1] == pair.second) {
                    out.push_back(pair.first + pair.second);
                    i += 2;
                } else {
                    out.push_back(word[i++]);
                }
            }
            word.swap(out);
        }
        return word;
    };
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        // Random merges over a 3-letter alphabet, in random order: consistent and inconsistent tables (a merge of
        // pieces that only later merges create), so the batch-per-rank rule matters.
        std::vector<std::string> pieces = {"a", "b", "c"};
        std::map<std::pair<std::string, std::string>, int> ranks;
        ByteBpe bpe;
        for (int m = 0; m < 12; ++m) {
            const std::string x = pieces[rng() % pieces.size()], y = pieces[rng() % pieces.size()];
            if (ranks.count({x, y})) continue;
            ranks[{x, y}] = (int)ranks.size();
            bpe.add_merge(x, y);
            pieces.push_back(x + y);
        }
        if (trial % 3 == 0) {  // shuffle the ranks: now merges may come before the ones that make their parts
            std::vector<std::pair<std::string, std::string>> order;
            for (auto& [p, r] : ranks) order.push_back(p);
            std::shuffle(order.begin(), order.end(), rng);
            ByteBpe shuffled;
            for (size_t r = 0; r < order.size(); ++r) {
                ranks[order[r]] = (int)r;
                shuffled.add_merge(order[r].first, order[r].second);
            }
            for (int k = 0; k < 20; ++k) {
                std::string w;
                for (size_t len = 1 + rng() % 24; w.size() < len;) w += "abc"[rng() % 3];
                std::vector<std::string> chars;
                for (char ch : w) chars.emplace_back(1, ch);
                INFO(w);
                CHECK(shuffled.merge(w) == reference(chars, ranks));
            }
            continue;
        }
        for (int k = 0; k < 20; ++k) {
            std::string w;
            for (size_t len = 1 + rng() % 24; w.size() < len;) w += "abc"[rng() % 3];
            std::vector<std::string> chars;
            for (char ch : w) chars.emplace_back(1, ch);
            INFO(w);
            CHECK(bpe.merge(w) == reference(chars, ranks));
        }
    }
    // Bytes go through bytes_to_unicode first: a space is "Ġ", a newline "Ċ", byte 0xFF "ÿ".
    ByteBpe plain;
    CHECK(plain.merge(" \n\xff") == std::vector<std::string>{"Ġ", "Ċ", "ÿ"});
    CHECK(plain.merge("").empty());
    // A long piece of one letter (prompt 39's x's) in O(n log n).
    ByteBpe xs;
    xs.add_merge("x", "x");
    xs.add_merge("xx", "xx");
    const std::vector<std::string> got = xs.merge(std::string(100001, 'x'));
    CHECK(got.size() == 25001);
    CHECK(got.back() == "x");
}
