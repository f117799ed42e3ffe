// The fixtures' single files seen under diffusers' names give the diffusers folders' tensors bitwise, and
// inspect() reports what each file holds.
#include "tests/layouts/layouts_test_util.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// io.json's key_map: each diffusers tensor made by a swap has no view; every other one is read in place.
void check_key_map_views(const layouts::TensorSet& set, const nlohmann::json& key_map) {
    size_t checked = 0;
    for (const auto& e : key_map) {
        const std::string op = e["op"];
        for (const auto& n : e["diffusers"]) {
            INFO(set.source() << ": " << n.get<std::string>() << " (" << op << ")");
            REQUIRE(set.find(n));
            CHECK(bool(set.view(n).file) == (op != "swap_halves_dim0"));
            ++checked;
        }
    }
    CHECK(checked == set.tensors().size());
}

}  // namespace

TEST_CASE("layouts: Flux BFL and ComfyUI transformers equal the diffusers folder", "[layouts][flux]") {
    auto j = io_json("flux");
    for (std::string f : {"flux1-tiny.safetensors", "flux1-tiny-comfy.safetensors"}) {
        auto set = layouts::open_component(single("flux", f), "transformer");
        check_same(*set, folder("flux", "transformer"));
        check_key_map_views(*set, j["files"]["flux1-tiny.safetensors"]["key_map"]);
    }
}

TEST_CASE("layouts: LDM VAE, CLIP-L and T5 of Flux equal the diffusers folder", "[layouts][flux]") {
    auto j = io_json("flux");
    auto vae = layouts::open_component(single("flux", "ae.safetensors"), "vae");
    check_same(*vae, folder("flux", "vae"));
    check_key_map_views(*vae, j["files"]["ae.safetensors"]["key_map"]);
    // Flux's CLIP-L is CLIPTextModel: no projection, none added for a separate file.
    check_same(*layouts::open_component(single("flux", "clip_l.safetensors"), "clip_l"),
               folder("flux", "text_encoder"));
    // shared.weight only in this file.
    check_same(*layouts::open_component(single("flux", "t5xxl.safetensors"), "t5xxl"),
               folder("flux", "text_encoder_2"));
}

TEST_CASE("layouts: SD3 single file and separate encoders equal the diffusers folder", "[layouts][sd3]") {
    auto j = io_json("sd3");
    const std::string file = single("sd3", "sd3-tiny.safetensors");
    auto tr = layouts::open_component(file, "transformer");
    check_same(*tr, folder("sd3", "transformer"));
    auto vae = layouts::open_component(file, "vae");
    check_same(*vae, folder("sd3", "vae"));
    // The key_map covers both components: split it by component.
    nlohmann::json tr_map = nlohmann::json::array(), vae_map = nlohmann::json::array();
    for (const auto& e : j["files"]["sd3-tiny.safetensors"]["key_map"])
        (e["component"] == "vae" ? vae_map : tr_map).push_back(e);
    check_key_map_views(*tr, tr_map);
    check_key_map_views(*vae, vae_map);
    // The tiny CLIP-L carries a real text_projection (kept); T5 carries shared and its tied copy
    // encoder.embed_tokens (the copy dropped).
    check_same(*layouts::open_component(file, "clip_l"), folder("sd3", "text_encoder"));
    check_same(*layouts::open_component(file, "clip_g"), folder("sd3", "text_encoder_2"));
    check_same(*layouts::open_component(file, "t5xxl"), folder("sd3", "text_encoder_3"));
    check_same(*layouts::open_component(single("sd3", "clip_l.safetensors"), "clip_l"), folder("sd3", "text_encoder"));
    check_same(*layouts::open_component(single("sd3", "clip_g.safetensors"), "clip_g"),
               folder("sd3", "text_encoder_2"));
    check_same(*layouts::open_component(single("sd3", "t5xxl.safetensors"), "t5xxl"), folder("sd3", "text_encoder_3"));
}

