// AutoencoderDC (DC-AE) parity with diffusers: fixtures `dc_ae` (Sana's layout: ResBlock / EfficientViT stages,
// multiscale 5, "conv" down / "interpolate" up, rms_norm + silu) and `dc_ae_shuffle` (the in/mix layout: pixel
// (un)shuffle stages and ends, BatchNorm2d + relu decoder ResBlocks, no multiscale); CPU reference and Vulkan with
// f32 and f16 weights; tiling as AutoencoderDC.tiled_decode / tiled_encode written out plainly here.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <set>

#include "converter/arch.h"
#include "models/core/forward.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/vae/dc_ae.h"
#include "models/vae/dc_ae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/models/model_harness.h"
#include "tests/support/force_linear.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
    auto x = a.to_f32(), y = b.to_f32();
    REQUIRE(x.size() == y.size());
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, (double)std::fabs(x[i] - y[i]));
    return m;
}

nlohmann::json fixture_config(const std::string& fx) {
    return models::ModelSource::open(test::data_path("fixtures/" + fx)).config("vae");
}

// A plain [B, C, H, W] float array.
struct Img {
    int64_t B = 0, C = 0, H = 0, W = 0;
    std::vector<float> v;
    float& at(int64_t b, int64_t c, int64_t y, int64_t x) { return v[(size_t)(((b * C + c) * H + y) * W + x)]; }
    static Img of(const Tensor& t) { return {t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.to_f32()}; }
    Tensor tensor() const { return Tensor::from_f32({B, C, H, W}, v); }
};

// AutoencoderDC.tiled_decode (decode) / tiled_encode, diffusers' loops: tiles x[:, :, i:i+tile, j:j+tile] for i, j
// in range(0, H or W, stride); encode pads each tile with zeros to multiples of 32 (F.pad right/bottom); each
// through the CPU reference; then in order blend_v(above, tile), blend_h(left, tile) in place (weights in double),
// crop [:limit, :limit], cat(dim=3), cat(dim=2); encode crops the result to [:H // 32, :W // 32].
Img reference_tiled(const models::ModelSource& src, bool decode, Img x, int tile, int stride, int blend, int limit) {
    std::vector<std::vector<Img>> rows;
    for (int64_t i = 0; i < x.H; i += stride) {
        rows.emplace_back();
        for (int64_t j = 0; j < x.W; j += stride) {
            const int64_t th = std::min<int64_t>(tile, x.H - i), tw = std::min<int64_t>(tile, x.W - j);
            Img t{x.B, x.C, decode ? th : (th + 31) / 32 * 32, decode ? tw : (tw + 31) / 32 * 32, {}};
            t.v.assign((size_t)(t.B * t.C * t.H * t.W), 0.f);
            for (int64_t b = 0; b < t.B; ++b)
                for (int64_t c = 0; c < t.C; ++c)
                    for (int64_t y = 0; y < th; ++y)
                        for (int64_t xx = 0; xx < tw; ++xx) t.at(b, c, y, xx) = x.at(b, c, i + y, j + xx);
            auto out = models::forward_component(nullptr, src, "vae", {{decode ? "latents" : "image", t.tensor()}});
            rows.back().push_back(Img::of(out.at(decode ? "decoded" : "latent")));
        }
    }
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) {
            Img& b = rows[i][j];
            if (i > 0) {
                Img& a = rows[i - 1][j];
                const int64_t e = std::min<int64_t>({a.H, b.H, blend});
                for (int64_t y = 0; y < e; ++y)
                    for (int64_t n = 0; n < b.B; ++n)
                        for (int64_t c = 0; c < b.C; ++c)
                            for (int64_t xx = 0; xx < b.W; ++xx)
                                b.at(n, c, y, xx) = (float)(a.at(n, c, a.H - e + y, xx) * (1.0 - (double)y / e) +
                                                            b.at(n, c, y, xx) * ((double)y / e));
            }
            if (j > 0) {
                Img& a = rows[i][j - 1];
                const int64_t e = std::min<int64_t>({a.W, b.W, blend});
                for (int64_t xx = 0; xx < e; ++xx)
                    for (int64_t n = 0; n < b.B; ++n)
                        for (int64_t c = 0; c < b.C; ++c)
                            for (int64_t y = 0; y < b.H; ++y)
                                b.at(n, c, y, xx) = (float)(a.at(n, c, y, a.W - e + xx) * (1.0 - (double)xx / e) +
                                                            b.at(n, c, y, xx) * ((double)xx / e));
            }
        }
    Img o{rows[0][0].B, rows[0][0].C, 0, 0, {}};
    for (auto& r : rows) o.H += std::min<int64_t>(limit, r[0].H);
    for (auto& t : rows[0]) o.W += std::min<int64_t>(limit, t.W);
    o.v.resize((size_t)(o.B * o.C * o.H * o.W));
    int64_t y0 = 0;
    for (auto& r : rows) {
        int64_t x0 = 0;
        for (auto& t : r) {
            for (int64_t n = 0; n < o.B; ++n)
                for (int64_t c = 0; c < o.C; ++c)
                    for (int64_t y = 0; y < std::min<int64_t>(limit, t.H); ++y)
                        for (int64_t xx = 0; xx < std::min<int64_t>(limit, t.W); ++xx)
                            o.at(n, c, y0 + y, x0 + xx) = t.at(n, c, y, xx);
            x0 += std::min<int64_t>(limit, t.W);
        }
        y0 += std::min<int64_t>(limit, r[0].H);
    }
    if (decode) return o;
    Img cropped{o.B, o.C, std::min(o.H, x.H / 32), std::min(o.W, x.W / 32), {}};
    cropped.v.resize((size_t)(cropped.B * cropped.C * cropped.H * cropped.W));
    for (int64_t n = 0; n < o.B; ++n)
        for (int64_t c = 0; c < o.C; ++c)
            for (int64_t y = 0; y < cropped.H; ++y)
                for (int64_t xx = 0; xx < cropped.W; ++xx) cropped.at(n, c, y, xx) = o.at(n, c, y, xx);
    return cropped;
}

