// GemmaTokenizer against transformers 4.47.1's slow GemmaTokenizer and sentencepiece 0.1.97 (BPE, byte fallback):
// the tok_gemma prompts raw, with and without special tokens, padded/truncated to 20, and as SanaPipeline gives
// them to the text encoder (with and without the complex human instruction); hand-built BPE models for the merge
// order, unused pieces and user-defined symbols; malformed and mixed-up tokenizer.model files.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "models/text/tokenizers/gemma_tokenizer.h"
#include "models/text/tokenizers/sentencepiece.h"
#include "models/text/tokenizers/tokenizer.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::text;
using json = nlohmann::json;

namespace {

const std::string kDir = "fixtures/tok_gemma";

std::vector<int64_t> read_i64(const SafeTensors& st, const std::string& name) {
    Tensor t = st.read(name);
    REQUIRE(t.dtype == DType::i64);
    return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

// Ragged rows stored as X_flat + X_offsets (row i = flat[offsets[i]:offsets[i+1]]).
std::vector<std::vector<int64_t>> ragged(const SafeTensors& st, const std::string& base) {
    const auto flat = read_i64(st, base + "_flat");
    const auto off = read_i64(st, base + "_offsets");
    std::vector<std::vector<int64_t>> rows;
    for (size_t i = 0; i + 1 < off.size(); ++i) rows.emplace_back(flat.begin() + off[i], flat.begin() + off[i + 1]);
    return rows;
}

std::vector<std::string> ragged_text(const SafeTensors& st, const std::string& base) {
    const Tensor flat = st.read(base + "_flat");
    const auto off = read_i64(st, base + "_offsets");
    std::vector<std::string> rows;
    for (size_t i = 0; i + 1 < off.size(); ++i)
        rows.emplace_back(reinterpret_cast<const char*>(flat.bytes.data()) + off[i], size_t(off[i + 1] - off[i]));
    return rows;
}

std::vector<int64_t> widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

// The message of the kiln::Error f throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("gemma tokenizer matches transformers on every tok_gemma prompt", "[gemma_tokenizer]") {
    auto tok = GemmaTokenizer::from_folder(test::data_path(kDir));
    CHECK(tok->class_name() == "GemmaTokenizer");
    CHECK(tok->sentencepiece().algorithm() == SentencePieceModel::Algorithm::bpe);
    const json io = read_json(test::data_path(kDir + "/io.json"));
    const json& special = io["tokenizer"]["special_tokens"];
    CHECK(tok->bos_id() == special["bos"][1].get<int32_t>());
    CHECK(tok->eos_id() == special["eos"][1].get<int32_t>());
    CHECK(tok->pad_id() == special["pad"][1].get<int32_t>());
    CHECK(tok->add_bos_token() == io["tokenizer"]["add_bos_token"].get<bool>());
    CHECK(tok->add_eos_token() == io["tokenizer"]["add_eos_token"].get<bool>());
    CHECK(tok->model_max_length() == 0);  // the config's 1e30 "unset"

    const SafeTensors st = SafeTensors::open(test::data_path(kDir + "/io.safetensors"));
    const auto prompts = ragged_text(st, "prompt_utf8");
    const auto ids = ragged(st, "ids");
    const auto ids_no_special = ragged(st, "ids_no_special");
    const auto sp_ids = ragged(st, "sentencepiece_ids");
    const int L = io["max_length"].get<int>();
    const auto ids_l = read_i64(st, "input_ids_max_length_" + std::to_string(L));
    const auto mask_l = read_i64(st, "attention_mask_max_length_" + std::to_string(L));
    REQUIRE(prompts.size() == io["prompts"].size());
    REQUIRE(ids.size() == prompts.size());
    REQUIRE(ids_l.size() == prompts.size() * size_t(L));

    size_t truncated = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        REQUIRE(prompts[i] == io["prompts"][i].get<std::string>());
        INFO("prompt " << i << ": \"" << prompts[i] << "\"");
        // Raw sentencepiece: special tokens written in the text are not split out there.
        std::vector<int64_t> got_sp;
        for (const auto& e : tok->sentencepiece().encode(prompts[i])) got_sp.push_back(e.id);
        CHECK(got_sp == sp_ids[i]);

        CHECK(widen(tok->encode_ids(prompts[i])) == ids[i]);
        CHECK(widen(tok->encode_ids(prompts[i], false)) == ids_no_special[i]);
        const Tokens full = tok->encode(prompts[i], 0);
        CHECK(widen(full.ids) == ids[i]);
        CHECK(full.mask == std::vector<int32_t>(ids[i].size(), 1));
        CHECK(full.untruncated == ids[i].size());

        const Tokens t = tok->encode_padded(prompts[i], L);
        CHECK(widen(t.ids) == std::vector<int64_t>(ids_l.begin() + long(i) * L, ids_l.begin() + long(i + 1) * L));
        CHECK(widen(t.mask) == std::vector<int64_t>(mask_l.begin() + long(i) * L, mask_l.begin() + long(i + 1) * L));
        CHECK(t.untruncated == ids[i].size());
        truncated += ids[i].size() > size_t(L);

        const Tokens unpadded = tok->encode(prompts[i], L, false);
        CHECK(widen(unpadded.ids) ==
              std::vector<int64_t>(ids[i].begin(), ids[i].begin() + std::min<long>(L, long(ids[i].size()))));
    }
    CHECK(truncated >= 3);  // the long prompts exercise truncation
}

