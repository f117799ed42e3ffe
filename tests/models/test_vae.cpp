// AutoencoderKL parity with diffusers (fixture `vae`, f32 weights) on the CPU reference.
#include <catch2/catch.hpp>
#include <algorithm>

#include "models/vae.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/reference.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("VAE decode and encode match diffusers on the CPU reference", "[models][vae]") {
    nlohmann::json cfg;
    auto ws = models::open_diffusers_component(test::data_path("fixtures/vae"), &cfg);
    auto io = SafeTensors::open(test::data_path("fixtures/vae/io.safetensors"));
    auto c = models::VaeConfig::from_json(cfg);
    {
        Tensor z = io.read("latents");
        ir::Graph g;
        models::Builder b(g, *ws);
        models::build_vae_decoder(b, c, (int)z.shape[0], (int)z.shape[2], (int)z.shape[3]);
        auto out = cpu::run(g, {{"latents", z}}, models::cpu_weights(*ws, b.constants()));
        double err = rel_l2(out["decoded"].to_f32(), io.read("decoded").to_f32());
        INFO("decoded relative L2 " << err);
        CHECK(err <= 1e-4);  // f32 throughout; f64 accumulation in the reference
    }
    {
        Tensor img = io.read("image");
        ir::Graph g;
        models::Builder b(g, *ws);
        models::build_vae_encoder(b, c, (int)img.shape[0], (int)img.shape[2], (int)img.shape[3]);
        auto out = cpu::run(g, {{"image", img}}, models::cpu_weights(*ws, b.constants()));
        double e1 = rel_l2(out["latent_mean"].to_f32(), io.read("latent_mean").to_f32());
        auto lv = out["latent_logvar_raw"].to_f32();
        for (auto& v : lv) v = std::clamp(v, -30.f, 20.f);
        double e2 = rel_l2(lv, io.read("latent_logvar").to_f32());
        INFO("mean " << e1 << " logvar " << e2);
        CHECK(e1 <= 1e-4);
        CHECK(e2 <= 1e-4);
    }
}
