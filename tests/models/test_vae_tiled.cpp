// VAE tiling and slicing (diffusers enable_tiling / enable_slicing) against diffusers' tiled_decode and
// _tiled_encode written out plainly here: the CPU reference per tile (forward_component), blend_v / blend_h in
// double, crops and concatenations as separate loops.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "models/core/weights.h"
#include "models/pipelines/dit_pipeline.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/force_linear.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// A plain [B, C, H, W] float array.
struct Img {
    int64_t B = 0, C = 0, H = 0, W = 0;
    std::vector<float> v;
    float& at(int64_t b, int64_t c, int64_t y, int64_t x) { return v[(size_t)(((b * C + c) * H + y) * W + x)]; }
    static Img of(const Tensor& t) { return {t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.to_f32()}; }
    Tensor tensor() const { return Tensor::from_f32({B, C, H, W}, v); }
};

// diffusers AutoencoderKL.tiled_decode (decode = true) or _tiled_encode: tiles x[:, :, i:i+tile, j:j+tile] for
// i, j in range(0, H or W, overlap), each through the CPU reference; then for every tile in order
// blend_v(above, tile), blend_h(left, tile) in place, crop [:row_limit, :row_limit], cat(dim=3), cat(dim=2).
Img reference_tiled(const models::ModelSource& src, bool decode, const std::string& out_name, Img x, int tile,
                    int overlap, int blend, int row_limit) {
    std::vector<std::vector<Img>> rows;
    for (int64_t i = 0; i < x.H; i += overlap) {
        rows.emplace_back();
        for (int64_t j = 0; j < x.W; j += overlap) {
            Img t{x.B, x.C, std::min<int64_t>(tile, x.H - i), std::min<int64_t>(tile, x.W - j), {}};
            t.v.resize((size_t)(t.B * t.C * t.H * t.W));
            for (int64_t b = 0; b < t.B; ++b)
                for (int64_t c = 0; c < t.C; ++c)
                    for (int64_t y = 0; y < t.H; ++y)
                        for (int64_t xx = 0; xx < t.W; ++xx) t.at(b, c, y, xx) = x.at(b, c, i + y, j + xx);
            auto out = models::forward_component(nullptr, src, "vae", {{decode ? "latents" : "image", t.tensor()}});
            rows.back().push_back(Img::of(out.at(out_name)));
        }
    }
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) {
            Img& b = rows[i][j];
            if (i > 0) {
                Img& a = rows[i - 1][j];
                int64_t e = std::min<int64_t>({a.H, b.H, blend});
                for (int64_t y = 0; y < e; ++y)
                    for (int64_t n = 0; n < b.B; ++n)
                        for (int64_t c = 0; c < b.C; ++c)
                            for (int64_t xx = 0; xx < b.W; ++xx)
                                b.at(n, c, y, xx) = (float)(a.at(n, c, a.H - e + y, xx) * (1.0 - (double)y / e) +
                                                            b.at(n, c, y, xx) * ((double)y / e));
            }
            if (j > 0) {
                Img& a = rows[i][j - 1];
                int64_t e = std::min<int64_t>({a.W, b.W, blend});
                for (int64_t xx = 0; xx < e; ++xx)
                    for (int64_t n = 0; n < b.B; ++n)
                        for (int64_t c = 0; c < b.C; ++c)
                            for (int64_t y = 0; y < b.H; ++y)
                                b.at(n, c, y, xx) = (float)(a.at(n, c, y, a.W - e + xx) * (1.0 - (double)xx / e) +
                                                            b.at(n, c, y, xx) * ((double)xx / e));
            }
        }
    // Concatenate the cropped tiles.
    Img o{rows[0][0].B, rows[0][0].C, 0, 0, {}};
    for (auto& r : rows) o.H += std::min<int64_t>(row_limit, r[0].H);
    for (auto& t : rows[0]) o.W += std::min<int64_t>(row_limit, t.W);
    o.v.resize((size_t)(o.B * o.C * o.H * o.W));
    int64_t y0 = 0;
    for (auto& r : rows) {
        int64_t x0 = 0;
        for (auto& t : r) {
            for (int64_t n = 0; n < o.B; ++n)
                for (int64_t c = 0; c < o.C; ++c)
                    for (int64_t y = 0; y < std::min<int64_t>(row_limit, t.H); ++y)
                        for (int64_t xx = 0; xx < std::min<int64_t>(row_limit, t.W); ++xx)
                            o.at(n, c, y0 + y, x0 + xx) = t.at(n, c, y, xx);
            x0 += std::min<int64_t>(row_limit, t.W);
        }
        y0 += std::min<int64_t>(row_limit, r[0].H);
    }
    return o;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
    auto x = a.to_f32(), y = b.to_f32();
    REQUIRE(x.size() == y.size());
    double m = 0;
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, (double)std::fabs(x[i] - y[i]));
    return m;
}

