// Every fixture converts; every tensor reads back as the dtype policy says (bit-exact: f32 copies, or
// the one f16/bf16 rounding of the source); block layout metadata matches the real offsets.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "converter/arch.h"
#include "converter/info.h"
#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Weight files of a component folder as the converter picks them.
std::string weights_of(const std::string& dir, const std::string& variant = "") {
    std::string v = variant.empty() ? "" : "." + variant;
    std::string index = dir + "/diffusion_pytorch_model.safetensors.index" + v + ".json";
    if (fs::exists(index)) return index;
    return dir + "/diffusion_pytorch_model" + v + ".safetensors";
}

// Checks one component C of g against its source folder; returns the number of tensors checked.
size_t check_component(const GgufFile& g, const std::string& comp, const std::string& dir, DType want) {
    SafeTensors st = SafeTensors::open(weights_of(dir));
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
        CHECK(out.offset % kGgufAlignment == 0);
        Tensor a = st.read(src.name);
        Tensor expect = a.astype(out.dtype);  // one rounding from the source dtype
        Tensor b = g.read(out.name);
        REQUIRE(b.nbytes() == expect.nbytes());
        CHECK(std::memcmp(b.bytes.data(), expect.bytes.data(), b.nbytes()) == 0);
    }
    CHECK(g.get_int("kiln." + comp + ".params") == params);
    CHECK(g.get_string("kiln." + comp + ".config") == slurp(dir + "/config.json"));
    return st.tensors().size();
}

// block i tensor offset == data_start + base + (i - first) * stride + rel, for every run.
void check_blocks(const GgufFile& g, const std::string& comp) {
    const std::string p = "kiln." + comp + ".blocks";
    for (const std::string& kind : g.get_string_array(p)) {
        const std::string k = p + "." + kind + ".";
        int64_t count = g.get_int(k + "count");
        auto runs = g.get_int_array(k + "runs");
        REQUIRE(runs.size() % 4 == 0);
        int64_t next = 0;
        for (size_t r = 0; r < runs.size(); r += 4) {
            int64_t first = runs[r], n = runs[r + 1], base = runs[r + 2], stride = runs[r + 3];
            CHECK(first == next);
            next = first + n;
            CHECK(stride % kGgufAlignment == 0);
            // Relative layout of the run's first block.
            const std::string b0 = comp + "." + kind + "." + std::to_string(first) + ".";
            std::map<std::string, uint64_t> rel;
            for (auto& t : g.tensors())
                if (t.name.compare(0, b0.size(), b0) == 0)
                    rel[t.name.substr(b0.size())] = t.offset - g.data_offset() - base;
            REQUIRE(!rel.empty());
            for (int64_t i = first; i < first + n; ++i) {
                const std::string bi = comp + "." + kind + "." + std::to_string(i) + ".";
                size_t seen = 0;
                for (auto& t : g.tensors())
                    if (t.name.compare(0, bi.size(), bi) == 0) {
                        INFO(t.name);
                        REQUIRE(rel.count(t.name.substr(bi.size())));
                        CHECK(t.offset - g.data_offset() ==
                              (uint64_t)(base + (i - first) * stride) + rel[t.name.substr(bi.size())]);
                        seen++;
                    }
                CHECK(seen == rel.size());
            }
        }
        CHECK(next == count);
        if (runs.size() == 4) {
            CHECK(g.get_int(k + "base") == runs[2]);
            CHECK(g.get_int(k + "stride") == runs[3]);
        } else {
            CHECK_FALSE(g.has(k + "base"));
        }
    }
}

void check_common(const GgufFile& g) {
    CHECK(g.get_string("general.architecture") == "kiln");
    CHECK(g.get_int("kiln.format_version") == 1);
    CHECK(g.get_int("general.alignment") == 4096);
    CHECK(g.value("general.alignment").type == GgufType::u32);
    CHECK(!g.get_string("general.name").empty());
}

converter::Options quiet(DType d = DType::f16) {
    converter::Options o;
    o.dtype = d;
    o.quiet = true;
    return o;
}

}  // namespace

