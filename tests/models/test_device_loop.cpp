// The denoising loop on the device (models/loop/step_program.h) against the host loop: bitwise the same
// latents, per-step intermediates and images for every scheduler, on the DiT fixture and the text-to-image
// fixtures. The device repeats the host's float operations in the same order (`precise`, no contraction) and
// divides with correct rounding (shaders/loop.glsl), so there is no tolerance to state.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "models/loop/device_loop.h"
#include "models/pipelines/t2i_pipeline.h"
#include "runtime/core/safetensors.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype == b.dtype && a.shape == b.shape && a.bytes.size() == b.bytes.size() &&
           std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

// Every intermediate and the image of the two runs, bit for bit; returns how many tensors were compared.
int check_same(const models::GenerateResult& host, const models::GenerateResult& dev) {
    CHECK(!host.device_loop);
    CHECK(dev.device_loop);
    CHECK(same_bits(host.image, dev.image));
    std::map<std::string, Tensor> d(dev.intermediates.begin(), dev.intermediates.end());
    int n = 1;
    for (auto& [name, t] : host.intermediates) {
        INFO(name);
        REQUIRE(d.count(name));
        CHECK(same_bits(t, d[name]));
        ++n;
    }
    CHECK(host.intermediates.size() == dev.intermediates.size());
    return n;
}

models::GenerateOptions dit_options(const SafeTensors& io) {
    models::GenerateOptions opt;
    Tensor labels = io.read("class_labels").astype(DType::i32);
    opt.labels.assign(labels.data<int32_t>(), labels.data<int32_t>() + labels.numel());
    opt.steps = 4;
    opt.guidance = 4.0;
    opt.latents_init = io.read("latents_init");
    return opt;
}

models::T2IOptions t2i_options(const std::string& fixture, const SafeTensors& io) {
    std::ifstream f(test::data_path("fixtures/" + fixture + "/io.json"));
    REQUIRE(f);
    const auto s = nlohmann::json::parse(f)["call"]["scalars"];
    models::T2IOptions opt;
    opt.text = models::TextConditioning::read(io);
    opt.steps = s["num_inference_steps"].get<int>();
    opt.guidance = s["guidance_scale"].get<double>();
    opt.height = s["height"].get<int>();
    opt.width = s["width"].get<int>();
    opt.resolution_binning = false;
    opt.latents_init = io.read("latents_init");
    return opt;
}
}  // namespace