// Fixture `vae`: block_out [32, 64] (x2), sample_size 32. Tiles of 8 px = 4 latents: decode stride int(4 * 0.75) = 3
// latents, blend int(8 * 0.25) = 2 px, row limit 6 px; encode stride 6 px, blend 1 latent, row limit 3 latents.
constexpr int kTile = 8;
}  // namespace

TEST_CASE("VAE tile geometry follows diffusers' AutoencoderKL.__init__", "[vae]") {
    nlohmann::json sd3 = {{"block_out_channels", {128, 256, 512, 512}}, {"latent_channels", 16}, {"sample_size", 1024}};
    auto t = models::VaeTiling::from(models::VaeConfig::from_json(sd3));
    CHECK(t.sample == 1024);
    CHECK(t.latent == 128);
    CHECK(t.decode_stride() == 96);
    CHECK(t.decode_blend() == 256);
    CHECK(t.encode_stride() == 768);
    CHECK(t.encode_blend() == 32);
    sd3["sample_size"] = {512, 512};  // a list: its first entry
    CHECK(models::VaeTiling::from(models::VaeConfig::from_json(sd3)).latent == 64);
    CHECK(models::VaeTiling::from(models::VaeConfig::from_json(sd3), 200).latent == 25);          // int(200 / 8)
    CHECK_THROWS_AS(models::VaeTiling::from(models::VaeConfig::from_json(sd3), 8), kiln::Error);  // 1 latent: stride 0
}

