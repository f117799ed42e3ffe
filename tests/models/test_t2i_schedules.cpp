// diffusers' `sigmas` argument of the flow-matching pipelines (SD3, Flux): the caller's schedule goes through
// FlowMatchEulerDiscreteScheduler.set_timesteps(sigmas=..., mu=...), shifted as the scheduler shifts its own.
// PixArt's `timesteps` (DPM-Solver, Euler) and `sigmas` (Euler): set_timesteps(timesteps= / sigmas=); and its
// `eta` (DDIM's per-step noise from the seed's generator).
#include <catch2/catch.hpp>
#include <cmath>

#include "models/pipelines/t2i_pipeline.h"
#include "models/schedulers/scheduler.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/torch_rng.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// The fixture's own encode_prompt outputs and initial latents: no text encoder runs.
models::T2IOptions fixture_options(const std::string& fixture) {
    auto io = SafeTensors::open(test::data_path("fixtures/" + fixture + "/io.safetensors"));
    models::T2IOptions opt;
    opt.text = models::TextConditioning::read(io);
    opt.latents_init = io.read("latents_init");
    opt.height = opt.width = 32;
    opt.resolution_binning = false;
    opt.keep_intermediates = true;
    return opt;
}

std::map<std::string, Tensor> run(const models::ModelSource& src, const models::T2IOptions& opt) {
    auto r = models::generate_t2i(test::context(), src, opt);
    return std::map<std::string, Tensor>(r.intermediates.begin(), r.intermediates.end());
}
}  // namespace

TEST_CASE("custom sigmas: SD3 shifts them as its scheduler shifts its own; Flux's default is linspace(1, 1/N, N)",
          "[models][pipeline][t2i][vulkan]") {
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    auto opt = fixture_options("sd3_pipeline");
    opt.sigmas = {1.0, 0.5};
    CHECK(models::plan_t2i(sd3, opt).steps == 2);
    auto got = run(sd3, opt);
    // shift 3 (the fixture's scheduler_config): 3s / (1 + 2s) maps 0.5 to 0.75 exactly; timesteps are sigma * 1000.
    CHECK(got.at("sigmas").to_f32() == std::vector<float>{1.f, 0.75f, 0.f});
    CHECK(got.at("timesteps").to_f32() == std::vector<float>{1000.f, 750.f});
    CHECK(got.count("step1_latents"));
    CHECK(!got.count("step2_latents"));

    // Flux: its own schedule given as sigmas is the default run, bit for bit (dynamic shifting, mu from the size).
    auto flux = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    auto f = fixture_options("flux_pipeline");
    f.steps = 3;
    const auto plain = run(flux, f);
    f.steps.reset();
    f.sigmas = {1.0, 1.0 + (1.0 / 3 - 1.0) / 2, 1.0 / 3};  // np.linspace(1, 1/3, 3)
    const auto given = run(flux, f);
    CHECK(given.at("sigmas").bytes == plain.at("sigmas").bytes);
    CHECK(given.at("image").bytes == plain.at("image").bytes);
    f.sigmas = {1.0, 0.5, 0.25};
    CHECK(run(flux, f).at("image").bytes != plain.at("image").bytes);
}

TEST_CASE("custom sigmas that do not fit are named before any work", "[models][t2i]") {
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    models::T2IOptions opt;
    opt.sigmas = {1.0, 0.5};
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt),
                      Catch::Contains("DPMSolverMultistepScheduler: custom sigmas are not supported"));
    opt.steps = 3;
    CHECK_THROWS_WITH(models::plan_t2i(sd3, opt), Catch::Contains("steps 3 but 2 sigmas"));
    opt.steps = 2;
    CHECK(models::plan_t2i(sd3, opt).steps == 2);
    opt.sigmas = {1.0, -0.1};
    CHECK_THROWS_WITH(models::plan_t2i(sd3, opt), Catch::Contains("sigmas[1] is -0.1"));
}

