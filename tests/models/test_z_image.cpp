// ZImageTransformer2DModel parity with diffusers (fixture `z_image_transformer`: 2 items whose captions differ in
// length, 10 and 37 tokens, so the caption and unified sequences carry key masks; two calls, 8x8 and 6x10 latents):
// CPU reference, and Vulkan in every JIT mode from a converted Kiln file (f32 and f16 weights); the host-made RoPE
// tables against diffusers' freqs_cis; 3 items of other sizes with other heads, CPU reference vs Vulkan.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "models/core/forward.h"
#include "models/transformers/z_image.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "runtime/ir/fuse.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const std::string kFixture = "z_image_transformer";
const char* kClass = "ZImageTransformer2DModel";

// The inputs of call `call` ("" or "nonsquare_"): x_i <- io's x_<call>i, cap_feats_i, t.
std::map<std::string, Tensor> call_inputs(const SafeTensors& io, const std::string& call) {
    std::map<std::string, Tensor> in;
    for (int i = 0; i < 2; ++i) {
        in["x_" + std::to_string(i)] = io.read("x_" + call + std::to_string(i));
        in["cap_feats_" + std::to_string(i)] = io.read("cap_feats_" + std::to_string(i));
    }
    in["t"] = io.read("t");
    return in;
}

SafeTensors fixture_io() { return SafeTensors::open(test::data_path("fixtures/" + kFixture + "/io.safetensors")); }
}  // namespace

TEST_CASE("Z-Image matches diffusers on the CPU reference", "[models][z_image]") {
    // f32 weights and activations, f64 accumulation: only diffusers' own f32 rounding differs (~1e-6).
    auto src = models::ModelSource::open(test::data_path("fixtures/" + kFixture));
    auto io = fixture_io();
    for (std::string call : {"", "nonsquare_"}) {
        auto out = models::forward_component(nullptr, src, "transformer", call_inputs(io, call));
        for (int i = 0; i < 2; ++i) {
            const std::string name = "sample_" + call + std::to_string(i);
            REQUIRE(out.count("sample_" + std::to_string(i)));
            const Tensor& o = out["sample_" + std::to_string(i)];
            CHECK(o.shape == io.read(name).shape);
            double err = rel_l2(o.to_f32(), io.read(name).to_f32());
            INFO(name << " CPU relative L2 " << err);
            CHECK(err <= 1e-4);
        }
    }
}

TEST_CASE("Z-Image RoPE tables and masks follow diffusers", "[models][z_image]") {
    // dbg_layer0_freqs_cis_real [B, S, head_dim/2, (cos, sin)]: diffusers' unified freqs_cis (zeros on batch padding,
    // where Kiln's rows are free: those keys are masked and those outputs dropped). Both take cos/sin of the same f32
    // angle; torch's f32 cos/sin may differ from the correctly rounded ones by an ulp (<= 6e-8 on [-1, 1]).
    auto io = fixture_io();
    auto src = models::ModelSource::open(test::data_path("fixtures/" + kFixture));
    auto c = models::ZImageConfig::from_json(src.config("transformer"));
    auto lay = models::ZImageLayout::of(c, {{8, 8, 10}, {8, 8, 37}});
    CHECK(lay.n_pad == std::vector<int>{32, 32});
    CHECK(lay.l_pad == std::vector<int>{32, 64});
    CHECK(lay.s_max == 96);
    auto in = models::prepare_z_image(c, lay);
    CHECK(!in.count("x_mask"));  // equal image lengths: no mask, as diffusers
    REQUIRE(in.count("cap_mask"));
    REQUIRE(in.count("mask"));
    const auto ref = io.read("dbg_layer0_freqs_cis_real").to_f32();
    const auto cos = in.at("rope_cos").to_f32(), sin = in.at("rope_sin").to_f32();
    const int half = c.head_dim() / 2;
    double worst = 0;
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < lay.s[(size_t)i]; ++j)
            for (int k = 0; k < half; ++k) {
                const size_t r = ((size_t)i * lay.s_max + j) * half + k;
                worst =
                    std::max({worst, std::abs((double)cos[r] - ref[2 * r]), std::abs((double)sin[r] - ref[2 * r + 1])});
            }
    CHECK(worst <= 1.2e-7);
    // The unified mask hides item 0's batch padding (slots 64..95) only.
    const auto m = in.at("mask").to_f32();
    CHECK(m[63] == 0.f);
    CHECK(m[64] < -1e38f);
    CHECK(m[96 + 95] == 0.f);
}

