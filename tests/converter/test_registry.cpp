// The family registry (models/registry/registry.h): every class resolves to its kind and back, every family's
// transformer and encoders are registered classes, and the converter's arch_spec covers every class with weights.
#include <catch2/catch.hpp>
#include <set>

#include "converter/arch.h"
#include "models/registry/registry.h"

using namespace kiln;
using namespace kiln::models;

TEST_CASE("registry: every class resolves to its kind and back", "[registry]") {
    std::set<std::string> names;
    for (const auto& c : component_classes()) {
        CHECK(names.insert(c.name).second);  // one entry per class
        const ComponentClass* found = find_component_class(c.name);
        REQUIRE(found == &c);
        CHECK(role_of(c.kind) == c.role);
        // class_name gives the first class of the kind, which resolves back to the same kind.
        const ComponentClass* canon = find_component_class(class_name(c.kind));
        REQUIRE(canon != nullptr);
        CHECK(canon->kind == c.kind);
    }
    CHECK(find_component_class("UNet2DConditionModel") == nullptr);
    CHECK(find_component_class("") == nullptr);
    CHECK(std::string(class_name(ComponentKind::t5_tokenizer)) == "T5Tokenizer");  // the slow class, not ...Fast
    CHECK(class_list({Role::tokenizer}) ==
          "CLIPTokenizer, CLIPTokenizerFast, T5Tokenizer, T5TokenizerFast, GemmaTokenizer, GemmaTokenizerFast, "
          "Qwen2Tokenizer, Qwen2TokenizerFast");
}

TEST_CASE("registry: every family names registered classes and its options consistently", "[registry]") {
    std::set<std::string> pipelines;
    for (const auto& f : families()) {
        CAPTURE(f.name);
        CHECK(&family(f.id) == &f);
        CHECK(role_of(f.transformer) == Role::transformer);
        // Sana-Sprint shares Sana's transformer class: transformer_family gives the first (model_family then picks
        // by model_index.json or the guidance embedding).
        CHECK(transformer_family(f.transformer)->transformer == f.transformer);
        if (f.id != FamilyId::sana_sprint) CHECK(transformer_family(f.transformer) == &f);
        REQUIRE(!f.pipelines.empty());
        for (const auto& p : f.pipelines) {
            CHECK(pipelines.insert(p.name).second);
            const PipelineClass* pc = nullptr;
            CHECK(find_pipeline_family(p.name, &pc) == &f);
            CHECK(pc == &p);
            CHECK((p.max_sequence_length > 0) == f.text_to_image());
        }
        CHECK(f.steps >= 1);
        CHECK(f.guidance > 0);
        CHECK((f.conditioning == Conditioning::class_labels) == !f.text_to_image());
        std::set<std::string> comps;
        for (const auto& e : f.encoders) {
            CHECK(role_of(e.kind) == Role::text_encoder);
            CHECK(comps.insert(e.component).second);
            CHECK((e.prompt >= 1 && e.prompt <= 3));
        }
        if (f.text_to_image()) CHECK(std::string(f.encoders_summary) != "");
        if (f.flow_matching) CHECK(f.max_shift_default > 0);
        CHECK((!f.round_size_down || f.packed_2x2));
    }
    CHECK(find_pipeline_family("StableDiffusionPipeline") == nullptr);
    CHECK(transformer_family(ComponentKind::vae) == nullptr);
    // PixArt's pipeline follows the transformer's micro-conditions.
    const Family& pixart = family(FamilyId::pixart);
    CHECK(pipeline_for(pixart, true).micro_conditions);
    CHECK(!pipeline_for(pixart, false).micro_conditions);
    CHECK(family_with(&Family::true_cfg).id == FamilyId::flux);
    CHECK(family_with(&Family::skip_layer_guidance).id == FamilyId::sd3);
}

TEST_CASE("registry: the converter specifies every class with weights; others are refused by name",
          "[registry][converter]") {
    const auto& models = converter::supported_model_classes();
    for (const auto& c : component_classes()) {
        const bool listed = std::find(models.begin(), models.end(), c.name) != models.end();
        CHECK(listed == (c.role != Role::tokenizer));
    }
    // An unknown class (or a tokenizer, which has no weights): the error lists every supported class.
    for (const char* cls : {"UNet2DConditionModel", "CLIPTokenizer"}) {
        try {
            converter::arch_spec(cls, nlohmann::json::object(), "config.json");
            FAIL("no error for " << cls);
        } catch (const std::exception& e) {
            const std::string msg = e.what();
            CHECK(msg.find(std::string("unsupported _class_name '") + cls + "'") != std::string::npos);
            for (const auto& m : models) CHECK(msg.find(m) != std::string::npos);
        }
    }
    // Every text encoder and the VAE have a spec from an empty config (diffusers' defaults).
    for (ComponentKind k :
         {ComponentKind::vae, ComponentKind::vae_flux2, ComponentKind::clip_text, ComponentKind::clip_text_projection,
          ComponentKind::t5_encoder, ComponentKind::gemma2, ComponentKind::qwen3, ComponentKind::sd3,
          ComponentKind::flux, ComponentKind::flux2, ComponentKind::pixart})
        CHECK(!converter::arch_spec(class_name(k), nlohmann::json::object(), "config.json").expected.empty());
}