TEST_CASE(
    "PixArt custom timesteps: its own schedule given back is the default run; others run on the device as on "
    "the host",
    "[models][pipeline][t2i][vulkan]") {
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    auto opt = fixture_options("pixart_pipeline");
    opt.steps = 4;
    const auto plain = run(pixart, opt);
    const auto ts = plain.at("timesteps").to_f32();
    REQUIRE(ts.size() == 4);
    opt.steps.reset();
    opt.timesteps.assign(ts.begin(), ts.end());
    const auto given = run(pixart, opt);
    CHECK(given.at("sigmas").bytes == plain.at("sigmas").bytes);
    CHECK(given.at("image").bytes == plain.at("image").bytes);

    // Three steps of the caller's: the transformer sees them, the device loop and the host loop agree bitwise.
    opt.timesteps = {999, 600, 250};
    CHECK(models::plan_t2i(pixart, opt).steps == 3);
    const auto custom = run(pixart, opt);
    CHECK(custom.at("timesteps").to_f32() == std::vector<float>{999.f, 600.f, 250.f});
    CHECK(custom.count("step2_latents"));
    CHECK(!custom.count("step3_latents"));
    // The first step is at t = 999 in both: same transformer output; then the next sigma differs.
    CHECK(custom.at("step0_transformer_out").bytes == plain.at("step0_transformer_out").bytes);
    CHECK(custom.at("step0_latents").bytes != plain.at("step0_latents").bytes);
    auto host = opt;
    host.host_loop = true;
    const auto on_host = run(pixart, host);
    CHECK(on_host.at("step2_latents").bytes == custom.at("step2_latents").bytes);
    CHECK(on_host.at("image").bytes == custom.at("image").bytes);

    // Euler (--scheduler euler) takes fractional timesteps and whole sigma schedules.
    opt.scheduler = "euler";
    opt.timesteps = {998.5, 400.25};
    CHECK(run(pixart, opt).at("timesteps").to_f32() == std::vector<float>{998.5f, 400.25f});
    opt.timesteps.clear();
    opt.sigmas = {80.0, 5.0, 0.0};
    CHECK(models::plan_t2i(pixart, opt).steps == 2);
    const auto euler = run(pixart, opt);
    CHECK(euler.at("sigmas").to_f32() == std::vector<float>{80.f, 5.f, 0.f});
    host = opt;
    host.host_loop = true;
    CHECK(run(pixart, host).at("image").bytes == euler.at("image").bytes);
}

TEST_CASE("custom timesteps that do not fit are named before any work", "[models][t2i]") {
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    models::T2IOptions opt;
    opt.timesteps = {999, 500};
    CHECK_THROWS_WITH(models::plan_t2i(sd3, opt), Catch::Contains("custom timesteps apply to PixArt"));
    CHECK(models::plan_t2i(pixart, opt).steps == 2);
    opt.steps = 3;
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt), Catch::Contains("steps 3 but 2 timesteps"));
    opt.steps.reset();
    opt.sigmas = {1.0, 0.0};
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt), Catch::Contains("not both"));
    opt.sigmas.clear();
    opt.scheduler = "ddim";
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt),
                      Catch::Contains("PixArtSigmaPipeline: DDIMScheduler: custom timesteps are not supported"));
    opt.scheduler.clear();
    opt.timesteps = {999, 999};
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt), Catch::Contains("decrease strictly"));
    opt.timesteps.clear();
    opt.scheduler = "euler";
    opt.sigmas = {10.0, 1.0, 0.0};
    opt.steps = 3;
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt), Catch::Contains("steps 3 but 3 sigmas, which make 2 steps"));
}

