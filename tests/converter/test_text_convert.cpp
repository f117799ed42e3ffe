// Whole text-to-image pipelines (PixArt, SD3, Flux) in one Kiln file: text encoders' tensors round-trip,
// tokenizer files round-trip byte-exact, sharded text encoders convert, malformed text sides fail cleanly.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <set>
#include <sstream>

#include "converter/info.h"
#include "converter/tokenizer_files.h"
#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

converter::Options quiet(DType d = DType::f16) {
    converter::Options o;
    o.dtype = d;
    o.quiet = true;
    return o;
}

// Every source tensor of a transformers text encoder is in g as "comp.<name>", with the policy dtype and
// the bytes of one rounding.
size_t check_text_encoder(const GgufFile& g, const std::string& comp, const std::string& weights, DType want) {
    SafeTensors st = SafeTensors::open(weights);
    size_t in_file = 0;
    for (auto& t : g.tensors()) in_file += t.name.compare(0, comp.size() + 1, comp + ".") == 0;
    CHECK(in_file == st.tensors().size());
    int64_t params = 0;
    for (auto& src : st.tensors()) {
        INFO("tensor " << src.name);
        const GgufTensor& out = g.at(comp + "." + src.name);
        params += shape_numel(src.shape);
        REQUIRE(out.shape == src.shape);
        REQUIRE(out.dtype == policy_dtype(src, want));
        Tensor expect = st.read(src.name).astype(out.dtype);
        Tensor b = g.read(out.name);
        REQUIRE(b.nbytes() == expect.nbytes());
        CHECK(std::memcmp(b.bytes.data(), expect.bytes.data(), b.nbytes()) == 0);
    }
    CHECK(g.get_int("kiln." + comp + ".params") == params);
    return st.tensors().size();
}

struct PipeCase {
    std::string name;
    std::vector<std::string> components;
};

// The model_index.json class of a component.
std::string index_class(const std::string& dir, const std::string& comp) {
    return nlohmann::json::parse(slurp(dir + "/model_index.json"))[comp][1].get<std::string>();
}

// Splits a safetensors file into two shards + index (every third tensor into shard 1) in dir.
void write_sharded(const std::string& src, const std::string& dir, const std::string& base) {
    auto [hdr, data] = read_raw_safetensors(src);
    nlohmann::json shard[2] = {nlohmann::json::object(), nlohmann::json::object()};
    std::string blob[2];
    nlohmann::json weight_map = nlohmann::json::object();
    int k = 0;
    for (auto& [name, v] : hdr.items()) {
        if (name == "__metadata__") continue;
        int s = (k++ % 3 == 0) ? 0 : 1;
        uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
        nlohmann::json t = v;
        t["data_offsets"] = {blob[s].size(), blob[s].size() + (e - b)};
        blob[s] += data.substr(b, e - b);
        shard[s][name] = t;
        weight_map[name] = base + "-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    }
    for (int s = 0; s < 2; ++s)
        write_raw_safetensors(dir + "/" + base + "-0000" + std::to_string(s + 1) + "-of-00002.safetensors",
                              shard[s].dump(), blob[s]);
    spit(dir + "/" + base + ".safetensors.index.json",
         nlohmann::json{{"metadata", {{"total_size", data.size()}}}, {"weight_map", weight_map}}.dump(2));
}

// A copy of a fixture folder to break.
std::string copy_fixture(const TempDir& tmp, const std::string& name) {
    const std::string dir = tmp / name;
    fs::copy(fixture(name), dir, fs::copy_options::recursive);
    return dir;
}

}  // namespace

