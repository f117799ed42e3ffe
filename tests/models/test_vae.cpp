// AutoencoderKL parity with diffusers (fixture `vae`, f32 weights): CPU reference and Vulkan.
#include <catch2/catch.hpp>

#include "models/core/forward.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

TEST_CASE("VAE decode and encode match diffusers", "[models][vae][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/vae"));
    auto io = SafeTensors::open(test::data_path("fixtures/vae/io.safetensors"));
    for (vk::Context* ctx : {(vk::Context*)nullptr, &test::context()}) {
        auto dec = models::forward_component(ctx, src, "vae", {{"latents", io.read("latents")}}, exec::Mode::full);
        auto enc = models::forward_component(ctx, src, "vae", {{"image", io.read("image")}}, exec::Mode::full);
        // f32 weights and activations: only accumulation order differs from diffusers (~1e-6 relative).
        double e0 = rel_l2(dec["decoded"].to_f32(), io.read("decoded").to_f32());
        double e1 = rel_l2(enc["latent_mean"].to_f32(), io.read("latent_mean").to_f32());
        double e2 = rel_l2(enc["latent_logvar"].to_f32(), io.read("latent_logvar").to_f32());
        INFO((ctx ? "vulkan" : "cpu") << ": decoded " << e0 << ", mean " << e1 << ", logvar " << e2);
        CHECK(e0 <= 1e-4);
        CHECK(e1 <= 1e-4);
        CHECK(e2 <= 1e-4);
    }
    // Both inputs at once (as the fixture's io.safetensors holds them): one graph, all three outputs.
    auto both = models::forward_component(&test::context(), src, "vae",
                                          {{"latents", io.read("latents")}, {"image", io.read("image")}});
    for (const char* name : {"decoded", "latent_mean", "latent_logvar"}) {
        REQUIRE(both.count(name));
        CHECK(rel_l2(both[name].to_f32(), io.read(name).to_f32()) <= 1e-4);
    }
    CHECK(vk::Context::validation_errors() == 0);
}