TEST_CASE(
    "PixArt eta with DDIM: each step's noise from the seed's generator after the latents, on the device as on "
    "the host",
    "[models][pipeline][t2i][vulkan]") {
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    auto opt = fixture_options("pixart_pipeline");
    opt.scheduler = "ddim";
    opt.steps = 3;
    opt.seed = 7;
    const auto deterministic = run(pixart, opt);
    opt.eta = 0;
    CHECK(run(pixart, opt).at("image").bytes == deterministic.at("image").bytes);
    CHECK(!deterministic.count("step0_variance_noise"));

    // Given latents: diffusers' generator draws nothing for them, so step 0's noise is the seed's first draw.
    opt.eta = 1;
    const auto given = run(pixart, opt);
    const Tensor lat = given.at("latents_init");
    const int64_t n = lat.numel();
    std::vector<float> draw((size_t)n);
    TorchCpuGenerator(7).randn(draw.data(), n);
    CHECK(given.at("step0_variance_noise").to_f32() == draw);
    CHECK(given.at("image").bytes != deterministic.at("image").bytes);
    // Step 0 is the scheduler's step with that noise: recomputed here from the dumped model output, bit for bit.
    auto s = sched::make_scheduler(
        sched::load_scheduler_config(test::data_path("fixtures/pixart_pipeline/scheduler/scheduler_config.json")),
        "ddim");
    s->set_eta(1);
    s->set_timesteps(3);
    const auto v0 = given.at("step0_variance_noise").to_f32();
    CHECK(s->step(given.at("step0_noise_pred").to_f32(), 0, lat.to_f32(), &v0) == given.at("step0_latents").to_f32());

    // Seeded latents: the latents first, then each step's noise, from one generator.
    opt.latents_init.reset();
    const auto seeded = run(pixart, opt);
    TorchCpuGenerator gen(7);
    gen.randn(draw.data(), n);
    CHECK(seeded.at("latents_init").to_f32() == draw);
    for (int i = 0; i < 3; ++i) {
        gen.randn(draw.data(), n);
        CHECK(seeded.at("step" + std::to_string(i) + "_variance_noise").to_f32() == draw);
    }

    // The device loop (no intermediates: steps in flight) and the host loop agree bitwise.
    opt.keep_intermediates = false;
    const auto device = models::generate_t2i(test::context(), pixart, opt);
    CHECK(device.device_loop);
    opt.host_loop = true;
    const auto host = models::generate_t2i(test::context(), pixart, opt);
    CHECK(!host.device_loop);
    CHECK(device.image.bytes == host.image.bytes);
    CHECK(device.image.bytes != deterministic.at("image").bytes);
}

TEST_CASE("eta where it does not apply", "[models][t2i]") {
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    models::T2IOptions opt;
    opt.eta = 1;
    CHECK_THROWS_WITH(models::plan_t2i(sd3, opt), Catch::Contains("eta applies to the PixArt pipelines"));
    // DPM-Solver (PixArt's own scheduler) ignores it, as diffusers does, and says so.
    const auto p = models::plan_t2i(pixart, opt);
    CHECK(p.eta == 0);
    REQUIRE(p.warnings.size() == 1);
    CHECK(p.warnings[0].find("DPMSolverMultistepScheduler ignores it") != std::string::npos);
    opt.scheduler = "ddim";
    CHECK(models::plan_t2i(pixart, opt).eta == 1);
    opt.eta = -1;
    CHECK_THROWS_WITH(models::plan_t2i(pixart, opt), Catch::Contains("eta is -1"));
}

TEST_CASE("plan_t2i and generate_dit refuse NaN and infinite options, whichever family", "[models][t2i][vulkan]") {
    // The C++ options as `kiln generate --profile` passes them (no C API in between): the same ranges.
    for (const char* fx : {"pixart_pipeline", "sd3_pipeline", "flux_pipeline", "sana_pipeline"}) {
        auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + fx));
        INFO(fx);
        models::T2IOptions opt;
        opt.guidance = std::nan("");
        CHECK_THROWS_WITH(models::plan_t2i(src, opt), Catch::Contains("guidance is nan: not a finite number"));
        opt.guidance = HUGE_VAL;
        CHECK_THROWS_WITH(models::plan_t2i(src, opt), Catch::Contains("guidance is inf: not a finite number"));
        opt.guidance = -1;
        CHECK_THROWS_WITH(models::plan_t2i(src, opt), Catch::Contains("guidance is -1: outside [0, inf)"));
        opt.guidance.reset();
        opt.eta = std::nan("");
        CHECK_THROWS_WITH(models::plan_t2i(src, opt), Catch::Contains("eta is nan"));
    }
    auto dit = models::ModelSource::open(test::data_path("fixtures/dit_pipeline_ddim"));
    models::GenerateOptions g;
    g.labels = {1};
    g.guidance = std::nan("");
    CHECK_THROWS_WITH(models::generate_dit(test::context(), dit, g), Catch::Contains("guidance is nan"));
}

