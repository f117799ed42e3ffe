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

TEST_CASE("LoRA runtime side path: blocks replay, every mode equals the merged weights", "[models][lora][vulkan]") {
    auto src = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    const std::string cls = src.class_of("transformer");
    const auto& cfg = src.config("transformer");  // D 32, in 64, joint 48, pooled 32, rope axes 4, 6, 6
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
    // peft targets single_transformer_blocks.1 and not .0; peft_b single block 0 and the embedders.
    models::LoraOptions lo;
    lo.files = {{test::data_path("fixtures/flux_lora/lora_peft.safetensors"), 0.7},
                {test::data_path("fixtures/flux_lora/lora_peft_b.safetensors"), -0.4}};
    auto ws = src.weights("transformer");

    // The oracle: the merged weights on the CPU.
    lo.apply = "merge";
    auto merged = models::with_loras(src.weights("transformer"), models::load_loras(*ws, "Flux", lo), nullptr);
    ir::Graph gm;
    models::Builder bm(gm, *merged);
    auto in_m = models::build_component(bm, cls, cfg, raw);
    auto ref = cpu::run(gm, in_m, models::cpu_weights(*merged, bm.constants()));

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
        const double err = rel_l2(out["sample"].to_f32(), ref["sample"].to_f32());
        INFO(exec::mode_name(m) << " relative L2 " << err);
        // f32: W x + B (A x) against (W + B A) x, one rounding of W + B A per element and summation order.
        CHECK(err <= 1e-5);
    }
    CHECK(vk::Context::validation_errors() == 0);
}