// SanaPipeline._get_gemma_prompt_embeds: the lower-cased, stripped prompt (pipe_text, computed by Python) behind the
// complex human instruction, padded/truncated to n_chi + 300 - 2; the negative-prompt path: the text alone, to 300.
TEST_CASE("gemma tokenizer gives the ids SanaPipeline feeds its text encoder", "[gemma_tokenizer]") {
    auto tok = GemmaTokenizer::from_folder(test::data_path(kDir));
    const json io = read_json(test::data_path(kDir + "/io.json"));
    const SafeTensors st = SafeTensors::open(test::data_path(kDir + "/io.safetensors"));
    const std::string chi = io["chi_prompt"].get<std::string>();
    const int M = io["pipe_max_sequence_length"].get<int>();
    const auto n_chi = read_i64(st, "n_chi_prompt_tokens");
    REQUIRE(n_chi.size() == 1);
    CHECK(tok->encode_ids(chi).size() == size_t(n_chi[0]));
    const int chi_length = int(tok->encode_ids(chi).size()) + M - 2;
    CHECK(chi_length == io["pipe_chi_length"].get<int>());

    const auto texts = ragged_text(st, "pipe_text_utf8");
    const auto chi_rows = ragged(st, "pipe_chi_ids");
    const auto nochi_rows = ragged(st, "pipe_nochi_ids");
    REQUIRE(chi_rows.size() == texts.size());
    REQUIRE(nochi_rows.size() == texts.size());
    // The stored rows are the real tokens; the reference pads them with <pad> = 0 and mask 0 to the length.
    auto padded = [](std::vector<int64_t> row, int length) {
        std::vector<int64_t> mask(row.size(), 1);
        row.resize(size_t(length), 0);
        mask.resize(size_t(length), 0);
        return std::make_pair(row, mask);
    };
    for (size_t i = 0; i < texts.size(); ++i) {
        INFO("pipe text " << i << ": \"" << texts[i] << "\"");
        const Tokens with_chi = tok->encode_padded(chi + texts[i], chi_length);
        const auto [want_ids, want_mask] = padded(chi_rows[i], chi_length);
        CHECK(widen(with_chi.ids) == want_ids);
        CHECK(widen(with_chi.mask) == want_mask);
        CHECK(with_chi.untruncated >= chi_rows[i].size());

        const Tokens plain = tok->encode_padded(texts[i], M);
        const auto [want_plain, want_plain_mask] = padded(nochi_rows[i], M);
        CHECK(widen(plain.ids) == want_plain);
        CHECK(widen(plain.mask) == want_plain_mask);
    }
}

