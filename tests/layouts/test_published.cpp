// The published models (models/layouts/published.h): their configs parse and name their classes, recognize() tells
// each model from the others and from every other size by shapes alone, and find_tokenizers() finds the tokenizer
// folders in a pipeline folder or the Hugging Face cache, or fails with one line naming the files to fetch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "models/layouts/published.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "tests/support/test_support.h"

using namespace kiln;
using namespace kiln::layouts;
namespace fs = std::filesystem;

namespace {

// A TensorSet of metadata only: name -> shape (f16), no data.
class ShapeSet : public TensorSet {
public:
    void add(const std::string& name, const Shape& shape) { map_[name] = {name, DType::f16, shape}; }
    void erase(const std::string& name) { map_.erase(name); }
    void erase_prefix(const std::string& prefix) {
        for (auto it = map_.begin(); it != map_.end();)
            it = it->first.rfind(prefix, 0) == 0 ? map_.erase(it) : std::next(it);
    }
    const std::vector<TensorInfo>& tensors() const override {
        list_.clear();
        for (const auto& [n, t] : map_) list_.push_back(t);
        return list_;
    }
    const TensorInfo* find(const std::string& name) const override {
        auto it = map_.find(name);
        return it == map_.end() ? nullptr : &it->second;
    }
    Tensor read(const std::string&) const override { KILN_FAIL("ShapeSet holds no data"); }
    std::string source() const override { return "synthetic"; }

private:
    std::map<std::string, TensorInfo> map_;
    mutable std::vector<TensorInfo> list_;
};

void linear(ShapeSet& s, const std::string& name, int64_t out, int64_t in, bool bias = true) {
    s.add(name + ".weight", {out, in});
    if (bias) s.add(name + ".bias", {out});
}

// FluxTransformer2DModel's tensors as diffusers names them: H = heads * d, L joint and S single blocks, MLP 4H.
ShapeSet flux(int64_t heads, int64_t d, int64_t L, int64_t S, bool guidance, int64_t in = 64, int64_t joint = 4096,
              int64_t pooled = 768) {
    ShapeSet s;
    const int64_t H = heads * d, mlp = 4 * H;
    linear(s, "x_embedder", H, in);
    linear(s, "context_embedder", H, joint);
    for (const char* e : {"timestep_embedder", "guidance_embedder"}) {
        if (std::string(e) == "guidance_embedder" && !guidance) continue;
        linear(s, std::string("time_text_embed.") + e + ".linear_1", H, 256);
        linear(s, std::string("time_text_embed.") + e + ".linear_2", H, H);
    }
    linear(s, "time_text_embed.text_embedder.linear_1", H, pooled);
    linear(s, "time_text_embed.text_embedder.linear_2", H, H);
    for (int64_t i = 0; i < L; ++i) {
        const std::string b = "transformer_blocks." + std::to_string(i) + ".";
        linear(s, b + "norm1.linear", 6 * H, H);
        linear(s, b + "norm1_context.linear", 6 * H, H);
        for (const char* p :
             {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"})
            linear(s, b + "attn." + p, H, H);
        for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
            s.add(b + "attn." + n + ".weight", {d});
        for (const char* f : {"ff", "ff_context"}) {
            linear(s, b + f + ".net.0.proj", mlp, H);
            linear(s, b + f + ".net.2", H, mlp);
        }
    }
    for (int64_t i = 0; i < S; ++i) {
        const std::string b = "single_transformer_blocks." + std::to_string(i) + ".";
        linear(s, b + "norm.linear", 3 * H, H);
        linear(s, b + "proj_mlp", mlp, H);
        linear(s, b + "proj_out", H, H + mlp);
        for (const char* p : {"to_q", "to_k", "to_v"}) linear(s, b + "attn." + p, H, H);
        for (const char* n : {"norm_q", "norm_k"}) s.add(b + "attn." + n + ".weight", {d});
    }
    linear(s, "norm_out.linear", 2 * H, H);
    linear(s, "proj_out", in, H);
    return s;
}

// SD3Transformer2DModel's tensors: H = heads * 64, L joint blocks (the last context_pre_only), a M x M position
// table, qk RMS norms when qk, attn2 in the blocks of `dual`.
ShapeSet sd3(int64_t heads, int64_t L, int64_t M, bool qk, const std::vector<int64_t>& dual) {
    ShapeSet s;
    const int64_t d = 64, H = heads * d, mlp = 4 * H;
    s.add("pos_embed.proj.weight", {H, 16, 2, 2});
    s.add("pos_embed.proj.bias", {H});
    s.add("pos_embed.pos_embed", {1, M * M, H});
    linear(s, "context_embedder", H, 4096);
    linear(s, "time_text_embed.timestep_embedder.linear_1", H, 256);
    linear(s, "time_text_embed.timestep_embedder.linear_2", H, H);
    linear(s, "time_text_embed.text_embedder.linear_1", H, 2048);
    linear(s, "time_text_embed.text_embedder.linear_2", H, H);
    for (int64_t i = 0; i < L; ++i) {
        const std::string b = "transformer_blocks." + std::to_string(i) + ".";
        const bool last = i == L - 1, is_dual = std::find(dual.begin(), dual.end(), i) != dual.end();
        linear(s, b + "norm1.linear", (is_dual ? 9 : 6) * H, H);
        linear(s, b + "norm1_context.linear", (last ? 2 : 6) * H, H);
        for (const char* p : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0"})
            linear(s, b + "attn." + p, H, H);
        if (!last) linear(s, b + "attn.to_add_out", H, H);
        if (qk)
            for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
                s.add(b + "attn." + n + ".weight", {d});
        if (is_dual) {
            for (const char* p : {"to_q", "to_k", "to_v", "to_out.0"}) linear(s, b + "attn2." + p, H, H);
            if (qk)
                for (const char* n : {"norm_q", "norm_k"}) s.add(b + "attn2." + n + ".weight", {d});
        }
        linear(s, b + "ff.net.0.proj", mlp, H);
        linear(s, b + "ff.net.2", H, mlp);
        if (!last) {
            linear(s, b + "ff_context.net.0.proj", mlp, H);
            linear(s, b + "ff_context.net.2", H, mlp);
        }
    }
    linear(s, "norm_out.linear", 2 * H, H);
    linear(s, "proj_out", 64, H);
    return s;
}

const std::vector<int64_t> kDual = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// ZImageTransformer2DModel's tensors (transformer_z_image.py): width D, `heads` query and `kv` key-value heads of
// D / heads, L layers and R noise / R context refiners (the context refiners unmodulated), SwiGLU of int(D / 3 * 8),
// the (2, 1) patch embedder of `in` latent channels.
ShapeSet z_image(int64_t D, int64_t heads, int64_t kv, int64_t L, int64_t R, int64_t cap, bool qk = true,
                 int64_t in = 16) {
    ShapeSet s;
    const int64_t hd = D / heads, ffn = (int64_t)(D / 3.0 * 8), ada = std::min<int64_t>(D, 256);
    linear(s, "all_x_embedder.2-1", D, 4 * in);
    linear(s, "all_final_layer.2-1.linear", 4 * in, D);
    linear(s, "all_final_layer.2-1.adaLN_modulation.1", D, ada);
    s.add("cap_embedder.0.weight", {cap});
    linear(s, "cap_embedder.1", D, cap);
    linear(s, "t_embedder.mlp.0", 1024, 256);
    linear(s, "t_embedder.mlp.2", ada, 1024);
    s.add("x_pad_token", {1, D});
    s.add("cap_pad_token", {1, D});
    for (const auto& [name, n, modulated] : std::vector<std::tuple<std::string, int64_t, bool>>{
             {"layers", L, true}, {"noise_refiner", R, true}, {"context_refiner", R, false}})
        for (int64_t i = 0; i < n; ++i) {
            const std::string b = name + "." + std::to_string(i) + ".";
            linear(s, b + "attention.to_q", heads * hd, D, false);
            linear(s, b + "attention.to_k", kv * hd, D, false);
            linear(s, b + "attention.to_v", kv * hd, D, false);
            linear(s, b + "attention.to_out.0", D, heads * hd, false);
            if (qk)
                for (const char* q : {"norm_q", "norm_k"}) s.add(b + "attention." + q + ".weight", {hd});
            for (const char* nrm : {"attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2"})
                s.add(b + nrm + ".weight", {D});
            linear(s, b + "feed_forward.w1", ffn, D, false);
            linear(s, b + "feed_forward.w3", ffn, D, false);
            linear(s, b + "feed_forward.w2", D, ffn, false);
            if (modulated) linear(s, b + "adaLN_modulation.0", 4 * D, ada);
        }
    return s;
}

// Flux2Transformer2DModel's tensors (transformer_flux2.py): H = heads * d, L double and S single blocks, MLP 3H
// (SwiGLU), shared modulations, no biases.
ShapeSet flux2(int64_t heads, int64_t d, int64_t L, int64_t S, bool guidance, int64_t joint, int64_t in = 128) {
    ShapeSet s;
    const int64_t H = heads * d, mlp = 3 * H;
    linear(s, "x_embedder", H, in, false);
    linear(s, "context_embedder", H, joint, false);
    for (const char* e : {"timestep_embedder", "guidance_embedder"}) {
        if (std::string(e) == "guidance_embedder" && !guidance) continue;
        linear(s, std::string("time_guidance_embed.") + e + ".linear_1", H, 256, false);
        linear(s, std::string("time_guidance_embed.") + e + ".linear_2", H, H, false);
    }
    linear(s, "double_stream_modulation_img.linear", 6 * H, H, false);
    linear(s, "double_stream_modulation_txt.linear", 6 * H, H, false);
    linear(s, "single_stream_modulation.linear", 3 * H, H, false);
    for (int64_t i = 0; i < L; ++i) {
        const std::string b = "transformer_blocks." + std::to_string(i) + ".";
        for (const char* p :
             {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out"})
            linear(s, b + "attn." + p, H, H, false);
        for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
            s.add(b + "attn." + n + ".weight", {d});
        for (const char* f : {"ff", "ff_context"}) {
            linear(s, b + f + ".linear_in", 2 * mlp, H, false);
            linear(s, b + f + ".linear_out", H, mlp, false);
        }
    }
    for (int64_t i = 0; i < S; ++i) {
        const std::string b = "single_transformer_blocks." + std::to_string(i) + ".";
        linear(s, b + "attn.to_qkv_mlp_proj", 3 * H + 2 * mlp, H, false);
        linear(s, b + "attn.to_out", H, H + mlp, false);
        for (const char* n : {"norm_q", "norm_k"}) s.add(b + "attn." + n + ".weight", {d});
    }
    linear(s, "norm_out.linear", 2 * H, H, false);
    linear(s, "proj_out", in, H, false);
    return s;
}

ShapeSet z_image_turbo() { return z_image(3840, 30, 30, 30, 2, 2560); }
ShapeSet klein_4b() { return flux2(24, 128, 5, 20, false, 7680); }
ShapeSet klein_9b() { return flux2(32, 128, 8, 24, false, 12288); }

ShapeSet flux_dev() { return flux(24, 128, 19, 38, true); }
ShapeSet flux_schnell() { return flux(24, 128, 19, 38, false); }
ShapeSet sd3_medium() { return sd3(24, 24, 192, false, {}); }
ShapeSet sd35_medium() { return sd3(24, 24, 384, true, kDual); }
ShapeSet sd35_large() { return sd3(38, 38, 192, true, {}); }

std::string id_of(const std::string& family, const TensorSet& ts) {
    const Published* p = recognize(family, ts);
    return p ? p->id : "none";
}

// The tensors of a safetensors file (its header only): what a diffusers folder's transformer holds.
ShapeSet safetensors_shapes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE(f.good());
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), (std::streamsize)n);
    ShapeSet s;
    const nlohmann::json j = nlohmann::json::parse(header);
    for (const auto& [name, v] : j.items())
        if (name != "__metadata__") s.add(name, v.at("shape").get<Shape>());
    REQUIRE(!s.tensors().empty());
    return s;
}

void write(const fs::path& p, const std::string& text = "x") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

const Published& published(const std::string& id) {
    for (const Published& p : published_models())
        if (p.id == id) return p;
    FAIL("no published model " << id);
    return published_models().front();
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("published: every config parses and names the class model_index.json gives it", "[layouts][published]") {
    const std::map<std::string, std::string> repos = {{"flux-dev", "black-forest-labs/FLUX.1-dev"},
                                                      {"flux-schnell", "black-forest-labs/FLUX.1-schnell"},
                                                      {"sd3-medium", "stabilityai/stable-diffusion-3-medium-diffusers"},
                                                      {"sd3.5-medium", "stabilityai/stable-diffusion-3.5-medium"},
                                                      {"sd3.5-large", "stabilityai/stable-diffusion-3.5-large"}};
    REQUIRE(published_models().size() == repos.size() + 3);  // + the Qwen3-encoded models (next test case)
    for (const Published& p : published_models()) {
        if (p.family != "flux" && p.family != "sd3") continue;
        CAPTURE(p.id);
        CHECK(repos.at(p.id) == p.repo);
        const size_t encoders = p.family == "flux" ? 2 : 3;
        CHECK(p.configs.size() == 3 + encoders);  // transformer, vae, scheduler and the text encoders
        CHECK(p.tokenizers.size() == encoders);
        for (const auto& [component, config] : p.configs) {
            CAPTURE(component);
            REQUIRE(config.contains("_class_name"));
            const std::string cls = config["_class_name"].get<std::string>();
            CHECK(p.model_index.at(component).at(1).get<std::string>() == cls);
            if (component != "scheduler") CHECK(models::find_component_class(cls) != nullptr);
        }
        for (const std::string& tok : p.tokenizers)
            CHECK(models::find_component_class(p.model_index.at(tok).at(1).get<std::string>()) != nullptr);
        const nlohmann::json& t = p.configs.at("transformer");
        CHECK(t["_class_name"] == (p.family == "flux" ? "FluxTransformer2DModel" : "SD3Transformer2DModel"));
        CHECK(p.configs.at("vae")["latent_channels"] == 16);
    }
    // Spot checks of the published values the models differ by.
    CHECK(published("flux-dev").configs.at("transformer")["guidance_embeds"] == true);
    CHECK(published("flux-schnell").configs.at("transformer")["guidance_embeds"] == false);
    CHECK(published("flux-dev").configs.at("scheduler")["use_dynamic_shifting"] == true);
    CHECK(published("flux-schnell").configs.at("scheduler")["shift"] == 1.0);
    CHECK(published("flux-dev").configs.at("vae")["scaling_factor"] == 0.3611);
    CHECK(published("sd3-medium").configs.at("vae")["shift_factor"] == 0.0609);
    CHECK(published("sd3-medium").configs.at("text_encoder")["_class_name"] == "CLIPTextModelWithProjection");
    CHECK(published("sd3-medium").configs.at("text_encoder_2")["hidden_size"] == 1280);
    CHECK(published("flux-dev").configs.at("text_encoder")["_class_name"] == "CLIPTextModel");
    CHECK(published("flux-dev").configs.at("text_encoder_2")["_class_name"] == "T5EncoderModel");
    CHECK(published("sd3.5-medium").configs.at("transformer")["dual_attention_layers"].size() == 13);
    CHECK(published("sd3.5-large").configs.at("transformer")["caption_projection_dim"] == 2432);
}

TEST_CASE("published: Z-Image-Turbo and FLUX.2 [klein] 4B / 9B with their Qwen3 encoders", "[layouts][published]") {
    const std::map<std::string, std::string> repos = {{"z-image-turbo", "Tongyi-MAI/Z-Image-Turbo"},
                                                      {"flux2-klein-4b", "black-forest-labs/FLUX.2-klein-4B"},
                                                      {"flux2-klein-9b", "black-forest-labs/FLUX.2-klein-9B"}};
    for (const auto& [id, repo] : repos) {
        const Published& p = published(id);
        CAPTURE(id);
        CHECK(p.repo == repo);
        CHECK(p.configs.size() == 4);  // transformer, vae, text_encoder, scheduler
        CHECK(p.tokenizers == std::vector<std::string>{"tokenizer"});
        for (const auto& [component, config] : p.configs) {
            CAPTURE(component);
            REQUIRE(config.contains("_class_name"));
            const std::string cls = config["_class_name"].get<std::string>();
            CHECK(p.model_index.at(component).at(1).get<std::string>() == cls);
            if (component != "scheduler") CHECK(models::find_component_class(cls) != nullptr);
        }
        const auto* tok = models::find_component_class(p.model_index.at("tokenizer").at(1).get<std::string>());
        REQUIRE(tok);
        CHECK(tok->kind == models::ComponentKind::qwen2_tokenizer);
        // The pipeline the registry runs, and the encoder width the transformer takes (klein: 3 stacked layers).
        CHECK(models::find_pipeline_family(p.model_index.at("_class_name").get<std::string>()) ==
              models::file_family(p.family));
        const int64_t width = p.configs.at("text_encoder")["hidden_size"];
        const nlohmann::json& t = p.configs.at("transformer");
        CHECK((p.family == "z_image" ? t["cap_feat_dim"].get<int64_t>()
                                     : t["joint_attention_dim"].get<int64_t>() / 3) == width);
    }
    CHECK(published("z-image-turbo").configs.at("vae")["latent_channels"] == 16);
    CHECK(published("z-image-turbo").configs.at("vae")["scaling_factor"] == 0.3611);
    CHECK(published("z-image-turbo").configs.at("scheduler")["shift"] == 3.0);
    CHECK(published("z-image-turbo").configs.at("scheduler")["use_dynamic_shifting"] == false);
    CHECK(published("z-image-turbo").configs.at("text_encoder")["_class_name"] == "Qwen3Model");
    CHECK(published("flux2-klein-4b").configs.at("vae")["latent_channels"] == 32);
    CHECK(published("flux2-klein-4b").configs.at("text_encoder")["_class_name"] == "Qwen3ForCausalLM");
    CHECK(published("flux2-klein-4b").configs.at("text_encoder")["hidden_size"] == 2560);
    CHECK(published("flux2-klein-9b").configs.at("text_encoder")["hidden_size"] == 4096);
    CHECK(published("flux2-klein-4b").model_index["is_distilled"] == true);
    CHECK(published("flux2-klein-4b").configs.at("scheduler")["use_dynamic_shifting"] == true);
}

TEST_CASE("published: recognize() names Z-Image-Turbo and klein 4B / 9B, and nothing near them",
          "[layouts][published]") {
    CHECK(id_of("z_image", z_image_turbo()) == "z-image-turbo");
    CHECK(id_of("flux2", klein_4b()) == "flux2-klein-4b");
    CHECK(id_of("flux2", klein_9b()) == "flux2-klein-9b");
    CHECK(id_of("flux", klein_4b()) == "none");
    CHECK(id_of("flux2", z_image_turbo()) == "none");
    CHECK(id_of("z_image", z_image(3840, 30, 30, 29, 2, 2560)) == "none");         // a layer short
    CHECK(id_of("z_image", z_image(3840, 30, 30, 30, 1, 2560)) == "none");         // one refiner each
    CHECK(id_of("z_image", z_image(3840, 30, 30, 30, 2, 4096)) == "none");         // another caption width
    CHECK(id_of("z_image", z_image(3840, 30, 30, 30, 2, 2560, false)) == "none");  // no qk norm
    CHECK(id_of("z_image", z_image(3840, 30, 10, 30, 2, 2560)) == "none");         // grouped key-value heads
    CHECK(id_of("z_image", z_image(2560, 20, 20, 30, 2, 2560)) == "none");         // narrower
    CHECK(id_of("flux2", flux2(48, 128, 8, 48, true, 15360)) == "none");           // FLUX.2 [dev]
    CHECK(id_of("flux2", flux2(24, 128, 5, 20, true, 7680)) == "none");            // 4B + a guidance embedder
    CHECK(id_of("flux2", flux2(24, 128, 5, 19, false, 7680)) == "none");           // a single block short
    CHECK(id_of("flux2", flux2(24, 128, 5, 20, false, 12288)) == "none");          // 4B beside Qwen3-8B
    CHECK(id_of("flux2", flux2(32, 128, 8, 24, false, 7680)) == "none");           // 9B beside Qwen3-4B
    ShapeSet s = z_image_turbo();
    s.erase("context_refiner.0.attention.norm_q.weight");  // a refiner without qk norm
    CHECK(id_of("z_image", s) == "none");
    s = z_image_turbo();
    s.add("context_refiner.0.adaLN_modulation.0.weight", {15360, 256});  // a modulated context refiner
    CHECK(id_of("z_image", s) == "none");
    s = klein_4b();
    s.erase("single_stream_modulation.linear.weight");
    CHECK(id_of("flux2", s) == "none");
    // The tiny fixtures are no published size.
    CHECK(id_of("z_image", safetensors_shapes(test::data_path(
                               "fixtures/z_image_pipeline/transformer/diffusion_pytorch_model.safetensors"))) ==
          "none");
    CHECK(id_of("flux2", safetensors_shapes(test::data_path(
                             "fixtures/flux2_klein_pipeline/transformer/diffusion_pytorch_model.safetensors"))) ==
          "none");
}

TEST_CASE("published: recognize() names each published transformer by its shapes", "[layouts][published]") {
    CHECK(id_of("flux", flux_dev()) == "flux-dev");
    CHECK(id_of("flux", flux_schnell()) == "flux-schnell");
    CHECK(id_of("sd3", sd3_medium()) == "sd3-medium");
    CHECK(id_of("sd3", sd35_medium()) == "sd3.5-medium");
    CHECK(id_of("sd3", sd35_large()) == "sd3.5-large");
    // The family must agree.
    CHECK(id_of("sd3", flux_dev()) == "none");
    CHECK(id_of("flux", sd35_large()) == "none");
    CHECK(id_of("pixart", sd3_medium()) == "none");
}

TEST_CASE("published: recognize() gives nullptr for the tiny fixtures", "[layouts][published]") {
    for (const char* rel : {"fixtures/flux_pipeline/transformer/diffusion_pytorch_model.safetensors",
                            "fixtures/flux/diffusion_pytorch_model.safetensors"}) {
        CAPTURE(rel);
        const ShapeSet s = safetensors_shapes(test::data_path(rel));
        REQUIRE(s.find("x_embedder.weight"));  // a Flux transformer, diffusers' names
        CHECK(id_of("flux", s) == "none");
    }
    for (const char* rel : {"fixtures/sd3_pipeline/transformer/diffusion_pytorch_model.safetensors",
                            "fixtures/sd3_qknorm_dual/diffusion_pytorch_model.safetensors"}) {
        CAPTURE(rel);
        const ShapeSet s = safetensors_shapes(test::data_path(rel));
        REQUIRE(s.find("pos_embed.pos_embed"));
        CHECK(id_of("sd3", s) == "none");
    }
    // The tiny fixtures' sizes through the synthetic builders too (flux_pipeline: 2 heads of 16, 1 + 2 blocks).
    CHECK(id_of("flux", flux(2, 16, 1, 2, true, 64, 48, 32)) == "none");
    CHECK(id_of("sd3", sd3(2, 2, 24, false, {})) == "none");
}

TEST_CASE("published: near misses are not recognised", "[layouts][published]") {
    SECTION("Flux") {
        CHECK(id_of("flux", flux(24, 128, 18, 38, true)) == "none");                   // a joint block short
        CHECK(id_of("flux", flux(24, 128, 19, 37, false)) == "none");                  // a single block short
        CHECK(id_of("flux", flux(24, 128, 19, 39, true)) == "none");                   // one single block more
        CHECK(id_of("flux", flux(16, 128, 19, 38, true)) == "none");                   // 2048 wide
        CHECK(id_of("flux", flux(24, 128, 19, 38, true, 64, 2048)) == "none");         // another text encoder width
        CHECK(id_of("flux", flux(24, 128, 19, 38, false, 64, 4096, 1024)) == "none");  // another pooled width
        CHECK(id_of("flux", flux(24, 128, 19, 38, true, 128)) == "none");              // 128 latent channels
        CHECK(id_of("flux", flux(8, 128, 5, 20, false)) == "none");                    // a smaller Flux
        ShapeSet s = flux_dev();
        s.add("time_text_embed.guidance_embedder.linear_1.weight", {3072, 128});  // guidance of another shape
        CHECK(id_of("flux", s) == "none");
        s = flux_dev();
        s.erase("transformer_blocks.0.attn.norm_q.weight");  // no qk norm
        CHECK(id_of("flux", s) == "none");
        s = flux_schnell();
        s.add("time_text_embed.guidance_embedder.linear_1.weight", {3072, 256});  // schnell's shapes + dev's embedder
        CHECK(id_of("flux", s) == "flux-dev");
    }
    SECTION("SD3") {
        CHECK(id_of("sd3", sd3(24, 24, 384, false, {})) == "none");  // SD3 medium with SD3.5's table
        CHECK(id_of("sd3", sd3(24, 24, 192, true, {})) == "none");   // SD3 medium with qk norm
        CHECK(id_of("sd3", sd3(24, 24, 384, true, {})) == "none");   // SD3.5 medium without attn2
        CHECK(id_of("sd3", sd3(24, 24, 384, true, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})) == "none");
        CHECK(id_of("sd3", sd3(24, 24, 384, true, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})) == "none");
        CHECK(id_of("sd3", sd3(24, 23, 192, false, {})) == "none");  // a block short
        CHECK(id_of("sd3", sd3(38, 37, 192, true, {})) == "none");
        CHECK(id_of("sd3", sd3(38, 38, 192, false, {})) == "none");  // large without qk norm
        CHECK(id_of("sd3", sd3(38, 38, 192, true, kDual)) == "none");
        CHECK(id_of("sd3", sd3(18, 18, 192, false, {})) == "none");  // 1152 wide (diffusers' default size)
        CHECK(id_of("sd3", sd3(2, 2, 24, true, {0})) == "none");
        ShapeSet s = sd35_medium();
        s.erase_prefix("transformer_blocks.23.attn.norm_");  // qk norm missing in the last block
        CHECK(id_of("sd3", s) == "none");
        s = sd3_medium();
        s.add("transformer_blocks.24.attn.to_q.weight", {1536, 1536});  // a 25th block
        CHECK(id_of("sd3", s) == "none");
        s = sd35_large();
        s.erase("proj_out.weight");
        CHECK(id_of("sd3", s) == "none");
    }
}

TEST_CASE("published: find_tokenizers() from a pipeline folder or a one-tokenizer folder", "[layouts][published]") {
    const std::string dir = test::data_path("fixtures/flux_pipeline");
    const auto found = find_tokenizers(published("flux-dev"), dir, "/nonexistent");
    REQUIRE(found.size() == 2);
    CHECK(fs::equivalent(found.at("tokenizer"), fs::path(dir) / "tokenizer"));
    CHECK(fs::equivalent(found.at("tokenizer_2"), fs::path(dir) / "tokenizer_2"));

    // A folder that is the one tokenizer a model needs.
    Published one = published("flux-dev");
    one.tokenizers = {"tokenizer"};
    const std::string clip = test::data_path("fixtures/flux_pipeline/tokenizer");
    CHECK(find_tokenizers(one, clip, "").at("tokenizer") == clip);
    // ... but not when two are needed.
    const std::string e = error_of([&] { find_tokenizers(published("flux-dev"), clip, ""); });
    CHECK(e.find("tokenizers were not found in " + clip) != std::string::npos);
}

namespace {
// huggingface_hub links snapshot files into blobs/; where the system refuses links (Windows without developer mode,
// wine) it copies them, and that layout must work too. A target that does not exist is then no file at all.
void link_blob(const std::string& target, const fs::path& link) {
    std::error_code ec;
    fs::create_symlink(target, link, ec);
    if (!ec) return;
    std::error_code missing;
    fs::copy_file(link.parent_path() / target, link, missing);
}
}  // namespace

TEST_CASE("published: find_tokenizers() from the Hugging Face cache", "[layouts][published]") {
    test::TempDir tmp("kiln_hf");
    const fs::path repo = tmp.path / "hub" / "models--black-forest-labs--FLUX.1-dev";
    // huggingface_hub's layout: snapshot files are links into blobs/. An old snapshot with the CLIP files only, and
    // refs/main naming the complete one.
    write(repo / "blobs" / "v");
    write(repo / "blobs" / "m");
    write(repo / "blobs" / "s");
    for (const char* rev : {"0000old", "1111new"}) {
        fs::create_directories(repo / "snapshots" / rev / "tokenizer");
        link_blob("../../../blobs/v", repo / "snapshots" / rev / "tokenizer" / "vocab.json");
        link_blob("../../../blobs/m", repo / "snapshots" / rev / "tokenizer" / "merges.txt");
    }
    fs::create_directories(repo / "snapshots" / "1111new" / "tokenizer_2");
    link_blob("../../../blobs/s", repo / "snapshots" / "1111new" / "tokenizer_2" / "spiece.model");
    // A broken link (an interrupted download) does not count.
    fs::create_directories(repo / "snapshots" / "0000old" / "tokenizer_2");
    link_blob("../../../blobs/gone", repo / "snapshots" / "0000old" / "tokenizer_2" / "spiece.model");
    write(repo / "refs" / "main", "1111new");

    auto found = find_tokenizers(published("flux-dev"), "", tmp.path.string());
    CHECK(found.at("tokenizer") == (repo / "snapshots" / "1111new" / "tokenizer").string());
    CHECK(found.at("tokenizer_2") == (repo / "snapshots" / "1111new" / "tokenizer_2").string());

    // Any snapshot holding a tokenizer's files serves it: refs/main pointing at the old one.
    write(repo / "refs" / "main", "0000old");
    found = find_tokenizers(published("flux-dev"), "", tmp.path.string());
    CHECK(found.at("tokenizer") == (repo / "snapshots" / "0000old" / "tokenizer").string());
    CHECK(found.at("tokenizer_2") == (repo / "snapshots" / "1111new" / "tokenizer_2").string());

    // hf_home empty: the settings table's HF_HOME.
    {
        test::ScopedEnv env("HF_HOME", tmp.path.string());
        CHECK(find_tokenizers(published("flux-dev"), "", "").at("tokenizer_2") ==
              (repo / "snapshots" / "1111new" / "tokenizer_2").string());
    }
    // Another repository's cache folder is not FLUX.1-schnell's.
    const std::string e = error_of([&] { find_tokenizers(published("flux-schnell"), "", tmp.path.string()); });
    CHECK(e.find("FLUX.1-schnell's tokenizers were not found") == 0);
}

TEST_CASE("published: find_tokenizers() fails with one line naming the files and the repository",
          "[layouts][published]") {
    test::TempDir tmp("kiln_hf");
    SECTION("nothing cached") {
        const std::string e = error_of([&] { find_tokenizers(published("flux-dev"), "", tmp.path.string()); });
        CHECK(e.find('\n') == std::string::npos);
        CHECK(e ==
              "FLUX.1-dev's tokenizers were not found in " +
                  (tmp.path / "hub" / "models--black-forest-labs--FLUX.1-dev").string() +
                  "/snapshots: fetch tokenizer/{vocab.json,merges.txt,special_tokens_map.json,tokenizer_config.json} "
                  "and tokenizer_2/{spiece.model,special_tokens_map.json,tokenizer_config.json} from "
                  "https://huggingface.co/black-forest-labs/FLUX.1-dev (e.g. `huggingface-cli download "
                  "black-forest-labs/FLUX.1-dev --include 'tokenizer/*' 'tokenizer_2/*'`) or pass --tokenizers DIR");
    }
    SECTION("one of three missing: only it is named") {
        const fs::path snap = tmp.path / "hub" / "models--stabilityai--stable-diffusion-3.5-large" / "snapshots" / "r";
        for (const char* t : {"tokenizer", "tokenizer_2"}) {
            write(snap / t / "vocab.json");
            write(snap / t / "merges.txt");
        }
        const std::string e = error_of([&] { find_tokenizers(published("sd3.5-large"), "", tmp.path.string()); });
        CHECK(e.find('\n') == std::string::npos);
        CHECK(e.find("stable-diffusion-3.5-large's tokenizers were not found") == 0);
        CHECK(e.find(": fetch tokenizer_3/{spiece.model,") != std::string::npos);
        CHECK(e.find("tokenizer/{") == std::string::npos);
        CHECK(e.find("https://huggingface.co/stabilityai/stable-diffusion-3.5-large ") != std::string::npos);
    }
    SECTION("a --tokenizers folder without them") {
        write(tmp.path / "tokenizer_2" / "spiece.model");
        const std::string dir = tmp.path.string();
        const std::string e = error_of([&] { find_tokenizers(published("flux-schnell"), dir, ""); });
        CHECK(e.find('\n') == std::string::npos);
        CHECK(e == "FLUX.1-schnell's tokenizers were not found in " + dir +
                       ": put tokenizer/{vocab.json,merges.txt,special_tokens_map.json,tokenizer_config.json} there, "
                       "from https://huggingface.co/black-forest-labs/FLUX.1-schnell (e.g. `huggingface-cli download "
                       "black-forest-labs/FLUX.1-schnell --include 'tokenizer/*' --local-dir " +
                       dir + "`)");
    }
}
