// The runtime LoRA side path on the Flux fixture's transformer: a LoRA on one single block only still leaves every
// instance of the kind one graph (the regional executor replays it: block recorded once, A/B selected per
// instance), and every mode gives what the merged weights give on the CPU.
#include <catch2/catch.hpp>

#include "models/forward.h"
#include "models/source.h"
#include "runtime/cpu/reference.h"
#include "runtime/exec/regions.h"
#include "tests/models/model_harness.h"
#include "tests/support/test_support.h"

using namespace kiln;

namespace {
// The Flux fixture transformer's inputs (D 32, in 64, joint 48, pooled 32, rope axes 4, 6, 6): 16 image tokens on a
// 4 x 4 grid, 8 text tokens.
std::map<std::string, Tensor> flux_raw_inputs() {
    const int64_t S_img = 16, S_txt = 8;
    std::map<std::string, Tensor> raw = {{"hidden_states", test::random_tensor({1, S_img, 64}, 1)},
                                         {"encoder_hidden_states", test::random_tensor({1, S_txt, 48}, 2)},
                                         {"pooled_projections", test::random_tensor({1, 32}, 3)},
                                         {"timestep", Tensor::from_f32({1}, {0.37f})},
                                         {"guidance", Tensor::from_f32({1}, {3.5f})},
                                         {"img_ids", Tensor(DType::f32, {S_img, 3})},
                                         {"txt_ids", Tensor(DType::f32, {S_txt, 3})}};
    for (int64_t i = 0; i < S_img; ++i)
        raw["img_ids"].data<float>()[i * 3 + 1] = (float)(i / 4),
                                             raw["img_ids"].data<float>()[i * 3 + 2] = (float)(i % 4);
    return raw;
}
// The merged weights at `lo`'s scales on the CPU: the oracle.
Tensor merged_on_cpu(models::ModelSource& src, models::LoraOptions lo, const std::map<std::string, Tensor>& raw) {
    lo.apply = "merge";
    auto ws = src.weights("transformer");
    auto merged = models::with_loras(src.weights("transformer"), models::load_loras(*ws, "Flux", lo), nullptr);
    ir::Graph gm;
    models::Builder bm(gm, *merged);
    auto in_m = models::build_component(bm, src.class_of("transformer"), src.config("transformer"), raw);
    return cpu::run(gm, in_m, models::cpu_weights(*merged, bm.constants()))["sample"];
}
}  // namespace

TEST_CASE("LoRA runtime side path: blocks replay, every mode equals the merged weights", "[models][lora][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    const std::string cls = src.class_of("transformer");
    const auto& cfg = src.config("transformer");
    const auto raw = flux_raw_inputs();
    // peft targets single_transformer_blocks.1 and not .0; peft_b single block 0 and the embedders.
    models::LoraOptions lo;
    lo.files = {{test::data_path("fixtures/flux_lora/lora_peft.safetensors"), 0.7},
                {test::data_path("fixtures/flux_lora/lora_peft_b.safetensors"), -0.4}};
    auto ws = src.weights("transformer");

    const Tensor ref = merged_on_cpu(src, lo, raw);

    lo.apply = "runtime";
    ir::Graph g;
    models::Builder b(g, *ws);
    b.set_loras(models::load_loras(*ws, "Flux", lo));
    auto in = models::build_component(b, cls, cfg, raw);
    const auto kinds = exec::analyze_regions(g);  // throws if an instance's graph differed
    bool single = false;
    for (const auto& k : kinds)
        single = single || (k.kind.find("single") != std::string::npos && k.regions.size() == 2);
    CHECK(single);
    CHECK(b.constants().count("single_transformer_blocks.0.proj_mlp.lora_A"));  // zeros: peft has no block-0 proj_mlp
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional}) {
        auto out = exec::run_graph(test::context(), g, b.weight_fn(), in, m);
        const double err = rel_l2(out["sample"].to_f32(), ref.to_f32());
        INFO(exec::mode_name(m) << " relative L2 " << err);
        // f32: W x + B (s (A x)) against (W + s B A) x, one rounding of W + s B A per element and summation order.
        CHECK(err <= 1e-5);
    }
    CHECK(vk::Context::validation_errors() == 0);
}

// The user's scales are device data: a resident executor takes new ones through set_input (a few floats), records
// nothing again, and gives bit for bit what an executor built at those scales gives (same graph, same A/B bytes,
// same scale values: the same dispatches on the same buffers).
TEST_CASE("LoRA runtime scales change without re-recording", "[models][lora][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    const std::string cls = src.class_of("transformer");
    const auto& cfg = src.config("transformer");
    const auto raw = flux_raw_inputs();
    models::LoraOptions lo;
    lo.apply = "runtime";
    lo.files = {{test::data_path("fixtures/flux_lora/lora_peft.safetensors"), 0.7},
                {test::data_path("fixtures/flux_lora/lora_peft_b.safetensors"), -0.4}};
    auto ws = src.weights("transformer");
    ir::Graph g;
    models::Builder b(g, *ws);
    b.set_loras(models::load_loras(*ws, "Flux", lo));
    const auto in = models::build_component(b, cls, cfg, raw);
    size_t scale_inputs = 0;
    for (const auto& [name, t] : in) scale_inputs += name.rfind("lora_scales.", 0) == 0;
    CHECK(scale_inputs >= 1);
    exec::Executor x(test::context(), g, b.weight_fn(), exec::Mode::regional);
    for (const auto& [name, t] : in) x.set_input(name, t);
    x.run();
    const Tensor at_s1 = x.output("sample");
    const int recorded = x.counters().command_buffers_recorded;

    const std::vector<double> s2 = {-0.25, 1.3};
    for (const auto& [name, t] : b.lora_scale_values(s2)) x.set_input(name, t);
    x.run();
    const Tensor at_s2 = x.output("sample");
    CHECK(x.counters().command_buffers_recorded == recorded);
    CHECK_THROWS_WITH(b.lora_scale_values({1.0}), Catch::Contains("1 given for 2 LoRA files"));

    lo.files[0].scale = s2[0], lo.files[1].scale = s2[1];
    ir::Graph g2;
    models::Builder b2(g2, *ws);
    b2.set_loras(models::load_loras(*ws, "Flux", lo));
    const auto in2 = models::build_component(b2, cls, cfg, raw);
    const Tensor fresh = exec::run_graph(test::context(), g2, b2.weight_fn(), in2, exec::Mode::regional)["sample"];
    REQUIRE(fresh.bytes.size() == at_s2.bytes.size());
    CHECK(fresh.bytes == at_s2.bytes);
    CHECK(at_s1.bytes != at_s2.bytes);
    // And both scales against the merged weights (the tolerance of the test above).
    CHECK(rel_l2(at_s2.to_f32(), merged_on_cpu(src, lo, raw).to_f32()) <= 1e-5);
    CHECK(vk::Context::validation_errors() == 0);
}