TEST_CASE("gemma tokenizer truncation keeps the special tokens", "[gemma_tokenizer]") {
    auto files = GemmaTokenizer::read_folder(test::data_path(kDir));
    const GemmaTokenizer tok(files, kDir);
    const std::string text = "a photo of a cat";
    const auto all = tok.encode_ids(text);  // <bos> + 5 pieces
    REQUIRE(all.size() == 6);
    const Tokens t = tok.encode(text, 4);
    CHECK(t.ids == std::vector<int32_t>(all.begin(), all.begin() + 4));
    CHECK(t.untruncated == 6);
    // truncate_sequences removes nothing when the ids cannot make room for <bos>: the output is then longer.
    CHECK(tok.encode(text, 1).ids == all);

    // add_eos_token: <eos> appended, and kept by truncation as <bos> is.
    auto config = json::parse(files.at("tokenizer_config.json"));
    config["add_eos_token"] = true;
    files["tokenizer_config.json"] = config.dump();
    const GemmaTokenizer with_eos(files, kDir);
    std::vector<int32_t> want = all;
    want.push_back(tok.eos_id());
    CHECK(with_eos.encode_ids(text) == want);
    const Tokens te = with_eos.encode(text, 5);
    CHECK(te.ids == std::vector<int32_t>{all[0], all[1], all[2], all[3], tok.eos_id()});
    CHECK(te.untruncated == 7);
    CHECK(with_eos.encode_ids(text, false) == std::vector<int32_t>(all.begin() + 1, all.end()));

    // No pad token in the config: padding is an error, truncation alone is not.
    config = json::parse(GemmaTokenizer::read_folder(test::data_path(kDir)).at("tokenizer_config.json"));
    config["pad_token"] = nullptr;
    files["tokenizer_config.json"] = config.dump();
    files.erase("special_tokens_map.json");
    const GemmaTokenizer no_pad(files, kDir);
    CHECK(no_pad.pad_id() == -1);
    CHECK(no_pad.encode(text, 3, false).ids.size() == 3);
    CHECK(error_of([&] { no_pad.encode(text, 30); }).find("no pad_token") != std::string::npos);
}

TEST_CASE("gemma tokenizer splits out added tokens with their strip rules", "[gemma_tokenizer]") {
    auto files = GemmaTokenizer::read_folder(test::data_path(kDir));
    const GemmaTokenizer plain(files, kDir);
    const SentencePieceModel& sp = plain.sentencepiece();
    const int32_t turn = sp.piece_to_id("<start_of_turn>");
    REQUIRE(sp.piece(size_t(turn)).type == SentencePieceModel::kUserDefined);
    auto sp_ids = [&](const std::string& s) {
        std::vector<int32_t> v;
        for (const auto& e : sp.encode(s)) v.push_back(e.id);
        return v;
    };
    // As a user-defined symbol the sentencepiece model keeps the text after it as it is.
    std::vector<int32_t> want = {plain.bos_id(), turn};
    for (int32_t id : sp_ids("  user")) want.push_back(id);
    CHECK(plain.encode_ids("<start_of_turn>  user") == want);

    // As an added token with rstrip, the whitespace after it goes (Python str.lstrip: U+3000 too).
    auto config = json::parse(files.at("tokenizer_config.json"));
    config["added_tokens_decoder"][std::to_string(turn)] = {
        {"content", "<start_of_turn>"}, {"rstrip", true}, {"special", true}};
    files["tokenizer_config.json"] = config.dump();
    const GemmaTokenizer stripping(files, kDir);
    want = {plain.bos_id(), turn};
    for (int32_t id : sp_ids("user")) want.push_back(id);
    CHECK(stripping.encode_ids("<start_of_turn> \xE3\x80\x80 user") == want);
    CHECK(stripping.tokenize("<start_of_turn> user<bos>").back() == "<bos>");
}

namespace {

// A serialized ModelProto for the hand-built cases.
struct ProtoWriter {
    std::string out;
    ProtoWriter& varint(uint64_t v) {
        for (; v >= 0x80; v >>= 7) out += char((v & 0x7F) | 0x80);
        out += char(v);
        return *this;
    }
    ProtoWriter& field_varint(uint32_t f, uint64_t v) { return varint(uint64_t(f) << 3).varint(v); }
    ProtoWriter& field_bytes(uint32_t f, const std::string& s) {
        varint((uint64_t(f) << 3) | 2).varint(s.size());
        out += s;
        return *this;
    }
    ProtoWriter& field_float(uint32_t f, float x) {
        varint((uint64_t(f) << 3) | 5);
        char b[4];
        std::memcpy(b, &x, 4);
        out.append(b, 4);
        return *this;
    }
};

struct PieceSpec {
    std::string piece;
    float score;
    int type;
};

// model_type 2 (BPE) unless given; Gemma's normaliser: no dummy prefix, whitespace kept, spaces as "▁".
std::string bpe_model(std::vector<PieceSpec> pieces, bool byte_fallback, int model_type = 2) {
    if (byte_fallback) {
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", b);
            pieces.push_back({name, 0.f, SentencePieceModel::kByte});
        }
    }
    ProtoWriter m;
    for (const PieceSpec& p : pieces) {
        ProtoWriter sp;
        sp.field_bytes(1, p.piece).field_float(2, p.score).field_varint(3, uint64_t(p.type));
        m.field_bytes(1, sp.out);
    }
    ProtoWriter trainer, normalizer;
    trainer.field_varint(3, uint64_t(model_type)).field_varint(35, byte_fallback ? 1 : 0);
    normalizer.field_bytes(1, "identity").field_varint(3, 0).field_varint(4, 0);
    m.field_bytes(2, trainer.out).field_bytes(3, normalizer.out);
    return m.out;
}

