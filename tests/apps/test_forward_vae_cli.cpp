// `kiln forward --component vae --tiled / --sliced`, run as the binary: its outputs are VaeRunner's (the CPU
// reference, --cpu, so the comparison is bitwise), and the flags refuse what they do not apply to.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "models/pipelines/dit_pipeline.h"
#include "models/vae/vae_runner.h"
#include "runtime/core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/support/test_support.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
int kiln_forward(const std::string& args) {
    const std::string cmd = kiln::test::cli_binary("kiln") + " forward " + args + " 2>/dev/null";
    int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

TEST_CASE("kiln forward --tiled --sliced runs the VAE as VaeRunner", "[apps][vae]") {
    const fs::path dir = fs::temp_directory_path() / ("kiln_fwd_vae_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string model = test::data_path("fixtures/vae"), in = (dir / "in.safetensors").string(),
                      out = (dir / "out.safetensors").string();
    // Two 10 x 7 latents: 12 tiles of 4 latents each (tile 8 px), decoded one batch element at a time.
    Tensor z = models::seeded_normal({2, 4, 10, 7}, 11), x = models::seeded_normal({2, 3, 20, 14}, 12);
    write_safetensors(in, {{"latents", z}, {"image", x}});
    REQUIRE(kiln_forward("--model " + model + " --component vae --cpu --tiled --tile-size 8 --sliced --inputs " + in +
                         " --output " + out) == 0);
    models::VaeRunner vae(nullptr, models::ModelSource::open(model), "vae", {true, true, 8});
    auto st = SafeTensors::open(out);
    auto enc = vae.encode(x);
    CHECK(st.read("decoded").to_f32() == vae.decode(z).to_f32());
    CHECK(st.read("latent_mean").to_f32() == enc.at("latent_mean").to_f32());
    CHECK(st.read("latent_logvar").to_f32() == enc.at("latent_logvar").to_f32());
    CHECK(vae.forwards() == 48);  // 2 slices x 12 tiles, decode and encode
    // --tile-size without --tiled, and --tiled on a transformer: errors.
    CHECK(kiln_forward("--model " + model + " --cpu --tile-size 8 --inputs " + in + " --output " + out) == 1);
    CHECK(kiln_forward("--model " + test::data_path("fixtures/dit") + " --cpu --tiled --inputs " +
                       test::data_path("fixtures/dit/io.safetensors") + " --output " + out) == 1);
    fs::remove_all(dir);
}
