// Malformed inputs: each defect must raise one kiln::Error naming the problem, and the converter must
// leave neither an output file nor a .tmp behind.
#include <catch2/catch.hpp>
#include <functional>

#include "tests/converter/converter_test_util.h"

using namespace kiln;
using namespace kiln::test;
using nlohmann::json;

namespace {

// A copy of the DiT fixture (component folder) at dir.
void copy_dit(const std::string& dir) {
    fs::create_directories(dir);
    fs::copy_file(fixture("dit") + "/config.json", dir + "/config.json");
    fs::copy_file(fixture("dit") + "/diffusion_pytorch_model.safetensors",
                  dir + "/diffusion_pytorch_model.safetensors");
}

// Copies the DDIM DiT pipeline to dir.
void copy_pipeline(const std::string& dir) { fs::copy(fixture("dit_pipeline_ddim"), dir, fs::copy_options::recursive); }

// Rewrites dir's safetensors through f(header, data).
void edit_weights(const std::string& dir, const std::function<void(json&, std::string&)>& f) {
    const std::string p = dir + "/diffusion_pytorch_model.safetensors";
    auto [h, d] = read_raw_safetensors(p);
    f(h, d);
    write_raw_safetensors(p, h.dump(), d);
}

struct Defect {
    const char* name;
    const char* expect;                                // a word the message must contain
    std::function<void(const std::string& dir)> make;  // dir: a fresh folder to build the bad input in
};

const std::vector<Defect>& defects() {
    static const std::vector<Defect> d = {
        {"truncated safetensors", "past the data area",
         [](const std::string& dir) {
             copy_dit(dir);
             std::string s = slurp(dir + "/diffusion_pytorch_model.safetensors");
             spit(dir + "/diffusion_pytorch_model.safetensors", s.substr(0, s.size() - 100));
         }},
        {"file shorter than the length prefix", "truncated",
         [](const std::string& dir) {
             copy_dit(dir);
             spit(dir + "/diffusion_pytorch_model.safetensors", "abc");
         }},
        {"header length past EOF", "runs past the end of the file",
         [](const std::string& dir) {
             copy_dit(dir);
             std::string s = slurp(dir + "/diffusion_pytorch_model.safetensors");
             uint64_t n = s.size() + 10;
             std::memcpy(s.data(), &n, 8);
             spit(dir + "/diffusion_pytorch_model.safetensors", s);
         }},
        {"header length over 100 MB", "100 MB",
         [](const std::string& dir) {
             copy_dit(dir);
             std::string s = slurp(dir + "/diffusion_pytorch_model.safetensors");
             uint64_t n = 1ull << 40;
             std::memcpy(s.data(), &n, 8);
             spit(dir + "/diffusion_pytorch_model.safetensors", s);
         }},
        {"a GGUF file under a safetensors name", "a GGUF file (a Kiln model file or a llama.cpp one), not safetensors",
         [](const std::string& dir) {
             copy_dit(dir);
             std::string s = slurp(dir + "/diffusion_pytorch_model.safetensors");
             std::memcpy(s.data(), "GGUF\x03\0\0\0", 8);
             spit(dir + "/diffusion_pytorch_model.safetensors", s);
         }},
        {"invalid JSON header", "not valid JSON",
         [](const std::string& dir) {
             copy_dit(dir);
             write_raw_safetensors(dir + "/diffusion_pytorch_model.safetensors", "{\"a\": [1, 2", "");
         }},
        {"unknown dtype", "unsupported dtype 'C64'",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) { h["proj_out_1.bias"]["dtype"] = "C64"; });
         }},
        {"shape x dtype != span", "needs",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) { h["proj_out_1.weight"]["shape"] = {64, 31}; });
         }},
        {"span past data", "runs past the data area",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string& d) {
                 h["proj_out_1.bias"]["data_offsets"] = {d.size() - 4 * 64 + 8, d.size() + 8};
             });
         }},
        {"overlapping spans", "overlap",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) {
                 // proj_out_2.bias ([32] f32) moved onto the start of proj_out_1.bias ([64] f32).
                 uint64_t b = h["proj_out_1.bias"]["data_offsets"][0];
                 h["proj_out_2.bias"]["data_offsets"] = {b + 4, b + 4 + 128};
             });
         }},
        {"negative dimension", "negative dimension",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) { h["proj_out_1.bias"]["shape"] = {-64}; });
         }},
        {"duplicate tensor names in the header", "appears twice",
         [](const std::string& dir) {
             copy_dit(dir);
             auto [h, d] = read_raw_safetensors(dir + "/diffusion_pytorch_model.safetensors");
             std::string text = h.dump();
             std::string dup = ",\"proj_out_1.bias\":" + h["proj_out_1.bias"].dump();
             text.insert(text.size() - 1, dup);
             write_raw_safetensors(dir + "/diffusion_pytorch_model.safetensors", text, d);
         }},
        {"index points to a missing shard", "is missing",
         [](const std::string& dir) {
             copy_dit(dir);
             fs::rename(dir + "/diffusion_pytorch_model.safetensors",
                        dir + "/diffusion_pytorch_model-00001-of-00002.safetensors");
             auto [h, d] = read_raw_safetensors(dir + "/diffusion_pytorch_model-00001-of-00002.safetensors");
             json wm = json::object();
             for (auto& [n, v] : h.items())
                 if (n != "__metadata__") wm[n] = "diffusion_pytorch_model-00001-of-00002.safetensors";
             wm["proj_out_1.bias"] = "diffusion_pytorch_model-00002-of-00002.safetensors";
             spit(dir + "/diffusion_pytorch_model.safetensors.index.json", json{{"weight_map", wm}}.dump());
         }},
        {"index names a tensor absent from its shard", "is in this shard, but it is not",
         [](const std::string& dir) {
             copy_dit(dir);
             fs::rename(dir + "/diffusion_pytorch_model.safetensors", dir + "/shard1.safetensors");
             auto [h, d] = read_raw_safetensors(dir + "/shard1.safetensors");
             json wm = json::object();
             for (auto& [n, v] : h.items())
                 if (n != "__metadata__") wm[n] = "shard1.safetensors";
             wm["ghost.weight"] = "shard1.safetensors";
             spit(dir + "/diffusion_pytorch_model.safetensors.index.json", json{{"weight_map", wm}}.dump());
         }},
        {"index is not JSON", "invalid JSON in sharded index",
         [](const std::string& dir) {
             copy_dit(dir);
             spit(dir + "/diffusion_pytorch_model.safetensors.index.json", "{weight_map: }");
         }},
        {"index entry escapes the folder", "points outside the folder",
         [](const std::string& dir) {
             copy_dit(dir);
             spit(dir + "/diffusion_pytorch_model.safetensors.index.json",
                  json{{"weight_map", {{"proj_out_1.bias", "../x.safetensors"}}}}.dump());
         }},
        {"missing tensor for the architecture", "missing tensor(s) [1]: 'transformer_blocks.1.attn1.to_q.bias'",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) { h.erase("transformer_blocks.1.attn1.to_q.bias"); });
         }},
        {"unexpected extra tensor", "unexpected tensor(s) [1]: 'transformer_blocks.0.attn2.to_q.weight'",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string& d) {
                 h["transformer_blocks.0.attn2.to_q.weight"] = {
                     {"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {d.size(), d.size() + 8}}};
                 d += std::string(8, '\0');
             });
         }},
        {"config disagrees with the checkpoint (num_layers)", "missing tensor(s) [",
         [](const std::string& dir) {
             copy_dit(dir);
             auto c = json::parse(slurp(dir + "/config.json"));
             c["num_layers"] = 3;
             spit(dir + "/config.json", c.dump());
         }},
        {"unknown _class_name", "unsupported _class_name 'UNet2DConditionModel' (supported: DiTTransformer2DModel",
         [](const std::string& dir) {
             copy_dit(dir);
             auto c = json::parse(slurp(dir + "/config.json"));
             c["_class_name"] = "UNet2DConditionModel";
             spit(dir + "/config.json", c.dump());
         }},
        {"config.json is not JSON", "invalid JSON",
         [](const std::string& dir) {
             copy_dit(dir);
             spit(dir + "/config.json", "{\"_class_name\": ");
         }},
        {"config value of the wrong type", "'num_layers' must be an integer",
         [](const std::string& dir) {
             copy_dit(dir);
             auto c = json::parse(slurp(dir + "/config.json"));
             c["num_layers"] = "two";
             spit(dir + "/config.json", c.dump());
         }},
        {"missing config.json in a pipeline component", "missing config.json",
         [](const std::string& dir) {
             copy_pipeline(dir);
             fs::remove(dir + "/vae/config.json");
         }},
        {"no weights", "no weights",
         [](const std::string& dir) {
             copy_dit(dir);
             fs::remove(dir + "/diffusion_pytorch_model.safetensors");
         }},
        {"not a diffusers folder", "not a diffusers folder",
         [](const std::string& dir) { fs::create_directories(dir); }},
        {"non-identical blocks", "is not identical to transformer_blocks.0",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) {
                 // Same bytes, another shape: [32, 32] -> [16, 64] in block 1 only.
                 h["transformer_blocks.1.attn1.to_q.weight"]["shape"] = {16, 64};
             });
         }},
        {"block dtype differs", "is not identical to transformer_blocks.0",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) {
                 h["transformer_blocks.1.attn1.to_q.bias"]["dtype"] = "I32";  // same size as F32
             });
         }},
        {"model_index class differs from the component config", "differs from model_index.json",
         [](const std::string& dir) {
             copy_pipeline(dir);
             auto m = json::parse(slurp(dir + "/model_index.json"));
             m["transformer"][1] = "PixArtTransformer2DModel";
             spit(dir + "/model_index.json", m.dump());
         }},
        {"unsupported scheduler", "unsupported scheduler _class_name 'LMSDiscreteScheduler'",
         [](const std::string& dir) {
             copy_pipeline(dir);
             for (auto p : {"/model_index.json", "/scheduler/scheduler_config.json"}) {
                 std::string s = slurp(dir + p);
                 s.replace(s.find("DDIMScheduler"), 13, "LMSDiscreteScheduler");
                 spit(dir + p, s);
             }
         }},
        {"unet pipeline", "'unet' (UNet2DConditionModel) is not supported",
         [](const std::string& dir) {
             copy_pipeline(dir);
             auto m = json::parse(slurp(dir + "/model_index.json"));
             m["unet"] = {"diffusers", "UNet2DConditionModel"};
             spit(dir + "/model_index.json", m.dump());
         }},
        {"U8 tensor", "U8",
         [](const std::string& dir) {
             copy_dit(dir);
             edit_weights(dir, [](json& h, std::string&) {
                 h["proj_out_1.bias"]["dtype"] = "U8";
                 h["proj_out_1.bias"]["shape"] = {256};
             });
         }},
        {"unsupported VAE block type", "not supported (supported: DownEncoderBlock2D)",
         [](const std::string& dir) {
             copy_pipeline(dir);
             auto c = json::parse(slurp(dir + "/vae/config.json"));
             c["down_block_types"][0] = "AttnDownEncoderBlock2D";
             spit(dir + "/vae/config.json", c.dump());
         }},
    };
    return d;
}

}  // namespace