TEST_CASE("device loop: DiT, every scheduler, bitwise the host loop", "[models][pipeline][loop][vulkan]") {
    // ddim (clip, epsilon), dpm (DPM-Solver++ 2M: history on the device), euler (scale_model_input divides, in
    // place as DiTPipeline does), flow match; guidance 4 (learned sigma: guidance on the first C channels) and 1.
    auto [sched, guidance] = GENERATE(
        table<const char*, double>({{"ddim", 4.0}, {"dpm", 4.0}, {"euler", 4.0}, {"flowmatch", 4.0}, {"dpm", 1.0}}));
    auto src = models::ModelSource::open(test::data_path("fixtures/dit_pipeline_ddim"));
    auto io = SafeTensors::open(test::data_path("fixtures/dit_pipeline_ddim/io.safetensors"));
    auto opt = dit_options(io);
    opt.scheduler = sched;
    opt.guidance = guidance;
    opt.keep_intermediates = true;  // per step: the device's latents read back after each step
    INFO(sched << " guidance " << guidance);
    opt.host_loop = true;
    auto host = models::generate_dit(test::context(), src, opt);
    opt.host_loop = false;
    auto dev = models::generate_dit(test::context(), src, opt);
    CHECK(check_same(host, dev) >= 10);
    // Without intermediates the steps run two in flight: the same image.
    opt.keep_intermediates = false;
    auto fast = models::generate_dit(test::context(), src, opt);
    CHECK(fast.device_loop);
    CHECK(same_bits(host.image, fast.image));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("device loop: text-to-image fixtures bitwise the host loop", "[models][pipeline][t2i][loop][vulkan]") {
    // pixart: DPM-Solver++ 2M, learned sigma, CFG; sd3: FlowMatch shift 3, CFG, shift_factor; flux: custom sigmas,
    // dynamic shift, t / 1000, packed latents, no CFG (2 steps: its fixture transformer is the slowest).
    auto [fixture, steps] =
        GENERATE(table<const char*, int>({{"pixart_pipeline", 0}, {"sd3_pipeline", 0}, {"flux_pipeline", 2}}));
    auto src = models::ModelSource::open(test::data_path(std::string("fixtures/") + fixture));
    auto io = SafeTensors::open(test::data_path(std::string("fixtures/") + fixture + "/io.safetensors"));
    auto opt = t2i_options(fixture, io);
    if (steps) opt.steps = steps;
    opt.keep_intermediates = steps == 0;
    INFO(fixture);
    opt.host_loop = true;
    auto host = models::generate_t2i(test::context(), src, opt);
    opt.host_loop = false;
    auto dev = models::generate_t2i(test::context(), src, opt);
    CHECK(check_same(host, dev) >= (steps ? 1 : 10));
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("device loop: progress per step, cancel at a step boundary, KILN_DEVICE_LOOP=0",
          "[models][pipeline][loop][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/dit_pipeline_dpmpp"));
    auto io = SafeTensors::open(test::data_path("fixtures/dit_pipeline_dpmpp/io.safetensors"));
    auto opt = dit_options(io);
    struct Cancelled {};
    std::vector<int> seen;
    opt.progress = [&](int step, int total) {
        CHECK(total == 4);
        seen.push_back(step);
        if (step == 2) throw Cancelled{};
    };
    CHECK_THROWS_AS(models::generate_dit(test::context(), src, opt), Cancelled);
    CHECK(seen == std::vector<int>{1, 2});
    // Everything was freed and the context is usable: the full run reports every step in order.
    seen.clear();
    uint64_t bytes = 0;  // device memory during the loop: the device loop adds no block to the host loop's
    opt.progress = [&](int step, int) {
        seen.push_back(step);
        bytes = std::max(bytes, vk::Allocator::process_bytes());
    };
    auto r = models::generate_dit(test::context(), src, opt);
    CHECK(r.device_loop);
    CHECK(seen == std::vector<int>{1, 2, 3, 4});
    const uint64_t device_bytes = bytes;

    bytes = 0;
    ::setenv("KILN_DEVICE_LOOP", "0", 1);
    auto h = models::generate_dit(test::context(), src, opt);
    ::unsetenv("KILN_DEVICE_LOOP");
    CHECK(!h.device_loop);
    CHECK(same_bits(h.image, r.image));
    CHECK(device_bytes == bytes);
    // Eager mode records no run to replay: the host loop.
    opt.mode = exec::Mode::eager;
    CHECK(!models::generate_dit(test::context(), src, opt).device_loop);
    CHECK(vk::Context::validation_errors() == 0);
}

TEST_CASE("device loop: the step table is the scheduler's coefficients as floats", "[models][loop]") {
    auto sched = sched::make_scheduler(
        sched::load_scheduler_config(test::data_path("fixtures/sched_dpmpp2m/scheduler_config.json")));
    sched->set_timesteps(6);
    auto ref = sched::make_scheduler(
        sched::load_scheduler_config(test::data_path("fixtures/sched_dpmpp2m/scheduler_config.json")));
    ref->set_timesteps(6);
    const auto table = models::plan_loop_steps(*sched, [&](int i) { return (float)sched->timesteps()[(size_t)i]; });
    REQUIRE(table.size() == 6);
    for (int i = 0; i < 6; ++i) {
        const auto c = ref->plan_step(i);
        const auto& r = table[(size_t)i];
        CHECK(r.prev_sample == (float)c.prev_sample);
        CHECK(r.prev_x0 == (float)c.prev_x0);
        CHECK(r.prev_h0 == (float)c.prev_history[0]);
        CHECK(r.history_used == (uint32_t)c.history_used);
        CHECK(r.keep_x0 == 1u);
        CHECK(r.divisor == 1.0f);
    }
    CHECK(table[0].history_used == 0);  // the first step has no history; 2M uses one entry after
    CHECK(table[1].history_used == 1);
}