TEST_CASE("text-to-image pipelines convert whole: text encoders and tokenizers too", "[converter][text]") {
    auto pc = GENERATE(
        PipeCase{"pixart_pipeline", {"transformer", "vae", "scheduler", "text_encoder", "tokenizer"}},
        PipeCase{"sd3_pipeline",
                 {"transformer", "vae", "scheduler", "text_encoder", "text_encoder_2", "text_encoder_3", "tokenizer",
                  "tokenizer_2", "tokenizer_3"}},
        PipeCase{"flux_pipeline",
                 {"transformer", "vae", "scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"}});
    auto dt = GENERATE(DType::f16, DType::bf16);
    INFO(pc.name << " " << dtype_name(dt));
    const std::string dir = fixture(pc.name);
    TempDir tmp;
    const std::string out = tmp / "pipe.kiln";
    auto sum = converter::convert_folder(dir, out, quiet(dt));
    CHECK(sum.components == pc.components);
    GgufFile g = GgufFile::open(out);
    CHECK(g.get_string_array("kiln.components") == pc.components);
    size_t tensors = 0;
    for (auto& c : pc.components) {
        INFO("component " << c);
        CHECK(g.get_string("kiln." + c + ".class") == index_class(dir, c));
        if (c.compare(0, 12, "text_encoder") == 0) {
            tensors += check_text_encoder(g, c, dir + "/" + c + "/model.safetensors", dt);
            CHECK(g.get_string("kiln." + c + ".config") == slurp(dir + "/" + c + "/config.json"));
            // Block layout: CLIP one run; T5 block 0 (relative_attention_bias) its own run.
            auto kinds = g.get_string_array("kiln." + c + ".blocks");
            REQUIRE(kinds.size() == 1);
            const bool t5 = index_class(dir, c) == "T5EncoderModel";
            CHECK(kinds[0] == (t5 ? "encoder.block" : "text_model.encoder.layers"));
            auto runs = g.get_int_array("kiln." + c + ".blocks." + kinds[0] + ".runs");
            int64_t count = g.get_int("kiln." + c + ".blocks." + kinds[0] + ".count");
            CHECK(count >= 2);
            CHECK(runs.size() == (t5 ? 8u : 4u));
            if (t5) {
                CHECK(runs[0] == 0);
                CHECK(runs[1] == 1);
                CHECK(runs[4] == 1);
                CHECK(runs[5] == count - 1);
                CHECK(g.find(c + ".encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
            }
        } else if (c.compare(0, 9, "tokenizer") == 0) {
            auto files = converter::read_tokenizer_files(g, c);
            CHECK(files == converter::read_tokenizer_dir(dir + "/" + c, index_class(dir, c), nullptr));
            std::set<std::string> on_disk;
            for (auto& e : fs::directory_iterator(dir + "/" + c)) on_disk.insert(e.path().filename().string());
            REQUIRE(files.size() == on_disk.size());  // the fixtures hold only files Kiln reads
            for (auto& [n, bytes] : files) {
                INFO(n);
                CHECK(bytes == slurp(dir + "/" + c + "/" + n));  // byte-exact
            }
            CHECK(g.get_string("kiln." + c + ".config") == slurp(dir + "/" + c + "/tokenizer_config.json"));
            CHECK(g.get_int("kiln." + c + ".params") == 0);
        }
    }
    for (auto& t : g.tensors()) CHECK(t.offset % kGgufAlignment == 0);
    CHECK(tensors > 0);  // the diffusers components' tensors are checked in test_convert.cpp
    CHECK(g.tensors().size() == sum.tensors);

    std::ostringstream info;
    print_model_info(out, info);
    const std::string s = info.str();
    CHECK_THAT(s, Catch::Contains("[text_encoder] " + index_class(dir, "text_encoder")) &&
                      Catch::Contains("[tokenizer] " + index_class(dir, "tokenizer")) &&
                      Catch::Contains("model_max_length: ") && Catch::Contains("layers: 2") &&
                      Catch::Contains("tokenizer_config.json ("));
    if (pc.name == "sd3_pipeline")
        CHECK_THAT(s, Catch::Contains("vocab: 964 tokens (vocab.json)") && Catch::Contains("model_max_length: 77") &&
                          Catch::Contains("spiece.model (238.0 KiB)") && Catch::Contains("added tokens: 100"));
}

TEST_CASE("binary tokenizer files are stored as base64, text verbatim", "[converter][text]") {
    TempDir tmp;
    converter::convert_folder(fixture("tok_t5"), tmp / "t.kiln", quiet());
    GgufFile g = GgufFile::open(tmp / "t.kiln");
    CHECK(g.get_string_array("kiln.components") == std::vector<std::string>{"tokenizer"});
    CHECK(g.get_string("kiln.tokenizer.class") == "T5Tokenizer");
    auto names = g.get_string_array("kiln.tokenizer.files");
    auto enc = g.get_string_array("kiln.tokenizer.file_encodings");
    REQUIRE(names.size() == enc.size());
    for (size_t i = 0; i < names.size(); ++i) {
        INFO(names[i]);
        const std::string disk = slurp(fixture("tok_t5") + "/" + names[i]);
        const std::string stored = g.get_string("kiln.tokenizer.file." + names[i]);
        if (names[i] == "spiece.model") {
            CHECK(enc[i] == "base64");
            CHECK_FALSE(converter::is_utf8(disk));
            CHECK(stored == converter::base64_encode(disk));
        } else {
            CHECK(enc[i] == "utf8");
            CHECK(stored == disk);
        }
    }
    CHECK(converter::read_tokenizer_files(g, "tokenizer") ==
          converter::read_tokenizer_dir(fixture("tok_t5"), "T5Tokenizer", nullptr));
}

TEST_CASE("base64 round-trips every length and rejects bad text", "[converter][text]") {
    std::string s;
    for (int n = 0; n < 70; ++n) {
        CHECK(converter::base64_decode(converter::base64_encode(s), "t") == s);
        s += (char)(n * 37 + 11);
    }
    CHECK(converter::base64_encode("Man") == "TWFu");
    CHECK(converter::base64_encode("Ma") == "TWE=");
    CHECK(converter::base64_encode("M") == "TQ==");
    CHECK_THROWS_WITH(converter::base64_decode("TWE", "k"), Catch::Contains("k: invalid base64"));
    CHECK_THROWS_WITH(converter::base64_decode("T=Fu", "k"), Catch::Contains("k: invalid base64"));
    CHECK_THROWS_WITH(converter::base64_decode("TW!u", "k"), Catch::Contains("k: invalid base64"));
}

TEST_CASE("a text encoder folder converts alone; a sharded T5 converts to the same tensors", "[converter][text]") {
    TempDir tmp;
    const std::string src = fixture("sd3_pipeline") + "/text_encoder_3";
    const std::string dir = tmp / "t5";
    fs::create_directories(dir);
    fs::copy_file(src + "/config.json", dir + "/config.json");
    write_sharded(src + "/model.safetensors", dir, "model");
    converter::convert_folder(src, tmp / "single.kiln", quiet());
    converter::convert_folder(dir, tmp / "sharded.kiln", quiet());
    GgufFile a = GgufFile::open(tmp / "single.kiln"), b = GgufFile::open(tmp / "sharded.kiln");
    CHECK(a.get_string_array("kiln.components") == std::vector<std::string>{"text_encoder"});
    CHECK(a.get_string("kiln.text_encoder.class") == "T5EncoderModel");
    check_text_encoder(b, "text_encoder", src + "/model.safetensors", DType::f16);
    REQUIRE(a.tensors().size() == b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        CHECK(a.tensors()[i].name == b.tensors()[i].name);
        CHECK(a.read(a.tensors()[i].name).bytes == b.read(b.tensors()[i].name).bytes);
    }
}

TEST_CASE("T5's tied embedding: encoder.embed_tokens is accepted for or beside shared", "[converter][text]") {
    auto mode = GENERATE(as<std::string>{}, "instead", "both");
    INFO(mode);
    TempDir tmp;
    const std::string src = fixture("pixart_pipeline") + "/text_encoder", dir = tmp / "t5";
    auto [hdr, data] = read_raw_safetensors(src + "/model.safetensors");
    nlohmann::json h = hdr;
    // A copy of `from`'s bytes under a new name, appended (the reader rejects overlapping spans).
    auto add_copy = [&](const std::string& name, const std::string& from) {
        uint64_t b = hdr[from]["data_offsets"][0], e = hdr[from]["data_offsets"][1];
        h[name] = hdr[from];
        h[name]["data_offsets"] = {data.size(), data.size() + (e - b)};
        data += data.substr(b, e - b);
    };
    add_copy("encoder.embed_tokens.weight", "shared.weight");
    if (mode == "instead") h.erase("shared.weight");
    add_copy("decoder.final_layer_norm.weight", "encoder.final_layer_norm.weight");  // ignored, as transformers does
    write_raw_safetensors(dir + "/model.safetensors", h.dump(), data);
    spit(dir + "/config.json", slurp(src + "/config.json"));
    std::ostringstream log;
    converter::Options o;
    o.log = &log;
    converter::convert_folder(dir, tmp / "t.kiln", o);
    GgufFile g = GgufFile::open(tmp / "t.kiln");
    CHECK(g.find("text_encoder.shared.weight"));
    CHECK_FALSE(g.find("text_encoder.encoder.embed_tokens.weight"));
    CHECK_FALSE(g.find("text_encoder.decoder.final_layer_norm.weight"));
    auto st = SafeTensors::open(src + "/model.safetensors");
    CHECK(g.read("text_encoder.shared.weight").bytes == st.read("shared.weight").astype(DType::f16).bytes);
    CHECK_THAT(log.str(), Catch::Contains("decoder.final_layer_norm.weight"));
}

TEST_CASE("a broken text side fails with one clear error and no output file", "[converter][text][malformed]") {
    struct Case {
        std::string what, fixture_name, expect;
        std::function<void(const std::string&)> breakit;
    };
    auto c = GENERATE(
        Case{"missing merges.txt", "sd3_pipeline",
             "tokenizer_2: CLIPTokenizer needs vocab.json and merges.txt; "
             "missing merges.txt",
             [](const std::string& d) { fs::remove(d + "/tokenizer_2/merges.txt"); }},
        Case{"missing spiece.model", "flux_pipeline", "T5Tokenizer needs spiece.model; missing spiece.model",
             [](const std::string& d) { fs::remove(d + "/tokenizer_2/spiece.model"); }},
        Case{"no tokenizer folder", "pixart_pipeline", "component 'tokenizer' (T5Tokenizer) has no folder",
             [](const std::string& d) { fs::remove_all(d + "/tokenizer"); }},
        Case{"corrupt tokenizer JSON", "sd3_pipeline", "tokenizer/special_tokens_map.json: invalid JSON",
             [](const std::string& d) { spit(d + "/tokenizer/special_tokens_map.json", "{\"bos_token\": "); }},
        Case{"corrupt vocab.json", "flux_pipeline", "tokenizer/vocab.json: expected a JSON object",
             [](const std::string& d) { spit(d + "/tokenizer/vocab.json", "[1, 2]"); }},
        Case{"missing text-encoder tensor", "sd3_pipeline",
             "missing tensor(s) [1]: 'text_model.encoder.layers.1.mlp.fc2.bias'",
             [](const std::string& d) {
                 const std::string p = d + "/text_encoder_2/model.safetensors";
                 auto [h, data] = read_raw_safetensors(p);
                 h.erase("text_model.encoder.layers.1.mlp.fc2.bias");
                 write_raw_safetensors(p, h.dump(), data);
             }},
        Case{"no text-encoder weights", "flux_pipeline", "text_encoder_2: no weights: neither model.safetensors",
             [](const std::string& d) { fs::remove(d + "/text_encoder_2/model.safetensors"); }},
        Case{"T5 block without relative bias in block 0", "pixart_pipeline",
             "missing tensor(s) [1]: 'encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight'",
             [](const std::string& d) {
                 const std::string p = d + "/text_encoder/model.safetensors";
                 auto [h, data] = read_raw_safetensors(p);
                 h.erase("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
                 write_raw_safetensors(p, h.dump(), data);
             }});
    INFO(c.what);
    TempDir tmp;
    const std::string dir = copy_fixture(tmp, c.fixture_name);
    c.breakit(dir);
    const std::string out = tmp / "x.kiln";
    std::string what = "(no error)";
    try {
        converter::convert_folder(dir, out, quiet());
    } catch (const Error& e) {
        what = e.what();
    }
    std::replace(what.begin(), what.end(), '\\', '/');  // Windows names the folders of a path with '\\'
    CHECK_THAT(what, Catch::Contains(c.expect));
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(out + ".tmp"));
}

TEST_CASE("text encoders in f16 variant files are picked with --variant fp16", "[converter][text]") {
    TempDir tmp;
    const std::string dir = copy_fixture(tmp, "flux_pipeline");
    std::vector<std::pair<std::string, Tensor>> ts;
    {  // closed before the file is removed: Windows (and wine) keep an open file's name until it is closed
        auto st = SafeTensors::open(dir + "/text_encoder/model.safetensors");
        for (auto& t : st.tensors()) ts.emplace_back(t.name, st.read(t.name).astype(DType::f16));
    }
    write_safetensors(dir + "/text_encoder/model.fp16.safetensors", ts);
    fs::remove(dir + "/text_encoder/model.safetensors");
    CHECK_THROWS_WITH(converter::convert_folder(dir, tmp / "x.kiln", quiet()), Catch::Contains("--variant fp16"));
    // Every component then needs its variant file (as diffusers' variant= does).
    for (auto c : {"transformer", "vae"})
        fs::copy_file(dir + "/" + c + "/diffusion_pytorch_model.safetensors",
                      dir + "/" + c + "/diffusion_pytorch_model.fp16.safetensors");
    for (auto c : {"text_encoder_2"})
        fs::copy_file(dir + "/" + c + "/model.safetensors", dir + "/" + c + "/model.fp16.safetensors");
    auto o = quiet(DType::f32);
    o.variant = "fp16";
    converter::convert_folder(dir, tmp / "x.kiln", o);
    GgufFile g = GgufFile::open(tmp / "x.kiln");
    CHECK(g.read("text_encoder.text_model.final_layer_norm.weight").to_f32() ==
          std::find_if(ts.begin(), ts.end(), [](auto& t) {
              return t.first == "text_model.final_layer_norm.weight";
          })->second.to_f32());
}