TEST_CASE("VAE tiled decode matches diffusers' tiled_decode", "[models][vae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/vae"));
    // 10 x 7 latents: tiles start at 0, 3, 6, 9 (rows; the last is 1 high) and 0, 3, 6 (cols; the last 1 wide):
    // 12 tiles of 4 shapes. Output 6 + 6 + 6 + 2 = 20 by 6 + 6 + 2 = 14 px, as the untiled 2x decoder.
    Tensor z = models::seeded_normal({1, 4, 10, 7}, 3);
    Img ref = reference_tiled(src, true, "decoded", Img::of(z), kTile / 2, 3, 2, kTile - 2);
    REQUIRE(ref.H == 20);
    REQUIRE(ref.W == 14);
    models::VaeOptions opt;
    opt.tiled = true;
    opt.tile_sample_size = kTile;
    for (vk::Context* ctx : {(vk::Context*)nullptr, &test::context()}) {
        models::VaeRunner vae(ctx, src, "vae", opt);
        Tensor dec = vae.decode(z);
        REQUIRE(dec.shape == Shape{1, 3, 20, 14});
        CHECK(vae.forwards() == 12);
        // CPU: the same per-tile outputs; only the blend's f32 vs double rounding differs (~1e-7 relative).
        // Vulkan: f32 with another accumulation order than the CPU reference, as the untiled parity test (1e-4).
        double err = rel_l2(dec.to_f32(), ref.v);
        INFO((ctx ? "vulkan" : "cpu") << ": relative L2 to the written-out tiled_decode " << err);
        CHECK(err <= (ctx ? 1e-4 : 1e-6));
    }
    // The tiles and blends matter: the untiled decode differs well beyond those tolerances.
    auto untiled = models::forward_component(nullptr, src, "vae", {{"latents", z}});
    CHECK(rel_l2(untiled.at("decoded").to_f32(), ref.v) > 1e-2);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("VAE tiled encode matches diffusers' _tiled_encode", "[models][vae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/vae"));
    // 20 x 14 px: tiles start at 0, 6, 12, 18 (the last 2 px high) and 0, 6, 12 (the last 2 wide); every tile side is
    // even, as the stride-2 downsampler needs. Latents 3 + 3 + 3 + 1 = 10 by 3 + 3 + 1 = 7.
    Tensor x = models::seeded_normal({1, 3, 20, 14}, 4);
    Img mean = reference_tiled(src, false, "latent_mean", Img::of(x), kTile, 6, 1, kTile / 2 - 1);
    // forward_component clamps logvar per tile, diffusers after blending: the same while no value reaches the bounds.
    Img logvar = reference_tiled(src, false, "latent_logvar", Img::of(x), kTile, 6, 1, kTile / 2 - 1);
    for (float v : logvar.v) REQUIRE((v > -30.f && v < 20.f));
    models::VaeOptions opt;
    opt.tiled = true;
    opt.tile_sample_size = kTile;
    for (vk::Context* ctx : {(vk::Context*)nullptr, &test::context()}) {
        models::VaeRunner vae(ctx, src, "vae", opt);
        auto enc = vae.encode(x);
        REQUIRE(enc.at("latent_mean").shape == Shape{1, 4, 10, 7});
        REQUIRE(enc.at("latent_logvar").shape == Shape{1, 4, 10, 7});
        CHECK(vae.forwards() == 12);
        double e0 = rel_l2(enc.at("latent_mean").to_f32(), mean.v);
        double e1 = rel_l2(enc.at("latent_logvar").to_f32(), logvar.v);
        INFO((ctx ? "vulkan" : "cpu") << ": mean " << e0 << ", logvar " << e1);
        CHECK(e0 <= (ctx ? 1e-4 : 1e-6));  // as the decode case
        CHECK(e1 <= (ctx ? 1e-4 : 1e-6));
    }
    auto untiled = models::forward_component(nullptr, src, "vae", {{"image", x}});
    CHECK(rel_l2(untiled.at("latent_mean").to_f32(), mean.v) > 1e-2);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("VAE sliced decode and encode equal the batched ones", "[models][vae][vulkan]") {
    // With the same kernels: a GPU's linear table may pick another one for a slice's fewer rows (gemv below about
    // 22 rows), which sums in another order (docs/jit.md, "Activations larger than one binding").
    const test::ForceLinear same_kernels("reg");
    auto src = models::ModelSource::open(test::data_path("fixtures/vae"));
    Tensor z = models::seeded_normal({3, 4, 6, 5}, 5);
    Tensor x = models::seeded_normal({3, 3, 12, 10}, 6);
    models::VaeOptions opt;
    models::VaeRunner batched(&test::context(), src, "vae", opt);
    opt.sliced = true;
    models::VaeRunner sliced(&test::context(), src, "vae", opt);
    Tensor a = batched.decode(z), b = sliced.decode(z);
    CHECK(batched.forwards() == 1);
    CHECK(sliced.forwards() == 3);
    REQUIRE(a.shape == b.shape);
    // Every kernel computes an output element from its own batch element in the same order whatever B is
    // (group norm reduces per (sample, group)), so slicing changes no bit.
    CHECK(max_abs_diff(a, b) == 0.0);
    auto ea = batched.encode(x), eb = sliced.encode(x);
    CHECK(max_abs_diff(ea.at("latent_mean"), eb.at("latent_mean")) == 0.0);
    CHECK(max_abs_diff(ea.at("latent_logvar"), eb.at("latent_logvar")) == 0.0);
    // Sliced and tiled: each slice tiled on its own equals the batch tiled at once.
    opt.tiled = true;
    opt.tile_sample_size = kTile;
    models::VaeRunner tiled_sliced(&test::context(), src, "vae", opt);
    opt.sliced = false;
    models::VaeRunner tiled(&test::context(), src, "vae", opt);
    CHECK(max_abs_diff(tiled.decode(z), tiled_sliced.decode(z)) == 0.0);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("VAE tiling leaves an input within one tile untouched", "[models][vae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/vae"));
    auto io = SafeTensors::open(test::data_path("fixtures/vae/io.safetensors"));
    // The fixture's 8 x 8 latents and 32 x 32 image are exactly one tile of the config's sample_size 32:
    // diffusers' `>` test keeps them untiled.
    models::VaeOptions opt;
    models::VaeRunner plain(&test::context(), src, "vae", opt);
    opt.tiled = true;
    models::VaeRunner tiled(&test::context(), src, "vae", opt);
    REQUIRE(tiled.tiling().latent == 16);
    Tensor z = models::seeded_normal({1, 4, 16, 16}, 7);
    CHECK(max_abs_diff(plain.decode(z), tiled.decode(z)) == 0.0);
    CHECK(max_abs_diff(plain.decode(io.read("latents")), tiled.decode(io.read("latents"))) == 0.0);
    auto ep = plain.encode(io.read("image")), et = tiled.encode(io.read("image"));
    CHECK(max_abs_diff(ep.at("latent_mean"), et.at("latent_mean")) == 0.0);
    CHECK(tiled.forwards() == 3);
    CHECK(rel_l2(et.at("latent_mean").to_f32(), io.read("latent_mean").to_f32()) <= 1e-4);  // as test_vae
    CHECK(vk::Context::validation_errors() == 0);
}