const char* kFixtures[] = {"dc_ae", "dc_ae_shuffle"};
}  // namespace

TEST_CASE("DC-AE config: what Kiln does not implement is one line", "[dc_ae]") {
    const nlohmann::json good = fixture_config("dc_ae");
    auto c = models::DcAeConfig::from_json(good);
    CHECK(c.compression() == 32);
    CHECK(c.decoder[5].layers == 2);
    CHECK(c.decoder[3].scales == std::vector<int>{5});
    CHECK_FALSE(c.pixel_shuffle_up);
    CHECK_FALSE(c.pixel_unshuffle_down);
    auto s = models::DcAeConfig::from_json(fixture_config("dc_ae_shuffle"));
    CHECK(s.decoder[0].norm == models::DcAeConfig::Norm::batch);
    CHECK(s.decoder[0].act == models::DcAeConfig::Act::relu);
    CHECK(s.decoder[3].norm == models::DcAeConfig::Norm::rms);
    CHECK(s.pixel_shuffle_up);
    auto bad = [&](const char* key, nlohmann::json v, const std::string& what) {
        nlohmann::json j = good;
        j[key] = v;
        try {
            models::DcAeConfig::from_json(j);
            FAIL("accepted " << key << " = " << v.dump());
        } catch (const kiln::Error& e) {
            const std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find("AutoencoderDC") != std::string::npos);
            CHECK(msg.find(what) != std::string::npos);
            CHECK(msg.find('\n') == std::string::npos);
        }
    };
    bad("decoder_norm_types", "layer_norm", "'layer_norm' is not supported");
    bad("decoder_act_fns", "gelu", "'gelu' is not supported");
    bad("decoder_conv_act_fn", "mish", "'mish' is not supported");
    bad("encoder_block_types", "AttnBlock", "'AttnBlock' is not supported");
    using J = nlohmann::json;
    bad("decoder_layers_per_block", J::array({1, 1, 1}), "one entry per stage");
    bad("decoder_act_fns", J::array({"silu", "relu"}), "has 2 entries for 6 stages");
    bad("attention_head_dim", 12, "not a multiple of attention_head_dim 12");
    bad("latent_channels", 24, "not a multiple of latent_channels 24");
    bad("decoder_qkv_multiscales",
        J::array({J::array(), J::array(), J::array(), J::array({4}), J::array({5}), J::array({5})}),
        "kernel 4 is not odd");
    // The tiling geometry: diffusers' defaults, and what Kiln refuses.
    auto t = models::DcAeTiling::from(c);
    CHECK((t.sample == 512 && t.stride == 448 && t.latent() == 16 && t.latent_stride() == 14));
    CHECK((t.decode_blend() == 64 && t.encode_blend() == 2));
    CHECK(models::DcAeTiling::from(c, 256).stride == 224);  // diffusers' 448 / 512 kept
    CHECK(models::DcAeTiling::from(c, 128).stride == 96);   // 112 down to a multiple of 32
    CHECK(models::DcAeTiling::from(c, 32).stride == 32);    // one latent: no overlap
    CHECK_THROWS_AS(models::DcAeTiling::from(c, 100), kiln::Error);
    CHECK_THROWS_AS(models::DcAeTiling::from(c, 64, 96), kiln::Error);
}

