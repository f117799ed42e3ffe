// Shader variants as keys (runtime/vulkan/shader_key.h): every kShaderTable name parses to a key that names it
// back; the keys lowering and selection form name shaders that exist; the texel forms pair existing shaders.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "runtime/ir/graph.h"
#include "runtime/vulkan/lower.h"
#include "runtime/vulkan/pipeline.h"
#include "runtime/vulkan/shader_key.h"
#include "runtime/vulkan/shader_table.h"

using namespace kiln;

namespace {
std::set<std::string> table_names() {
    std::set<std::string> s;
    for (size_t i = 0; i < vk::kShaderCount; ++i) s.insert(vk::kShaderTable[i].name);
    return s;
}
}  // namespace

TEST_CASE("shader key: every table name round-trips through its key", "[jit][shader_key]") {
    REQUIRE(vk::kShaderCount > 0);
    for (size_t i = 0; i < vk::kShaderCount; ++i) {
        const std::string name = vk::kShaderTable[i].name;
        CAPTURE(name);
        const auto k = vk::parse_shader_name(name);
        REQUIRE(k);
        CHECK(k->name() == name);
        CHECK(!k->op.empty());
    }
}

TEST_CASE("shader key: fields of known names", "[jit][shader_key]") {
    using vk::Selection;
    auto key = [](const std::string& n) { return *vk::parse_shader_name(n); };
    CHECK(key("add") == vk::ShaderKey("add"));
    CHECK(key("rms_norm_rope") == vk::ShaderKey("rms_norm_rope"));
    CHECK(key("linear_f16") == vk::ShaderKey("linear", "", "f16"));
    CHECK(key("linear_vec4_bf16") == vk::ShaderKey("linear", "vec4", "bf16"));
    CHECK(key("attention_vec4_tex") == vk::ShaderKey("attention", "vec4_tex"));
    CHECK(key("loop_finalize_i64") == vk::ShaderKey("loop_finalize", "", "i64"));
    vk::ShaderKey t("linear", "tex", "q4_k");
    t.selection = Selection::off;
    CHECK(key("linear_tex_q4_k_off") == t);
    CHECK(t.name() == "linear_tex_q4_k_off");
    t.selection = Selection::ptr;
    CHECK(t.name() == "linear_tex_q4_k_ptr");
    t.gated = true;
    CHECK(t.name() == "linear_tex_q4_k_gated_ptr");
    CHECK(key("linear_tex_q4_k_gated_ptr") == t);
    CHECK(key("linear_smem_f16_gated") == [] {
        vk::ShaderKey s("linear", "smem", "f16");
        s.gated = true;
        return s;
    }());
    CHECK(vk::ShaderKey::weights("conv2d", "", DType::bf16).name() == "conv2d_bf16");
    CHECK_THROWS(vk::ShaderKey::weights("linear", "", DType::i32));
    CHECK(!vk::parse_shader_name(""));
}

TEST_CASE("shader key: texel forms pair shaders of the table, both ways", "[jit][shader_key]") {
    const std::set<std::string> names = table_names();
    int pairs = 0;
    for (const std::string& n : names) {
        const vk::ShaderKey k = *vk::parse_shader_name(n);
        CAPTURE(n);
        if (auto form = vk::texel_form_of(k)) {  // a texel shader: its storage-buffer fallback exists
            vk::ShaderKey s = k;
            s.kernel = form->storage_kernel;
            CHECK(names.count(s.name()));
            CHECK(!vk::texel_form_of(s));
            CHECK(vk::texel_variant(s) == k);
            ++pairs;
        } else if (auto t = vk::texel_variant(k)) {  // a storage shader with a texel form: it exists too
            CHECK(names.count(t->name()));
        }
    }
    CHECK(pairs > 0);
}

TEST_CASE("shader key: lowering names table shaders for every weight dtype", "[jit][shader_key]") {
    const std::set<std::string> names = table_names();
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_k}) {
        for (int64_t K : {64, 66}) {
            if (dtype_is_quant(dt) && K % dtype_block(dt)) continue;
            const int64_t k = dtype_is_quant(dt) ? dtype_block(dt) : K;
            ir::Graph g;
            g.output(g.linear(g.input("x", {3, k}), g.weight("w", {5, k}, dt), g.weight("b", {5})), "y");
            const vk::Dispatch d = vk::lower(g, g.nodes().back());
            CAPTURE(dtype_name(dt), k, d.shader.name());
            CHECK(names.count(d.shader.name()));
            vk::ShaderKey sel = d.shader;
            for (bool gated : {false, true}) {  // the gated residual's shaders (ir::fuse), every selection
                sel.gated = gated;
                for (auto s : {vk::Selection::none, vk::Selection::off, vk::Selection::ptr}) {
                    sel.selection = s;
                    CHECK(names.count(sel.name()));
                }
            }
        }
    }
}

// Uniform texel buffers are declared as textureBuffer (an OpTypeImage of Dim Buffer, Sampled 1, read with
// texelFetch), never samplerBuffer: an OpTypeSampledImage of a Dim Buffer image is invalid from SPIR-V 1.6 on,
// and Mesa's SPIR-V front end (lavapipe 25.0) warns about it in earlier versions, which a validation run counts.
TEST_CASE("shader reflection: texel buffers are images, no shader declares a sampled buffer image",
          "[jit][shader_key]") {
    constexpr uint32_t OpTypeImage = 25, OpTypeSampledImage = 27, DimBuffer = 5;
    int texel_shaders = 0;
    for (size_t i = 0; i < vk::kShaderCount; ++i) {
        const vk::ShaderBlob& b = vk::kShaderTable[i];
        INFO(b.name);
        std::set<uint32_t> buffer_images;
        for (size_t w = 5; w < b.words;) {
            const uint32_t op = b.code[w] & 0xffffu, len = b.code[w] >> 16;
            REQUIRE(len > 0);
            if (op == OpTypeImage && b.code[w + 3] == DimBuffer) buffer_images.insert(b.code[w + 1]);
            if (op == OpTypeSampledImage) CHECK(!buffer_images.count(b.code[w + 2]));
            w += len;
        }
        const vk::Reflection r = vk::reflect_spirv(b.code, b.words);  // throws on a sampled buffer image
        CHECK((r.texel_bindings != 0) == !buffer_images.empty());
        texel_shaders += r.texel_bindings != 0;
    }
    CHECK(texel_shaders > 0);  // the *_tex shaders were reflected as texel readers
}