// Memory for the edge: SD3 / Flux VAE (block_out [128, 256, 512, 512], 16 latent channels, 2 layers per block)
// decoding 1024 x 1024 px, with tiles of 512 px and without. Plans only. Run by name: "[.vae_memory]".
TEST_CASE("VAE decode memory at 1024 px, tiled and not", "[.vae_memory]") {
    const nlohmann::json cfg = {{"_class_name", "AutoencoderKL"},
                                {"block_out_channels", {128, 256, 512, 512}},
                                {"down_block_types", std::vector<std::string>(4, "DownEncoderBlock2D")},
                                {"up_block_types", std::vector<std::string>(4, "UpDecoderBlock2D")},
                                {"latent_channels", 16},
                                {"layers_per_block", 2},
                                {"norm_num_groups", 32},
                                {"sample_size", 1024},
                                {"use_quant_conv", false},
                                {"use_post_quant_conv", false}};
    for (int tile : {512, 384, 256, 128, 0}) {
        models::VaeOptions opt;
        opt.tiled = tile > 0;
        opt.tile_sample_size = tile;
        models::VaeRunner vae(&test::context(), models::synthetic_store(DType::f16), cfg, opt);
        try {
            auto c = vae.plan_decode({1, 16, 128, 128});
            const double mib = 1 << 20;
            std::printf("tile %4d px: activations %.1f MiB planned (%.1f naive), weights %.1f MiB, device %.1f MiB\n",
                        tile, c.activation_bytes_planned / mib, c.activation_bytes_naive / mib, c.weight_bytes / mib,
                        c.device_bytes / mib);
        } catch (const kiln::Error& e) {  // e.g. lavapipe's maxMemoryAllocationSize (the plan's size is in the text)
            std::printf("tile %4d px: not planned on this device: %s\n", tile, e.what());
        }
    }
}

TEST_CASE("DiT pipeline decodes through the tiled VAE with tiled_vae", "[models][vae][pipeline][vulkan]") {
    // The fixture pipeline with its VAE's sample_size lowered from 16 to 8 px (4 latents): its 8 x 8 latents then
    // span 3 x 3 tiles (starts 0, 3, 6).
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("kiln_vae_tiled_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(test::data_path("fixtures/dit_pipeline_ddim"), dir, fs::copy_options::recursive);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "vae" / "config.json"));
    REQUIRE(cfg["sample_size"] == 16);
    cfg["sample_size"] = 8;
    std::ofstream(dir / "vae" / "config.json") << cfg.dump();
    auto io = SafeTensors::open(test::data_path("fixtures/dit_pipeline_ddim/io.safetensors"));
    models::GenerateOptions opt;
    opt.labels = {1};
    opt.steps = 2;
    opt.latents_init = io.read("latents_init");
    opt.latents_init->shape[0] = 1;
    opt.latents_init->bytes.resize(opt.latents_init->bytes.size() / io.read("latents_init").shape[0]);
    opt.keep_intermediates = true;
    opt.mode = exec::Mode::full;
    auto src = models::ModelSource::open(dir.string());
    auto named = [](const models::GenerateResult& r, const std::string& n) {
        for (auto& [name, t] : r.intermediates)
            if (name == n) return t;
        FAIL("no intermediate " << n);
        return Tensor();
    };
    auto plain = models::generate_dit(test::context(), src, opt);
    opt.tiled_vae = true;
    auto tiled = models::generate_dit(test::context(), src, opt);
    Tensor z = named(tiled, "final_latents_scaled");
    CHECK(max_abs_diff(z, named(plain, "final_latents_scaled")) == 0.0);
    models::VaeOptions vo;
    vo.tiled = true;
    models::VaeRunner vae(&test::context(), src, "vae", vo);
    // The pipeline's decode is the runner's, bit for bit; and it is tiled (the untiled decode differs).
    CHECK(max_abs_diff(named(tiled, "decoded"), vae.decode(z)) == 0.0);
    CHECK(vae.forwards() == 9);
    CHECK(rel_l2(named(tiled, "decoded").to_f32(), named(plain, "decoded").to_f32()) > 1e-2);
    fs::remove_all(dir);
    CHECK(vk::Context::validation_errors() == 0);
}