TEST_CASE("DC-AE decode and encode match diffusers on the CPU reference", "[models][dc_ae]") {
    for (const char* fx : kFixtures) {
        auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + fx));
        auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + fx + "/io.safetensors"));
        auto cfg = models::DcAeConfig::from_json(src.config("vae"));
        // Every stage's output too (the debug outputs the fixture keeps), to place a mismatch.
        for (bool decode : {true, false}) {
            ir::Graph g;
            auto ws = src.weights("vae");
            models::Builder b(g, *ws);
            const Tensor x = io.read(decode ? "latents" : "image");
            if (decode)
                models::build_dc_ae_decoder(b, cfg, 1, (int)x.shape[2], (int)x.shape[3], true);
            else
                models::build_dc_ae_encoder(b, cfg, 1, (int)x.shape[2], (int)x.shape[3], true);
            auto out = cpu::run(g, {{decode ? "latents" : "image", x}}, models::cpu_weights(*ws, b.constants()));
            for (auto& [name, t] : out) {
                if (!io.find(name)) continue;
                // f32 weights and activations, f64 accumulation: only diffusers' own f32 rounding differs (~1e-6).
                const double err = rel_l2(t.to_f32(), io.read(name).to_f32());
                INFO(fx << " " << name << " relative L2 " << err);
                CHECK(err <= 1e-4);
            }
            CHECK(out.count(decode ? "decoded" : "latent"));
        }
    }
}