TEST_CASE("layouts: identity text_projection for SD3's CLIP-L without one", "[layouts][sd3]") {
    // Flux's clip_l.safetensors has no projection: as SD3's text_encoder it gets eye(hidden), computed (no view).
    auto set =
        layouts::with_identity_projection(layouts::open_component(single("flux", "clip_l.safetensors"), "clip_l"));
    check_same(*set, folder("flux", "text_encoder"), {"text_projection.weight"});
    const auto* p = set->find("text_projection.weight");
    REQUIRE(p);
    CHECK(p->shape == Shape{32, 32});
    CHECK(!set->view("text_projection.weight").file);
    auto v = set->read("text_projection.weight").to_f32();
    for (int r = 0; r < 32; ++r)
        for (int c = 0; c < 32; ++c) CHECK(v[r * 32 + c] == (r == c ? 1.f : 0.f));
    // A set that has one keeps it.
    auto sd3 =
        layouts::with_identity_projection(layouts::open_component(single("sd3", "clip_l.safetensors"), "clip_l"));
    CHECK(sd3->find("text_projection.weight")->shape == Shape{24, 32});
}

TEST_CASE("layouts: inspect reports containers, components and types", "[layouts]") {
    struct Want {
        std::string file;
        std::vector<std::string> roles, layouts, families;
        size_t tensors;
    };
    const std::vector<Want> want = {
        {single("flux", "flux1-tiny.safetensors"), {"transformer"}, {"bfl"}, {"flux"}, 60},
        {single("flux", "flux1-tiny-comfy.safetensors"), {"transformer"}, {"comfyui"}, {"flux"}, 60},
        {single("flux", "ae.safetensors"), {"vae"}, {"ldm"}, {""}, 120},
        {single("flux", "clip_l.safetensors"), {"clip_l"}, {"transformers"}, {""}, 36},
        {single("flux", "t5xxl.safetensors"), {"t5xxl"}, {"transformers"}, {""}, 21},
        {single("sd3", "clip_g.safetensors"), {"clip_g"}, {"transformers"}, {""}, 53},
        {single("sd3", "sd3-tiny.safetensors"),
         {"clip_g", "clip_l", "t5xxl", "transformer", "vae"},
         {"transformers", "transformers", "transformers", "stability", "ldm"},
         {"", "", "", "sd3", ""},
         283},
    };
    for (const auto& w : want) {
        INFO(w.file);
        layouts::FileInfo fi = layouts::inspect(w.file);
        CHECK(fi.container == "safetensors");
        CHECK(fi.gguf_architecture.empty());
        CHECK(fi.dtype_counts == std::map<std::string, size_t>{{"f32", w.tensors}});
        REQUIRE(fi.components.size() == w.roles.size());
        for (size_t k = 0; k < w.roles.size(); ++k) {
            CHECK(fi.components[k].role == w.roles[k]);
            CHECK(fi.components[k].layout == w.layouts[k]);
            CHECK(fi.components[k].family == w.families[k]);
        }
    }
    // Component sizes under diffusers' names; prefixes as stripped.
    auto fi = layouts::inspect(single("sd3", "sd3-tiny.safetensors"));
    CHECK(fi.components[3].n_tensors == 67);
    CHECK(fi.components[3].prefix == "model.diffusion_model.");
    CHECK(fi.components[4].n_tensors == 120);
    CHECK(fi.components[4].prefix == "first_stage_model.");
    CHECK(fi.components[2].n_tensors == 21);  // T5: encoder.embed_tokens dropped for shared
    CHECK(fi.components[0].prefix == "text_encoders.clip_g.transformer.");
    CHECK(layouts::inspect(single("flux", "flux1-tiny.safetensors")).components[0].n_tensors == 80);

    auto q8 = layouts::inspect(single("flux", "flux1-tiny-Q8_0.gguf"));
    CHECK(q8.container == "gguf");
    CHECK(q8.gguf_architecture == "flux");
    CHECK(q8.dtype_counts == std::map<std::string, size_t>{{"f32", 38}, {"q8_0", 16}, {"f16", 6}});
    REQUIRE(q8.components.size() == 1);
    CHECK(q8.components[0].layout == "city96");
    CHECK(q8.components[0].family == "flux");
    CHECK(q8.components[0].n_tensors == 80);
    auto q4 = layouts::inspect(single("flux", "flux1-tiny-Q4_K_S.gguf"));
    CHECK(q4.dtype_counts == std::map<std::string, size_t>{{"f32", 38}, {"f16", 22}});
    CHECK(!layouts::is_kiln_file(single("flux", "flux1-tiny-Q8_0.gguf")));
    CHECK(!layouts::is_kiln_file(single("flux", "ae.safetensors")));
}
