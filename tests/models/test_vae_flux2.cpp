// AutoencoderKLFlux2 (FLUX.2 [klein]'s VAE) against diffusers 0.38.0 (fixture flux2_klein_pipeline: its vae/ folder
// and vae_io.safetensors, the tensors of the pipeline run that decode reads and writes): the latent
// de-normalisation and 2x2 unpatchify of Flux2KleinPipeline (hand-computed, then the pipeline's own tensors), the
// decode on the CPU reference and Vulkan (f32 and f16 weights), the converter keeping the bn statistics, and the
// encoder being AutoencoderKL's.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "converter/convert.h"
#include "models/vae/vae.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
const char* kVae = "fixtures/flux2_klein_pipeline/vae";
const char* kIo = "fixtures/flux2_klein_pipeline/vae_io.safetensors";

// The pipeline runs of the fixture: the last step's packed latents, their patchified size h x w.
struct Run {
    const char* tokens;
    const char* unpatchified;
    const char* decoded;
    int h, w;
};
const Run kRuns[] = {
    {"run0_step3_latents", "run0_final_latents_unpatchified", "run0_decoded", 8, 8},   // 32 x 32 px, B = 1
    {"run1_step2_latents", "run1_final_latents_unpatchified", "run1_decoded", 6, 10},  // 24 x 40 px, B = 2
};

std::vector<float> iota(size_t n, float step = 1) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (float)i * step;
    return v;
}
}  // namespace

TEST_CASE("FLUX.2 latent de-normalisation and unpatchify: channel c*4 + dy*2 + dx, by hand", "[vae][flux2]") {
    // C = 2 latent channels -> 8 patchified; h = 1, w = 2 tokens. Token n holds 10 n + k in channel k.
    std::vector<float> tok(16);
    for (int n = 0; n < 2; ++n)
        for (int k = 0; k < 8; ++k) tok[(size_t)(n * 8 + k)] = (float)(10 * n + k);
    const Tensor tokens = Tensor::from_f32({1, 2, 8}, tok);
    // The same latents patchified [1, 8, 1, 2]: p[k, 0, x] = token x's channel k.
    std::vector<float> pv(16);
    for (int k = 0; k < 8; ++k)
        for (int x = 0; x < 2; ++x) pv[(size_t)(k * 2 + x)] = tok[(size_t)(x * 8 + k)];
    const Tensor patchified = Tensor::from_f32({1, 8, 1, 2}, pv);

    // out[c, dy, 2x + dx] = token x's channel c*4 + dy*2 + dx.
    models::Flux2LatentNorm id{2, std::vector<float>(8, 0.f), std::vector<float>(8, 1.f)};
    const std::vector<float> layout = {0, 1, 10, 11, 2, 3, 12, 13,   // c = 0: rows dy = 0, 1
                                       4, 5, 14, 15, 6, 7, 16, 17};  // c = 1
    Tensor a = models::flux2_unpack_denormalize(tokens, id, 1, 2);
    REQUIRE(a.shape == Shape{1, 2, 2, 4});
    CHECK(a.to_f32() == layout);
    CHECK(models::flux2_denormalize_unpatchify(patchified, id).to_f32() == layout);

    // x * std[k] + mean[k] with std 2 and mean k / 4: exact in float32.
    models::Flux2LatentNorm n{2, iota(8, 0.25f), std::vector<float>(8, 2.f)};
    const std::vector<float> affine = {0, 2.25,  20, 22.25, 4.5,  6.75,  24.5, 26.75,
                                       9, 11.25, 29, 31.25, 13.5, 15.75, 33.5, 35.75};
    Tensor b = models::flux2_unpack_denormalize(tokens, n, 1, 2);
    CHECK(b.to_f32() == affine);
    CHECK(models::flux2_denormalize_unpatchify(patchified, n).to_f32() == affine);
    // _encode_vae_image's direction undoes it: (z - mean) / std, patchified.
    Tensor back = models::flux2_patchify_normalize(b, n);
    REQUIRE(back.shape == Shape{1, 8, 1, 2});
    CHECK(back.to_f32() == pv);

    // Shapes that do not fit are refused.
    CHECK_THROWS_AS(models::flux2_unpack_denormalize(tokens, n, 2, 2), kiln::Error);  // 4 tokens, not 2
    CHECK_THROWS_AS(models::flux2_unpack_denormalize(Tensor::from_f32({1, 2, 4}, iota(8)), n, 1, 2), kiln::Error);
    CHECK_THROWS_AS(models::flux2_patchify_normalize(Tensor::from_f32({1, 2, 1, 2}, iota(4)), n),
                    kiln::Error);  // H odd
    CHECK_THROWS_AS(models::flux2_patchify_normalize(Tensor::from_f32({1, 3, 2, 2}, iota(12)), n), kiln::Error);
    CHECK_THROWS_AS(models::flux2_unpack_denormalize(tokens, models::Flux2LatentNorm{}, 1, 2), kiln::Error);
}