TEST_CASE("Z-Image matches diffusers on Vulkan in every JIT mode", "[models][z_image][vulkan]") {
    // f16: weights rounded to f16. io.json's weights_fp16_rounded max |diff| is <= 3.2e-3 of the output's RMS on every
    // sample (3.18e-3 on sample_1, RMS 1.00), and relative L2 = RMS(diff) / RMS(ref) <= max|diff| / RMS(ref):
    // diffusers' own f16-weight run is within 3.2e-3. Kiln rounds the same weights (norm weights stay f32) and computes
    // in f32
    // -> bound 5e-3 (1.5x margin for the different accumulation order and the weights it keeps in f32).
    auto io = fixture_io();
    for (DType dt : {DType::f32, DType::f16}) {
        auto src = models::ModelSource::open(test::convert_fixture(kFixture, dt));
        for (std::string call : {"", "nonsquare_"}) {
            auto in = call_inputs(io, call);
            std::map<std::string, Tensor> first;
            for (int run = 0; run < 4; ++run) {
                // Regional twice: block weights copied per replay, then selected on the device (device addresses).
                exec::Mode m = run == 0 ? exec::Mode::eager : run == 1 ? exec::Mode::full : exec::Mode::regional;
                ::setenv("KILN_BLOCK_WEIGHTS", run == 3 ? "device" : "copy", 1);
                auto out = models::forward_component(&test::context(), src, "transformer", in, m);
                ::unsetenv("KILN_BLOCK_WEIGHTS");
                for (int i = 0; i < 2; ++i) {
                    const std::string o = "sample_" + std::to_string(i), name = "sample_" + call + std::to_string(i);
                    double err = rel_l2(out[o].to_f32(), io.read(name).to_f32());
                    INFO(name << " " << dtype_name(dt) << " " << exec::mode_name(m)
                              << (run == 3 ? " (weights on device)" : "") << " relative L2 " << err);
                    CHECK(err <= (dt == DType::f32 ? 1e-4 : 5e-3));
                    if (run == 0)
                        first[o] = out[o];
                    else
                        CHECK(first[o].bytes == out[o].bytes);  // modes are bitwise identical
                }
            }
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Z-Image with 3 items of other sizes and other heads: Vulkan matches the CPU reference",
          "[models][z_image][vulkan]") {
    // 3 heads x 16 (rope axes 4+6+6), 2 refiner layers of each kind and 2 main layers (every kind replayed), 4 latent
    // channels, captions of 24 features. Items (latent H x W, caption tokens): image tokens 15, 36, 18 -> padded 32,
    // 64, 32; captions 5, 40, 33 -> 32, 64, 64: all three sequences carry key masks.
    nlohmann::json cfg = {{"dim", 48},
                          {"n_heads", 3},
                          {"n_kv_heads", 3},
                          {"n_layers", 2},
                          {"n_refiner_layers", 2},
                          {"in_channels", 4},
                          {"cap_feat_dim", 24},
                          {"qk_norm", true},
                          {"axes_dims", {4, 6, 6}},
                          {"axes_lens", {256, 64, 64}},
                          {"siglip_feat_dim", nullptr}};
    const int items[3][3] = {{6, 10, 5}, {12, 12, 40}, {4, 18, 33}};
    std::map<std::string, Tensor> raw;
    for (int i = 0; i < 3; ++i) {
        raw["x_" + std::to_string(i)] = test::random_tensor({4, 1, items[i][0], items[i][1]}, 10 + i);
        raw["cap_feats_" + std::to_string(i)] = test::random_tensor({items[i][2], 24}, 20 + i, -2.f, 2.f);
    }
    raw["t"] = Tensor::from_f32({3}, {0.1f, 0.55f, 0.9f});
    auto ws = models::synthetic_store(DType::f32, 7);
    ir::Graph g;
    models::Builder b(g, *ws);
    auto in = models::build_component(b, kClass, cfg, raw);
    CHECK(g.regions().size() == 6);
    for (const char* m : {"x_mask", "cap_mask", "mask"}) CHECK(in.count(m));
    // The batch is flattened to one sequence for the rotary embedding: each block's q and k still get their per-head
    // RMSNorm and rotation in one rms_norm_rope.
    ir::FuseStats fs;
    ir::fuse(g, &fs);
    CHECK(fs.rms_norm_rope == 2 * 6);
    auto ref = cpu::run(g, in, models::cpu_weights(*ws, b.constants()));
    std::map<std::string, Tensor> first;
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        for (int i = 0; i < 3; ++i) {
            const std::string o = "sample_" + std::to_string(i);
            REQUIRE(ref[o].shape == (Shape{4, 1, items[i][0], items[i][1]}));
            double err = rel_l2(out[o].to_f32(), ref[o].to_f32());
            INFO(o << " " << exec::mode_name(m) << " relative L2 " << err);
            CHECK(err <= 1e-5);  // same f32 weights and math; only summation order differs
            if (m == exec::Mode::eager)
                first[o] = out[o];
            else
                CHECK(first[o].bytes == out[o].bytes);
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("Z-Image refuses what it does not implement", "[models][z_image]") {
    auto ws = models::synthetic_store(DType::f32, 1);
    ir::Graph g;
    models::Builder b(g, *ws);
    std::map<std::string, Tensor> raw = {{"x_0", test::random_tensor({4, 1, 4, 4}, 1)},
                                         {"cap_feats_0", test::random_tensor({3, 8}, 2)},
                                         {"t", Tensor::from_f32({1}, {0.5f})}};
    nlohmann::json cfg = {
        {"dim", 32},     {"n_heads", 2},         {"in_channels", 4}, {"cap_feat_dim", 8}, {"axes_dims", {4, 6, 6}},
        {"n_layers", 1}, {"n_refiner_layers", 1}};
    CHECK_NOTHROW(models::build_component(b, kClass, cfg, raw));
    auto refuses = [&](nlohmann::json c, const std::map<std::string, Tensor>& r, const char* what) {
        ir::Graph g2;
        models::Builder b2(g2, *ws);
        CHECK_THROWS_WITH(models::build_component(b2, kClass, c, r), Catch::Contains(what));
    };
    auto with = [&](const char* k, nlohmann::json v) {
        nlohmann::json c = cfg;
        c[k] = v;
        return c;
    };
    refuses(with("siglip_feat_dim", 16), raw, "siglip_feat_dim");
    refuses(with("all_patch_size", {1}), raw, "(2, 1)");
    refuses(with("axes_dims", {4, 4, 4}), raw, "axes_dims sum");
    auto odd = raw;
    odd["x_0"] = test::random_tensor({4, 1, 5, 4}, 3);
    refuses(cfg, odd, "multiple of the patch size");
    auto no_cap = raw;
    no_cap.erase("cap_feats_0");
    refuses(cfg, no_cap, "cap_feats_0");
}