TEST_CASE("every model fixture converts and round-trips", "[converter]") {
    auto name = GENERATE(as<std::string>{}, "dit", "vae", "flux2_klein_pipeline/vae", "pixart", "sd3",
                         "sd3_qknorm_dual", "flux", "flux_noguidance");
    auto dt = GENERATE(DType::f32, DType::f16, DType::bf16);
    INFO(name << " " << dtype_name(dt));
    TempDir tmp;
    const std::string out = tmp / "model.kiln";
    auto sum = converter::convert_folder(fixture(name), out, quiet(dt));
    GgufFile g = GgufFile::open(out);
    check_common(g);
    // AutoencoderKLFlux2 (flux2_klein_pipeline/vae): bn.running_mean / _var (f32) and num_batches_tracked (i64) too.
    std::string comp = name == "vae" || name == "flux2_klein_pipeline/vae" ? "vae" : "transformer";
    CHECK(g.get_string_array("kiln.components") == std::vector<std::string>{comp});
    CHECK(check_component(g, comp, fixture(name), dt) == sum.tensors);
    CHECK(g.tensors().size() == sum.tensors);
    CHECK(fs::file_size(out) == sum.bytes);
    check_blocks(g, comp);
    if (name == "sd3" || name == "sd3_qknorm_dual") {  // last block context_pre_only: its own run
        auto runs = g.get_int_array("kiln.transformer.blocks.transformer_blocks.runs");
        CHECK(runs.size() == 8);
    }
    if (name == "flux")
        CHECK(g.get_string_array("kiln.transformer.blocks") ==
              std::vector<std::string>{"transformer_blocks", "single_transformer_blocks"});
    CHECK_FALSE(fs::exists(out + ".tmp"));
}

TEST_CASE("pipelines convert with transformer, vae and scheduler", "[converter]") {
    auto dir =
        GENERATE(fixture("dit_pipeline_ddim"), fixture("dit_pipeline_dpmpp"), repo_path("models/default/dit-digits"));
    INFO(dir);
    TempDir tmp;
    const std::string out = tmp / "pipe.kiln";
    converter::convert_folder(dir, out, quiet());
    GgufFile g = GgufFile::open(out);
    check_common(g);
    CHECK(g.get_string_array("kiln.components") == std::vector<std::string>{"transformer", "vae", "scheduler"});
    CHECK(g.get_string("kiln.pipeline.class") == "DiTPipeline");
    CHECK(g.get_string("kiln.pipeline.model_index") == slurp(dir + "/model_index.json"));
    size_t n = check_component(g, "transformer", dir + "/transformer", DType::f16);
    n += check_component(g, "vae", dir + "/vae", DType::f16);
    CHECK(g.tensors().size() == n);
    check_blocks(g, "transformer");
    CHECK(g.get_string("kiln.transformer.class") == "DiTTransformer2DModel");
    CHECK(g.get_string("kiln.vae.class") == "AutoencoderKL");
    CHECK(g.get_string("kiln.scheduler.config") == slurp(dir + "/scheduler/scheduler_config.json"));
    CHECK(g.get_int("kiln.scheduler.params") == 0);
    auto mi = nlohmann::json::parse(slurp(dir + "/model_index.json"));
    CHECK(g.get_string("kiln.scheduler.class") == mi["scheduler"][1].get<std::string>());
    if (mi.contains("id2label"))
        CHECK(nlohmann::json::parse(g.get_string("kiln.pipeline.id2label")) == mi["id2label"]);
    else
        CHECK_FALSE(g.has("kiln.pipeline.id2label"));

    std::ostringstream info;
    print_model_info(out, info);
    CHECK_THAT(info.str(), Catch::Contains("[transformer] DiTTransformer2DModel") &&
                               Catch::Contains("blocks: transformer_blocks x") && Catch::Contains("[scheduler]"));
}