TEST_CASE("AutoencoderKLFlux2 reads its bn statistics; Flux2KleinPipeline's decode input matches diffusers",
          "[vae][flux2]") {
    auto src = models::ModelSource::open(test::data_path(kVae));
    CHECK(src.class_of("vae") == "AutoencoderKLFlux2");
    models::VaeRunner vae(nullptr, src, "vae");
    const models::VaeConfig& c = vae.config();
    CHECK(c.latent_bn);
    CHECK((c.scaling_factor == 1 && c.shift_factor == 0));  // decode takes the de-normalised latents as they are
    CHECK(c.decoder_block_out == c.block_out);              // decoder_block_out_channels null
    const models::Flux2LatentNorm& n = vae.latent_norm();
    REQUIRE(n.latent_channels == 4);
    auto w = SafeTensors::open(test::data_path(kVae) + "/diffusion_pytorch_model.safetensors");
    const std::vector<float> mean = w.read("bn.running_mean").to_f32(), var = w.read("bn.running_var").to_f32();
    REQUIRE(mean.size() == 16);
    CHECK(n.mean == mean);
    for (size_t k = 0; k < 16; ++k) CHECK(n.std[k] == std::sqrt(var[k] + 1e-4f));  // sqrt(var + eps) in float32

    // The pipeline's own tensors: the last step's packed latents -> _unpack_latents_with_ids, x * std + mean,
    // _unpatchify_latents. The same float32 multiply, then add, per element as torch's two kernels (no fused
    // multiply-add: the arm64 toolchain builds with -ffp-contract=off): bitwise equal. (diffusers' own float64
    // re-implementation is 3.2e-7 away: vae_io.json's assembly_checks.)
    auto io = SafeTensors::open(test::data_path(kIo));
    for (const Run& r : kRuns) {
        const Tensor tokens = io.read(r.tokens), ref = io.read(r.unpatchified);
        Tensor z = models::flux2_unpack_denormalize(tokens, n, r.h, r.w);
        REQUIRE(z.shape == ref.shape);
        const double mad = max_abs_diff(z.to_f32(), ref.to_f32());
        INFO(r.tokens << ": max abs difference " << mad);
        CHECK(mad == 0);
        // Not the identity: the statistics move the latents well beyond that.
        models::Flux2LatentNorm id{4, std::vector<float>(16, 0.f), std::vector<float>(16, 1.f)};
        CHECK(max_abs_diff(models::flux2_unpack_denormalize(tokens, id, r.h, r.w).to_f32(), ref.to_f32()) > 1e-2);
        // And back: _encode_vae_image's normalisation of these latents gives the tokens' values (patchified) to
        // float32 rounding: (x * s + m - m) / s, |x| < 6, about 2 ulp (4.8e-7 each) -> 2e-6.
        Tensor p = models::flux2_patchify_normalize(ref, n);
        REQUIRE(p.shape == Shape{tokens.shape[0], 16, r.h, r.w});
        std::vector<float> back(tokens.numel());  // p as tokens [B, h*w, 16]
        const std::vector<float> pv = p.to_f32();
        for (int64_t b = 0; b < tokens.shape[0]; ++b)
            for (int64_t k = 0; k < 16; ++k)
                for (int64_t i = 0; i < (int64_t)r.h * r.w; ++i)
                    back[(size_t)((b * r.h * r.w + i) * 16 + k)] = pv[(size_t)((b * 16 + k) * r.h * r.w + i)];
        CHECK(max_abs_diff(back, tokens.to_f32()) <= 2e-6);
    }

    // AutoencoderKL has no statistics.
    models::VaeRunner kl(nullptr, models::ModelSource::open(test::data_path("fixtures/vae")), "vae");
    CHECK_FALSE(kl.config().latent_bn);
    CHECK_THROWS_AS(kl.latent_norm(), kiln::Error);
}