std::vector<std::string> pieces_of(const SentencePieceModel& m, const std::string& text) {
    std::vector<std::string> v;
    for (const auto& e : m.encode(text)) v.push_back(e.piece);
    return v;
}

using SP = SentencePieceModel;
using V = std::vector<std::string>;
constexpr auto kBpe = SP::Algorithm::bpe;

}  // namespace

// Expected segmentations follow bpe_model.cc by hand: merge the adjacent pair whose concatenation is a piece with
// the highest score, the leftmost among equal scores; merged unused pieces are split back into their halves.
TEST_CASE("sentencepiece BPE merges by score, leftmost first", "[gemma_tokenizer]") {
    const std::vector<PieceSpec> base = {{"<unk>", 0, SP::kUnknown}, {"a", -5, SP::kNormal},
                                         {"b", -5, SP::kNormal},     {"c", -5, SP::kNormal},
                                         {"d", -5, SP::kNormal},     {"\xe2\x96\x81", -5, SP::kNormal}};
    auto with = [&](std::vector<PieceSpec> extra) {
        auto p = base;
        p.insert(p.end(), extra.begin(), extra.end());
        return SP::parse(bpe_model(p, false), "synthetic", kBpe);
    };
    // Equal scores: the leftmost pair first; then "ab"+"c" is no piece.
    CHECK(pieces_of(with({{"ab", -1, SP::kNormal}, {"bc", -1, SP::kNormal}}), "abc") == V{"ab", "c"});
    // A higher score wins wherever it is.
    CHECK(pieces_of(with({{"ab", -1, SP::kNormal}, {"bc", -0.5f, SP::kNormal}}), "abc") == V{"a", "bc"});
    // Merges continue on the merged symbols.
    const auto chain = with({{"ab", -1, SP::kNormal}, {"abc", -2, SP::kNormal}, {"cd", -3, SP::kNormal}});
    CHECK(pieces_of(chain, "abcd") == V{"abc", "d"});
    CHECK(pieces_of(chain, "abab") == V{"ab", "ab"});
    // Spaces become "▁", which merges like any character (no dummy prefix, whitespace kept).
    CHECK(pieces_of(with({{"\xe2\x96\x81"
                           "a",
                           -1, SP::kNormal}}),
                    "b a  a") == V{"b",
                                   "\xe2\x96\x81"
                                   "a",
                                   "\xe2\x96\x81",
                                   "\xe2\x96\x81"
                                   "a"});
    // An unused piece may be merged through but is never output: "ab" is split back when nothing longer forms.
    const auto unused = with({{"ab", -1, SP::kUnused}, {"abc", -2, SP::kNormal}});
    CHECK(pieces_of(unused, "abc") == V{"abc"});
    CHECK(pieces_of(unused, "abd") == V{"a", "b", "d"});
    // A user-defined symbol is one frozen symbol: never merged with its neighbours.
    const auto frozen = with({{"bc", 0, SP::kUserDefined}, {"abc", -1, SP::kNormal}, {"ab", -2, SP::kNormal}});
    CHECK(pieces_of(frozen, "abc") == V{"a", "bc"});
    CHECK(pieces_of(frozen, "abbc") == V{"ab", "bc"});
    // Without byte fallback a run of unknown characters is one <unk>.
    const auto plain = with({});
    const auto unk = plain.encode("axyb");
    REQUIRE(unk.size() == 3);
    CHECK(unk[1].piece == "xy");
    CHECK(unk[1].id == 0);
    // With it, each unknown character becomes its UTF-8 bytes.
    auto p = base;
    const auto bytes = SP::parse(bpe_model(p, true), "synthetic", kBpe);
    CHECK(pieces_of(bytes, "a\xc3\xa9") == V{"a", "<0xC3>", "<0xA9>"});
}