TEST_CASE("DC-AE decode and encode match diffusers on Vulkan, f32 and f16 weights", "[models][dc_ae][vulkan]") {
    for (const char* fx : kFixtures) {
        auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + fx + "/io.safetensors"));
        const nlohmann::json tol = nlohmann::json::parse(std::ifstream(
            test::data_path(std::string("fixtures/") + fx + "/io.json")))["tolerance_observed"]["weights_fp16_rounded"];
        const std::map<std::string, Tensor> in = {{"latents", io.read("latents")}, {"image", io.read("image")}};
        for (DType dt : {DType::f32, DType::f16}) {
            auto src = models::ModelSource::open(test::convert_fixture(fx, dt));
            Tensor first_dec, first_lat;
            for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
                auto out = models::forward_component(&test::context(), src, "vae", in, m);
                for (const char* name : {"decoded", "latent"}) {
                    const Tensor ref = io.read(name);
                    const double err = rel_l2(out.at(name).to_f32(), ref.to_f32()),
                                 mad = max_abs_diff(out.at(name), ref);
                    INFO(fx << " " << dtype_name(dt) << " " << exec::mode_name(m) << " " << name << ": relative L2 "
                            << err << ", max abs " << mad
                            << " (diffusers with f16-rounded weights: " << tol[name].get<double>() << ")");
                    // f32: accumulation order only, as the CPU reference. f16: the matrices rounded to f16 as the
                    // fixture's weights_fp16_rounded run rounds every weight (Kiln keeps 1-D tensors f32), so the
                    // max error is about that run's; 1.5x for where the rounding errors add up differently.
                    if (dt == DType::f32)
                        CHECK(err <= 1e-4);
                    else
                        CHECK(mad <= 1.5 * tol[name].get<double>());
                }
                if (m == exec::Mode::eager) {
                    first_dec = out.at("decoded"), first_lat = out.at("latent");
                } else {  // modes are bitwise identical
                    CHECK(first_dec.bytes == out.at("decoded").bytes);
                    CHECK(first_lat.bytes == out.at("latent").bytes);
                }
            }
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("DC-AE tiled decode matches diffusers' tiled_decode", "[models][dc_ae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/dc_ae"));
    // Tiles of 96 px = 3 latents, stride 64 px = 2 latents: blend 32 px, each tile cropped to 64 px. 5 x 4 latents:
    // tile rows start at 0, 2, 4 (the last 1 high), cols at 0, 2 (the last 2 wide, not cut): 6 tiles of 4 shapes;
    // output 64 + 64 + 32 = 160 by 64 + 64 = 128 px, as the untiled decoder's.
    Tensor z = models::seeded_normal({1, 32, 5, 4}, 11);
    Img ref = reference_tiled(src, true, Img::of(z), 3, 2, 32, 64);
    REQUIRE((ref.H == 160 && ref.W == 128));
    models::VaeOptions opt;
    opt.tiled = true;
    opt.tile_sample_size = 96;
    opt.tile_sample_stride = 64;
    for (vk::Context* ctx : {(vk::Context*)nullptr, &test::context()}) {
        models::DcAeRunner vae(ctx, src, "vae", opt);
        Tensor dec = vae.decode(z);
        REQUIRE(dec.shape == Shape{1, 3, 160, 128});
        CHECK(vae.forwards() == 6);
        // CPU: the same per-tile outputs; only the blend's f32 vs double weights differ (~1e-7 relative).
        // Vulkan: f32 in another accumulation order than the CPU reference, as the untiled parity test (1e-4).
        const double err = rel_l2(dec.to_f32(), ref.v);
        INFO((ctx ? "vulkan" : "cpu") << ": relative L2 to the written-out tiled_decode " << err);
        CHECK(err <= (ctx ? 1e-4 : 1e-6));
    }
    // The tiles and blends matter: the untiled decode differs well beyond those tolerances.
    auto untiled = models::forward_component(nullptr, src, "vae", {{"latents", z}});
    CHECK(rel_l2(untiled.at("decoded").to_f32(), ref.v) > 1e-2);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("DC-AE tiled encode matches diffusers' tiled_encode", "[models][dc_ae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/dc_ae_shuffle"));
    // Tiles of 96 px, stride 64: blend 1 latent, each tile cropped to 2 latents. 160 x 128 px: tile rows at 0, 64, 128
    // (the last 32 high), cols at 0, 64: 6 tiles; 150 x 120 px: tiles 86 / 22 high and 56 wide zero-padded to 96 /
    // 32 / 64, and the 5 x 4 latents cropped to 150 // 32 x 120 // 32 = 4 x 3.
    models::VaeOptions opt;
    opt.tiled = true;
    opt.tile_sample_size = 96;
    opt.tile_sample_stride = 64;
    for (auto [H, W] : {std::pair<int64_t, int64_t>{160, 128}, {150, 120}}) {
        Tensor x = models::seeded_normal({1, 3, H, W}, 12);
        Img ref = reference_tiled(src, false, Img::of(x), 96, 64, 1, 2);
        REQUIRE((ref.H == H / 32 && ref.W == W / 32));
        for (vk::Context* ctx : {(vk::Context*)nullptr, &test::context()}) {
            models::DcAeRunner vae(ctx, src, "vae", opt);
            Tensor lat = vae.encode(x);
            REQUIRE(lat.shape == Shape{1, 32, H / 32, W / 32});
            CHECK(vae.forwards() == 6);
            const double err = rel_l2(lat.to_f32(), ref.v);
            INFO(H << "x" << W << " " << (ctx ? "vulkan" : "cpu") << ": relative L2 " << err);
            CHECK(err <= (ctx ? 1e-4 : 1e-6));  // as the decode case
        }
        if (H % 32 == 0 && W % 32 == 0) {
            auto untiled = models::forward_component(nullptr, src, "vae", {{"image", x}});
            CHECK(rel_l2(untiled.at("latent").to_f32(), ref.v) > 1e-2);
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("DC-AE tiling leaves an input within one tile untouched; slicing changes no bit", "[models][dc_ae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/dc_ae"));
    auto io = SafeTensors::open(test::data_path("fixtures/dc_ae/io.safetensors"));
    models::VaeOptions opt;
    models::DcAeRunner plain(&test::context(), src, "vae", opt);
    opt.tiled = true;  // diffusers' 512 px tiles: the fixture's 2 x 3 latents and 64 x 96 image are within one
    models::DcAeRunner tiled(&test::context(), src, "vae", opt);
    const Tensor dec = tiled.decode(io.read("latents")), lat = tiled.encode(io.read("image"));
    CHECK(max_abs_diff(plain.decode(io.read("latents")), dec) == 0.0);
    CHECK(max_abs_diff(plain.encode(io.read("image")), lat) == 0.0);
    CHECK(tiled.forwards() == 2);
    CHECK(rel_l2(dec.to_f32(), io.read("decoded").to_f32()) <= 1e-4);
    // Slicing: each batch element alone equals the batch at once (every kernel reads only its own element), with
    // the same kernels: a GPU's linear table may pick another one for the sliced run's fewer rows (gemv below about
    // 22 rows), which sums in another order (docs/jit.md, "Activations larger than one binding").
    const test::ForceLinear same_kernels("reg");
    Tensor z = models::seeded_normal({2, 32, 2, 2}, 13);
    opt = {};
    models::DcAeRunner batched(&test::context(), src, "vae", opt);
    opt.sliced = true;
    models::DcAeRunner sliced(&test::context(), src, "vae", opt);
    CHECK(max_abs_diff(batched.decode(z), sliced.decode(z)) == 0.0);
    CHECK(sliced.forwards() == 2);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("DC-AE Sana architecture: graph and converter name the same tensors", "[dc_ae]") {
    const auto& arch = models::synthetic_archs().at("dc-ae-f32c32-sana-1.1");
    auto cfg = models::DcAeConfig::from_json(arch.config);
    auto ws = models::synthetic_store(DType::f16);
    std::set<std::string> used;
    for (bool decode : {true, false}) {
        ir::Graph g;
        models::Builder b(g, *ws);
        if (decode)
            models::build_dc_ae_decoder(b, cfg, 1, arch.latent, arch.latent);
        else
            models::build_dc_ae_encoder(b, cfg, 1, 32 * arch.latent, 32 * arch.latent);
        const Shape out = g.value(g.outputs()[0].second).shape;
        CHECK(out == (decode ? Shape{1, 3, 1024, 1024} : Shape{1, 32, 32, 32}));
        // Decoder: 3 blocks per stage; the five with up blocks before them: the JIT replays each stage's blocks.
        CHECK(g.regions().size() == (decode ? 18u : 15u));
        for (int id : g.weights())
            if (!b.constants().count(g.value(id).name)) used.insert(g.value(id).name);
    }
    auto spec = converter::arch_spec(arch.cls, arch.config, "config.json");
    CHECK(used == std::set<std::string>(spec.expected.begin(), spec.expected.end()));
    CHECK(spec.blocks.size() == 12);
}

// Memory for the edge: Sana's DC-AE decoding 1024 x 1024 px (32 x 32 latents), with diffusers' 512 px tiles (and
// smaller) and without. Plans only. Run by name: "[.dc_ae_memory]".
TEST_CASE("DC-AE decode memory at 1024 px, tiled and not", "[.dc_ae_memory]") {
    const auto& arch = models::synthetic_archs().at("dc-ae-f32c32-sana-1.1");
    for (int tile : {512, 256, 0}) {
        models::VaeOptions opt;
        opt.tiled = tile > 0;
        opt.tile_sample_size = tile;
        models::DcAeRunner vae(&test::context(), models::synthetic_store(DType::f16), arch.config, opt);
        try {
            auto c = vae.plan_decode({1, 32, 32, 32});
            const double mib = 1 << 20;
            std::printf("tile %4d px: activations %.1f MiB planned (%.1f naive), weights %.1f MiB, device %.1f MiB\n",
                        tile, c.activation_bytes_planned / mib, c.activation_bytes_naive / mib, c.weight_bytes / mib,
                        c.device_bytes / mib);
        } catch (const kiln::Error& e) {  // e.g. lavapipe's maxMemoryAllocationSize (the plan's size is in the text)
            std::printf("tile %4d px: not planned on this device: %s\n", tile, e.what());
        }
    }
}