TEST_CASE("malformed inputs fail with one clear error and leave no output", "[converter][malformed]") {
    REQUIRE(defects().size() >= 15);
    for (const auto& d : defects()) {
        DYNAMIC_SECTION(d.name) {
            TempDir tmp;
            const std::string src = tmp / "src", out = tmp / "out.kiln";
            d.make(src);
            converter::Options o;
            o.quiet = true;
            std::string msg;
            try {
                converter::convert_folder(src, out, o);
            } catch (const kiln::Error& e) {
                msg = e.what();
            }
            INFO("message: " << msg);
            CHECK_FALSE(msg.empty());
            CHECK_THAT(msg, Catch::Contains(d.expect));
            CHECK(msg.find('\n') == std::string::npos);  // one line
            CHECK_FALSE(fs::exists(out));
            CHECK_FALSE(fs::exists(out + ".tmp"));
        }
    }
}

TEST_CASE("a failure while writing leaves no output and no .tmp", "[converter][malformed]") {
    TempDir tmp;
    const std::string out = tmp / "w.kiln";
    GgufWriter w;
    w.add_tensor("a", DType::f32, {4}, [](void* p) { std::memset(p, 0, 16); });
    w.add_tensor("b", DType::f32, {4}, [](void*) { throw kiln::Error("disk on fire"); });
    CHECK_THROWS_WITH(w.write(out), Catch::Contains("disk on fire"));
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(out + ".tmp"));
    CHECK_THROWS_WITH(GgufWriter().write(tmp / "no/such/dir/x.kiln"), Catch::Contains("cannot open for writing"));
}