TEST_CASE("AutoencoderKLFlux2's tensors: the bn buffers, the decoder's own channels", "[converter]") {
    auto has = [](const converter::ArchSpec& s, const std::string& n) {
        return std::find(s.expected.begin(), s.expected.end(), n) != s.expected.end();
    };
    nlohmann::json cfg = {{"block_out_channels", {8, 16}},
                          {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
                          {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
                          {"layers_per_block", 1}};
    auto kl = converter::arch_spec("AutoencoderKL", cfg, "config.json");
    auto f2 = converter::arch_spec("AutoencoderKLFlux2", cfg, "config.json");
    for (const char* n : {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}) {
        CHECK(has(f2, n));
        CHECK_FALSE(has(kl, n));
    }
    CHECK(f2.expected.size() == kl.expected.size() + 3);
    // The decoder's last up block goes 16 -> 8 channels (a conv_shortcut); with decoder_block_out_channels
    // [16, 16] it keeps 16 (none). AutoencoderKL has no such key (diffusers ignores it).
    CHECK(has(f2, "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"));
    cfg["decoder_block_out_channels"] = {16, 16};
    CHECK_FALSE(has(converter::arch_spec("AutoencoderKLFlux2", cfg, "config.json"),
                    "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"));
    CHECK(has(converter::arch_spec("AutoencoderKL", cfg, "config.json"),
              "decoder.up_blocks.1.resnets.0.conv_shortcut.weight"));
    cfg["decoder_block_out_channels"] = {16, 16, 16};  // one entry per up block
    CHECK_THROWS_AS(converter::arch_spec("AutoencoderKLFlux2", cfg, "config.json"), kiln::Error);
}

TEST_CASE("scheduler folders convert to a scheduler-only file", "[converter]") {
    auto name = GENERATE(as<std::string>{}, "sched_ddim", "sched_ddim_sd", "sched_dpmpp2m", "sched_euler",
                         "sched_flowmatch", "sched_flowmatch_dynamic", "sched_flowmatch_shift3");
    TempDir tmp;
    converter::convert_folder(fixture(name), tmp / "s.kiln", quiet());
    GgufFile g = GgufFile::open(tmp / "s.kiln");
    CHECK(g.get_string_array("kiln.components") == std::vector<std::string>{"scheduler"});
    CHECK(g.tensors().empty());
    CHECK(g.get_string("kiln.scheduler.config") == slurp(fixture(name) + "/scheduler_config.json"));
}

TEST_CASE("a sharded checkpoint converts to the same file as the single one", "[converter]") {
    TempDir tmp;
    auto [hdr, data] = read_raw_safetensors(fixture("flux") + "/diffusion_pytorch_model.safetensors");
    nlohmann::json shard[2] = {nlohmann::json::object(), nlohmann::json::object()};
    std::string blob[2];
    nlohmann::json weight_map = nlohmann::json::object();
    int k = 0;
    for (auto& [name, v] : hdr.items()) {
        if (name == "__metadata__") continue;
        int s = (k++ % 3 == 0) ? 0 : 1;  // interleave so both shards hold block and non-block tensors
        uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
        nlohmann::json t = v;
        t["data_offsets"] = {blob[s].size(), blob[s].size() + (e - b)};
        blob[s] += data.substr(b, e - b);
        shard[s][name] = t;
        weight_map[name] = "diffusion_pytorch_model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    }
    const std::string dir = tmp / "sharded";
    for (int s = 0; s < 2; ++s)
        write_raw_safetensors(dir + "/diffusion_pytorch_model-0000" + std::to_string(s + 1) + "-of-00002.safetensors",
                              shard[s].dump(), blob[s]);
    spit(dir + "/diffusion_pytorch_model.safetensors.index.json",
         nlohmann::json{{"metadata", {{"total_size", data.size()}}}, {"weight_map", weight_map}}.dump(2));
    spit(dir + "/config.json", slurp(fixture("flux") + "/config.json"));

    converter::convert_folder(fixture("flux"), tmp / "single.kiln", quiet());
    converter::convert_folder(dir, tmp / "sharded.kiln", quiet());
    GgufFile a = GgufFile::open(tmp / "single.kiln"), b = GgufFile::open(tmp / "sharded.kiln");
    REQUIRE(a.tensors().size() == b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        CHECK(a.tensors()[i].name == b.tensors()[i].name);
        CHECK(a.tensors()[i].offset == b.tensors()[i].offset);
        CHECK(a.read(a.tensors()[i].name).bytes == b.read(b.tensors()[i].name).bytes);
    }
    CHECK(a.get_int_array("kiln.transformer.blocks.transformer_blocks.runs") ==
          b.get_int_array("kiln.transformer.blocks.transformer_blocks.runs"));
}

TEST_CASE("--variant fp16 picks the variant weights", "[converter]") {
    TempDir tmp;
    const std::string dir = tmp / "dit";
    fs::create_directories(dir);
    fs::copy_file(fixture("dit") + "/config.json", dir + "/config.json");
    // An f16 copy of the weights under the variant name.
    auto st = SafeTensors::open(fixture("dit") + "/diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, Tensor>> ts;
    for (auto& t : st.tensors()) ts.emplace_back(t.name, st.read(t.name).astype(DType::f16));
    write_safetensors(dir + "/diffusion_pytorch_model.fp16.safetensors", ts);

    auto o = quiet(DType::f32);
    CHECK_THROWS_WITH(converter::convert_folder(dir, tmp / "x.kiln", o), Catch::Contains("--variant fp16"));
    o.variant = "fp16";
    converter::convert_folder(dir, tmp / "x.kiln", o);
    GgufFile g = GgufFile::open(tmp / "x.kiln");
    // f16 source, f32 output: exact widening.
    auto& w = g.at("transformer.proj_out_1.weight");
    CHECK(w.dtype == DType::f32);
    CHECK(g.read(w.name).to_f32() == st.read("proj_out_1.weight").astype(DType::f16).to_f32());
}

TEST_CASE("old VAE attention names are renamed as diffusers does", "[converter]") {
    TempDir tmp;
    const std::string dir = tmp / "vae";
    auto [hdr, data] = read_raw_safetensors(fixture("vae") + "/diffusion_pytorch_model.safetensors");
    nlohmann::json h2 = nlohmann::json::object();
    for (auto& [name, v] : hdr.items()) {
        std::string n = name;
        for (auto [from, to] : {std::pair{".to_q.", ".query."},
                                {".to_k.", ".key."},
                                {".to_v.", ".value."},
                                {".to_out.0.", ".proj_attn."}})
            if (n.find(".attentions.") != std::string::npos && n.find(from) != std::string::npos)
                n.replace(n.find(from), std::string(from).size(), to);
        h2[n] = v;
    }
    write_raw_safetensors(dir + "/diffusion_pytorch_model.safetensors", h2.dump(), data);
    spit(dir + "/config.json", slurp(fixture("vae") + "/config.json"));
    converter::convert_folder(dir, tmp / "v.kiln", quiet());
    GgufFile g = GgufFile::open(tmp / "v.kiln");
    CHECK(g.find("vae.decoder.mid_block.attentions.0.to_out.0.weight"));
    CHECK_FALSE(g.find("vae.decoder.mid_block.attentions.0.proj_attn.weight"));
}

// Not part of the default run: writes converted fixtures plus Kiln's own listing of each
// (X.kiln.json) into $KILN_GGUF_DUMP_DIR for tests/converter/gguf_check.mjs (CTest: converter_gguf_npm).
TEST_CASE("dump converted fixtures for the independent GGUF check", "[.gguf_dump]") {
    const char* env = std::getenv("KILN_GGUF_DUMP_DIR");
    REQUIRE(env);
    fs::create_directories(env);
    std::vector<std::pair<std::string, std::string>> srcs;
    for (auto n : {"dit", "vae", "pixart", "sd3", "sd3_qknorm_dual", "flux", "flux_noguidance", "dit_pipeline_ddim",
                   "sched_euler", "pixart_pipeline", "sd3_pipeline", "flux_pipeline", "tok_t5"})
        srcs.emplace_back(n, fixture(n));
    srcs.emplace_back("dit-digits", repo_path("models/default/dit-digits"));
    // Quantized files: every ggml block type (the DiT fixture has 32- and 256-wide linear rows).
    std::map<std::string, DType> dtypes{{"flux", DType::bf16}, {"dit-digits_q4_k", DType::q4_k}};
    for (DType q : {DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q4_k, DType::q6_k}) {
        srcs.emplace_back(std::string("dit_") + dtype_name(q), fixture("dit"));
        dtypes[srcs.back().first] = q;
    }
    srcs.emplace_back("dit-digits_q4_k", repo_path("models/default/dit-digits"));
    for (auto& [n, dir] : srcs) {
        const std::string out = std::string(env) + "/" + n + ".kiln";
        converter::convert_folder(dir, out, quiet(dtypes.count(n) ? dtypes[n] : DType::f16));
        GgufFile g = GgufFile::open(out);
        nlohmann::json j;
        j["data_offset"] = g.data_offset();
        j["metadata"] = {{"general.architecture", g.get_string("general.architecture")},
                         {"general.alignment", g.get_int("general.alignment")},
                         {"kiln.format_version", g.get_int("kiln.format_version")},
                         {"kiln.components", g.get_string_array("kiln.components")}};
        // Tokenizer files are strings (base64 for binary ones): @huggingface/gguf must read them back the same.
        for (auto& c : g.get_string_array("kiln.components"))
            if (g.has("kiln." + c + ".files"))
                for (auto& f : g.get_string_array("kiln." + c + ".files")) {
                    const std::string k = "kiln." + c + ".file." + f;
                    j["metadata"][k] = g.get_string(k);
                }
        j["tensors"] = nlohmann::json::array();
        for (auto& t : g.tensors())
            j["tensors"].push_back({{"name", t.name},
                                    {"shape", t.shape},
                                    {"ggml_type", ggml_type_of(t.dtype)},
                                    {"ggml_name", ggml_type_name(ggml_type_of(t.dtype))},
                                    {"offset", t.offset}});
        spit(out + ".json", j.dump());
    }
}

TEST_CASE("Python JSON tokens are read as null, strings untouched", "[converter]") {
    std::string t = R"({"a": -Infinity, "b": [NaN, Infinity], "c": "NaN -Infinity \"Infinity\"", "d": 1e-3})";
    auto j = nlohmann::json::parse(converter::python_json_to_json(t));
    CHECK(j["a"].is_null());
    CHECK(j["b"][0].is_null());
    CHECK(j["b"][1].is_null());
    CHECK(j["c"] == "NaN -Infinity \"Infinity\"");
    CHECK(j["d"] == 1e-3);
}

TEST_CASE("unsupported pipeline components are skipped with a note", "[converter]") {
    TempDir tmp;
    const std::string dir = tmp / "pipe";
    fs::copy(fixture("dit_pipeline_ddim"), dir, fs::copy_options::recursive);
    auto m = nlohmann::json::parse(slurp(dir + "/model_index.json"));
    m["text_encoder"] = {"transformers", "UMT5EncoderModel"};
    m["feature_extractor"] = {"transformers", "CLIPImageProcessor"};
    m["safety_checker"] = {nullptr, nullptr};
    spit(dir + "/model_index.json", m.dump(2));
    std::ostringstream log;
    converter::Options o;
    o.log = &log;
    auto sum = converter::convert_folder(dir, tmp / "p.kiln", o);
    CHECK(sum.components == std::vector<std::string>{"transformer", "vae", "scheduler"});
    CHECK_THAT(log.str(), Catch::Contains("skipping component 'text_encoder' (UMT5EncoderModel)") &&
                              Catch::Contains("skipping component 'feature_extractor'") &&
                              !Catch::Contains("safety_checker") && Catch::Contains("wrote "));

    // A supported text encoder that model_index.json lists must be there.
    m["text_encoder"] = {"transformers", "CLIPTextModel"};
    spit(dir + "/model_index.json", m.dump(2));
    CHECK_THROWS_WITH(converter::convert_folder(dir, tmp / "q.kiln", o),
                      Catch::Contains("component 'text_encoder' (CLIPTextModel) has no folder"));
    CHECK_FALSE(fs::exists(tmp / "q.kiln"));
}