TEST_CASE("PixArt with DPM-Solver++ SDE through scheduler overrides: float32 step noise after the latents",
          "[models][pipeline][t2i][vulkan]") {
    // diffusers: DPMSolverMultistepScheduler.from_config(config, algorithm_type="sde-dpmsolver++"); its step draws
    // randn_tensor(model_output.shape, generator, dtype=torch.float32), whatever the pipeline's dtype.
    auto pixart = models::ModelSource::open(test::data_path("fixtures/pixart_pipeline"));
    auto opt = fixture_options("pixart_pipeline");
    opt.latents_init.reset();
    opt.steps = 3;
    opt.seed = 5;
    opt.noise_dtype = DType::f16;
    opt.scheduler_config = {{"algorithm_type", "sde-dpmsolver++"}};
    const auto got = run(pixart, opt);
    const int64_t n = got.at("latents_init").numel();
    std::vector<float> draw((size_t)n);
    TorchCpuGenerator gen(5);
    gen.randn(draw.data(), n, DType::f16);
    CHECK(got.at("latents_init").to_f32() == draw);
    for (int i = 0; i < 3; ++i) {
        gen.randn(draw.data(), n, DType::f32);
        CHECK(got.at("step" + std::to_string(i) + "_variance_noise").to_f32() == draw);
    }
    opt.keep_intermediates = false;
    const auto device = models::generate_t2i(test::context(), pixart, opt);
    opt.host_loop = true;
    const auto host = models::generate_t2i(test::context(), pixart, opt);
    CHECK(device.device_loop);
    CHECK(device.image.bytes == host.image.bytes);
    opt.scheduler_config = {{"algorithm_typ", "sde-dpmsolver++"}};
    CHECK_THROWS_WITH(models::generate_t2i(test::context(), pixart, opt),
                      Catch::Contains("'algorithm_typ' is not a field"));
}

TEST_CASE("scheduler overrides reach the pipeline's own reads: SD3 with dynamic shifting computes mu",
          "[models][t2i]") {
    // diffusers' SD3 pipeline reads use_dynamic_shifting and the shift line from scheduler.config, the overridden one.
    auto sd3 = models::ModelSource::open(test::data_path("fixtures/sd3_pipeline"));
    auto opt = fixture_options("sd3_pipeline");
    opt.steps = 2;
    opt.scheduler_config = {{"use_dynamic_shifting", true}, {"base_shift", 0.25}};
    const auto got = run(sd3, opt);
    nlohmann::json cfg =
        sched::load_scheduler_config(test::data_path("fixtures/sd3_pipeline/scheduler/scheduler_config.json"));
    cfg["use_dynamic_shifting"] = true;
    auto s = sched::make_scheduler(cfg);
    const int patches = 16 * 16 / 4;  // 32 px / VAE factor 2 = 16 latent px, patch 2; max_shift 1.15 from the config
    s->set_timesteps(2, sched::calculate_shift(patches, 256, 4096, 0.25, 1.15));
    CHECK(got.at("sigmas").to_f32() == std::vector<float>(s->sigmas().begin(), s->sigmas().end()));
}

TEST_CASE("SD3 and Flux with stochastic_sampling: float32 noise per step in the latents' own layout",
          "[models][pipeline][t2i][vulkan]") {
    // diffusers' flow-matching step draws randn_tensor(sample.shape) on the upcast sample: float32, in the layout
    // the pipeline steps (Flux: packed [B, S, 4C]). The SD3 and Flux pipelines pass no generator, so it is torch's
    // default one, which torch.manual_seed(seed) seeded: the stream after the latents.
    for (const char* fixture : {"sd3_pipeline", "flux_pipeline"}) {
        INFO(fixture);
        auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + fixture));
        auto opt = fixture_options(fixture);
        opt.latents_init.reset();
        opt.steps = 2;
        opt.seed = 3;
        opt.noise_dtype = DType::bf16;
        opt.scheduler_config = {{"stochastic_sampling", true}};
        const auto got = run(src, opt);
        const int64_t n = got.at("latents_init").numel();
        std::vector<float> draw((size_t)n);
        TorchCpuGenerator gen(3);
        gen.randn(draw.data(), n, DType::bf16);
        CHECK(got.at("latents_init").to_f32() == draw);
        for (int i = 0; i < 2; ++i) {
            gen.randn(draw.data(), n, DType::f32);
            const Tensor v = got.at("step" + std::to_string(i) + "_variance_noise");
            CHECK(v.shape == got.at("step" + std::to_string(i) + "_latents").shape);  // Flux: packed
            CHECK(v.to_f32() == draw);
        }
        opt.keep_intermediates = false;
        const auto device = models::generate_t2i(test::context(), src, opt);
        opt.host_loop = true;
        const auto host = models::generate_t2i(test::context(), src, opt);
        CHECK(device.device_loop);
        CHECK(device.image.bytes == host.image.bytes);
    }
}