TEST_CASE("AutoencoderKLFlux2 decode matches diffusers: CPU reference and Vulkan, f32 and f16 weights",
          "[models][vae][flux2][vulkan]") {
    auto io = SafeTensors::open(test::data_path(kIo));
    const auto tmp = std::filesystem::temp_directory_path() / "kiln_test_models";
    std::filesystem::create_directories(tmp);
    // The folder as it is, and converted to Kiln files (f32, f16): the converter keeps bn.running_mean / _var.
    std::vector<std::pair<std::string, DType>> sources = {{test::data_path(kVae), DType::f32}};
    for (DType dt : {DType::f32, DType::f16}) {
        const std::string file = (tmp / ("flux2_klein_vae_" + std::string(dtype_name(dt)) + ".kiln")).string();
        converter::Options opt;
        opt.dtype = dt;
        opt.quiet = true;
        converter::convert_folder(test::data_path(kVae), file, opt);
        sources.push_back({file, dt});
    }
    for (const auto& [path, dt] : sources) {
        auto src = models::ModelSource::open(path);
        auto ws = src.weights("vae");
        for (const char* s : {"bn.running_mean", "bn.running_var"}) {
            REQUIRE(ws->find(s));
            CHECK(ws->find(s)->dtype == DType::f32);  // 1-D: kept f32 at every --dtype
        }
        for (const Run& r : kRuns) {
            const Tensor ref = io.read(r.decoded);
            // CPU reference on these weights: for f16 files the same f16-rounded numbers the device reads.
            models::VaeRunner cpu(nullptr, src, "vae");
            const Tensor z = models::flux2_unpack_denormalize(io.read(r.tokens), cpu.latent_norm(), r.h, r.w);
            const Tensor cref = cpu.decode(z);
            REQUIRE(cref.shape == ref.shape);
            const double cerr = rel_l2(cref.to_f32(), ref.to_f32());
            for (exec::Mode m : {exec::Mode::full, exec::Mode::regional}) {
                models::VaeOptions vo;
                vo.mode = m;
                models::VaeRunner vk(&test::context(), src, "vae", vo);
                const Tensor dec = vk.decode(io.read(r.unpatchified));
                const double err = rel_l2(dec.to_f32(), ref.to_f32()), derr = rel_l2(dec.to_f32(), cref.to_f32());
                INFO(path << " " << r.decoded << " " << exec::mode_name(m) << ": relative L2 to diffusers " << err
                          << " (CPU reference " << cerr << "), to the CPU reference " << derr);
                // Vulkan vs the CPU reference on the same weights: f32 accumulation in another order (1e-4, as the
                // other VAE parity tests).
                CHECK(derr <= 1e-4);
                if (dt == DType::f32) {
                    // f32 weights and activations: only accumulation order differs from diffusers (~1e-6).
                    CHECK(cerr <= 1e-4);
                    CHECK(err <= 1e-4);
                } else {
                    // f16 weights (1-D tensors stay f32): each rounded by at most 2^-11 relative, rms at most
                    // 2^-11 / sqrt(3) = 2.8e-4; a layer's output moves by about that, relative. The decode path
                    // has 21 weight layers (post_quant_conv, conv_in, 2 mid resnets x 2 convs, 4 attention
                    // projections, 2 up blocks x 2 resnets x 2 convs, one conv_shortcut, one upsampler, conv_out);
                    // independent errors add in quadrature: sqrt(21) x 2.8e-4 = 1.3e-3 -> bound 1.5e-3.
                    // (Observed on lavapipe: 5.3e-4 and 5.7e-4, the CPU reference the same.)
                    CHECK(cerr <= 1.5e-3);
                    CHECK(err <= 1.5e-3);
                }
            }
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("AutoencoderKLFlux2 encodes and decodes as AutoencoderKL does with the same weights", "[vae][flux2]") {
    // diffusers builds the same Encoder / Decoder / quant convs for both classes; the bn is used by the pipelines
    // only. The same config as AutoencoderKL (without the FLUX.2 fields) must give bitwise the same outputs.
    auto src = models::ModelSource::open(test::data_path(kVae));
    nlohmann::json kl_cfg = src.config("vae");
    kl_cfg["_class_name"] = "AutoencoderKL";
    for (const char* k : {"batch_norm_eps", "batch_norm_momentum", "patch_size", "decoder_block_out_channels"})
        kl_cfg.erase(k);
    models::VaeRunner f2(nullptr, src.weights("vae"), src.config("vae"));
    models::VaeRunner kl(nullptr, src.weights("vae"), kl_cfg);
    const Tensor image = test::random_tensor({2, 3, 12, 20}, 7);
    auto e0 = f2.encode(image), e1 = kl.encode(image);
    REQUIRE(e0.at("latent_mean").shape == Shape{2, 4, 6, 10});
    CHECK(e0.at("latent_mean").bytes == e1.at("latent_mean").bytes);
    CHECK(e0.at("latent_logvar").bytes == e1.at("latent_logvar").bytes);
    const Tensor z = test::random_tensor({1, 4, 5, 7}, 8);
    CHECK(f2.decode(z).bytes == kl.decode(z).bytes);
    // _encode_vae_image: the mode, patchified and normalised -> [B, 4C, H/4, W/4] here (vae scale factor 2).
    CHECK(models::flux2_patchify_normalize(e0.at("latent_mean"), f2.latent_norm()).shape == Shape{2, 16, 3, 5});
}