TEST_CASE("gemma tokenizer rejects missing, truncated and mixed-up tokenizer.model files", "[gemma_tokenizer]") {
    const auto good = GemmaTokenizer::read_folder(test::data_path(kDir));
    const std::string model = good.at("tokenizer.model");
    auto load_with = [&](const std::string* contents) {
        TokenizerFiles f = good;
        if (contents)
            f["tokenizer.model"] = *contents;
        else
            f.erase("tokenizer.model");
        return error_of([f] { GemmaTokenizer(f, "gemma"); });
    };
    CHECK(load_with(nullptr) == "gemma: tokenizer.model missing (GemmaTokenizer needs it)");
    CHECK(error_of([] { GemmaTokenizer::from_folder("/nonexistent/tokenizer"); }).find("not a tokenizer folder") !=
          std::string::npos);

    // Every cut fails with one line naming the file: inside a field (a length past the end), at a field boundary
    // (no trainer_spec / normalizer_spec: sentencepiece writes the pieces first, then both specs).
    std::vector<size_t> cuts;
    for (size_t c = 0; c < model.size(); c += 97) cuts.push_back(c);
    for (size_t c = model.size() - 256; c < model.size(); ++c) cuts.push_back(c);
    for (size_t cut : cuts) {
        INFO("cut at " << cut);
        const std::string bad = model.substr(0, cut);
        const std::string e = load_with(&bad);
        CHECK(e.find("gemma tokenizer.model: ") == 0);
        CHECK(e.find('\n') == std::string::npos);
    }
    // A corrupted byte must not crash (it may still parse).
    for (size_t pos = 0; pos < model.size(); pos += 61) {
        std::string bad = model;
        bad[pos] = char(0xFF);
        try {
            GemmaTokenizer(TokenizerFiles{{"tokenizer.model", bad}}, "corrupted").encode("a photo of a cat, 東京", 16);
        } catch (const Error&) {
        }
    }

    // T5's unigram spiece.model where Gemma's BPE tokenizer.model belongs, and the other way round.
    const auto t5 = read_tokenizer_folder(test::data_path("fixtures/tok_t5"));
    const std::string t5_model = t5.at("spiece.model");
    CHECK(load_with(&t5_model) == "gemma tokenizer.model: a SentencePiece unigram model where a BPE model is expected");
    auto t5_bpe = t5;
    t5_bpe["spiece.model"] = model;
    CHECK(error_of([&] { load_tokenizer(t5_bpe, "t5"); }) ==
          "t5 spiece.model: a SentencePiece BPE model where a unigram model is expected");
    // WORD / CHAR models are not supported at all; byte fallback needs all 256 byte pieces.
    const std::string word = bpe_model({{"<unk>", 0, SP::kUnknown}, {"a", 0, SP::kNormal}}, false, 3);
    CHECK(load_with(&word).find("model_type 3 (word) is not supported") != std::string::npos);
    ProtoWriter no_bytes_trainer;
    no_bytes_trainer.field_varint(3, 2).field_varint(35, 1);
    ProtoWriter no_bytes;
    ProtoWriter unk;
    unk.field_bytes(1, "<unk>").field_varint(3, SP::kUnknown);
    no_bytes.field_bytes(1, unk.out).field_bytes(2, no_bytes_trainer.out).field_bytes(3, "");
    CHECK(load_with(&no_bytes.out).find("not all 256 <0xXX> pieces") != std::string::npos);
}

TEST_CASE("gemma tokenizer rejects invalid UTF-8 prompts", "[gemma_tokenizer]") {
    auto tok = GemmaTokenizer::from_folder(test::data_path(kDir));
    for (const char* bad : {"a \xff cat", "\xe6\x9d", "\xc0\xaf", "\xed\xa0\x80"}) {
        INFO(bad);
        CHECK(error_of([&] { tok->encode_ids(bad); }).find("invalid UTF-8") != std::string::npos);
    }
}
