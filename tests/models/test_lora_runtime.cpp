// The runtime LoRA side path on the Flux fixture's transformer: a LoRA on one single block only still leaves every
// instance of the kind one graph (the regional executor replays it: block recorded once, A/B selected per
// instance), and every mode gives what the merged weights give on the CPU. Text-encoder LoRAs on CLIP-L likewise,
// and the resident encoders keyed on them.
#include <catch2/catch.hpp>

#include "models/core/forward.h"
#include "models/core/source.h"
#include "models/pipelines/text_encode.h"
#include "runtime/core/safetensors.h"
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

namespace {
// A LoRA on the tiny CLIP-L of the Flux fixture (hidden 32, intermediate 64, 2 layers): every linear of both layers
// (kohya lora_te1_ names, rank 4, alpha 2 -> 0.5), and one transformer module so the file is a whole LoRA. B small
// (0.05) so the delta is a fraction of the weights (std ~0.02), not a new network.
std::string write_te_lora(const test::TempDir& tmp, const std::string& name, unsigned seed) {
    std::vector<std::pair<std::string, Tensor>> t = {
        {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", test::random_tensor({4, 32}, seed)},
        {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight",
         test::random_tensor({32, 4}, seed + 1, -.05f, .05f)}};
    for (int l = 0; l < 2; ++l)
        for (auto [m, in, out] : {std::tuple{"self_attn_q_proj", 32, 32}, std::tuple{"self_attn_k_proj", 32, 32},
                                  std::tuple{"self_attn_v_proj", 32, 32}, std::tuple{"self_attn_out_proj", 32, 32},
                                  std::tuple{"mlp_fc1", 32, 64}, std::tuple{"mlp_fc2", 64, 32}}) {
            const std::string k = "lora_te1_text_model_encoder_layers_" + std::to_string(l) + "_" + m;
            seed += 2;
            t.push_back({k + ".lora_down.weight", test::random_tensor({4, in}, seed)});
            t.push_back({k + ".lora_up.weight", test::random_tensor({out, 4}, seed + 1, -.05f, .05f)});
            t.push_back({k + ".alpha", Tensor::from_f32({}, {2.f})});
        }
    const std::string p = tmp / name;
    write_safetensors(p, t);
    return p;
}

// The Flux fixture's LoRAs for the transformer and its CLIP-L.
std::shared_ptr<const models::LoraSet> flux_loras(const models::ModelSource& src, const models::LoraOptions& lo) {
    auto tr = src.weights("transformer"), te = src.weights("text_encoder");
    return models::load_loras({{"transformer", tr.get()}, {"text_encoder", te.get()}}, "Flux", lo);
}

std::map<std::string, Tensor> clip_raw() {
    Tensor ids(DType::i64, {2, 16});
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 37 + 5) % 900;
    return {{"input_ids", ids}};
}
}  // namespace

// CLIP-L with a text-encoder LoRA: the runtime side path (every JIT mode) and the merged weights on Vulkan against
// the CPU reference with the delta merged into the weights (lora_merge, f64 accumulation, one rounding to f32).
TEST_CASE("LoRA on CLIP-L: runtime side path and merge equal the merged weights on the CPU", "[models][lora][vulkan]") {
    test::TempDir tmp("kiln_lora_clip");
    auto src = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    const std::string cls = src.class_of("text_encoder");
    const auto& cfg = src.config("text_encoder");
    models::LoraOptions lo;
    lo.files = {{write_te_lora(tmp, "a.safetensors", 11), 0.8}, {write_te_lora(tmp, "b.safetensors", 101), -0.5}};
    const auto raw = clip_raw();
    auto run_cpu = [&](const models::WeightStore& ws) {
        ir::Graph g;
        models::Builder b(g, ws);
        auto in = models::build_component(b, cls, cfg, raw);
        return cpu::run(g, in, models::cpu_weights(ws, b.constants()));
    };
    lo.apply = "merge";
    const auto merged_set = models::lora_component(flux_loras(src, lo), "text_encoder");
    REQUIRE(merged_set);
    auto merged = models::with_loras(src.weights("text_encoder"), merged_set, nullptr);
    const auto ref = run_cpu(*merged);
    const auto base = run_cpu(*src.weights("text_encoder"));
    // The LoRA changes the output: far beyond the tolerance below.
    CHECK(rel_l2(ref.at("pooler_output").to_f32(), base.at("pooler_output").to_f32()) > 1e-2);
    CHECK(rel_l2(ref.at("last_hidden_state").to_f32(), base.at("last_hidden_state").to_f32()) > 1e-2);

    // f32 on both sides: W x + B (s (A x)) against (W + s B A) x differs by one rounding of W + s B A per element
    // and the summation order over K = 32 / 64 / rank 8: ~1e-7 relative per linear, 12 linears deep with layer norms
    // -> 1e-5 relative L2, the transformer side path's tolerance.
    auto check = [&](const std::map<std::string, Tensor>& out, const std::string& what) {
        for (const char* n : {"last_hidden_state", "penultimate_hidden_state", "pooler_output"}) {
            const double err = rel_l2(out.at(n).to_f32(), ref.at(n).to_f32());
            INFO(what << " " << n << " relative L2 " << err);
            CHECK(err <= 1e-5);
        }
    };
    lo.apply = "runtime";
    auto set = models::lora_component(flux_loras(src, lo), "text_encoder");
    REQUIRE(set);
    auto ws = src.weights("text_encoder");
    ir::Graph g;
    models::Builder b(g, *ws);
    b.set_loras(set);
    auto in = models::build_component(b, cls, cfg, raw);
    CHECK_NOTHROW(exec::analyze_regions(g));  // one graph for every replayed layer
    CHECK(b.constants().count("text_model.encoder.layers.0.mlp.fc2.lora_A"));
    CHECK(in.count("lora_scales.4.4"));  // the two files' rank-4 columns
    for (exec::Mode m : {exec::Mode::eager, exec::Mode::full, exec::Mode::regional})
        check(exec::run_graph(test::context(), g, b.weight_fn(), in, m), std::string("runtime ") + exec::mode_name(m));
    ir::Graph gm;
    models::Builder bm(gm, *merged);
    auto inm = models::build_component(bm, cls, cfg, raw);
    check(exec::run_graph(test::context(), gm, bm.weight_fn(), inm, exec::Mode::regional), "merge");
    // The transformer's set holds its own module only; no side path on CLIP without set_loras.
    CHECK(models::lora_component(flux_loras(src, lo), "text_encoder_2") == nullptr);
    CHECK(vk::Context::validation_errors() == 0);
}

// encode_prompts with LoRAs and resident encoders (--keep-encoders): a resident CLIP is reused only with the same
// files and apply mode; new runtime scales are written as inputs and give bit for bit a fresh encoder's output;
// other files replace the entry. The CPU reference path applies them too.
TEST_CASE("encode_prompts: text-encoder LoRAs, resident encoders keyed on the LoRAs", "[models][lora][vulkan]") {
    test::TempDir tmp("kiln_lora_enc");
    auto src = models::ModelSource::open(test::data_path("fixtures/flux_pipeline"));
    const std::string a = write_te_lora(tmp, "a.safetensors", 11), b = write_te_lora(tmp, "b.safetensors", 101);
    models::EncoderCache cache;
    auto pooled = [&](const std::vector<models::LoraRequest>& files, const std::string& apply, bool keep,
                      vk::Context* ctx, int* reused = nullptr) {
        models::PromptOptions po;
        po.prompts = {"a castle on a hill at sunset"};
        po.cfg = false;
        po.lora.files = files;
        po.lora.apply = apply;
        if (keep) po.keep = &cache;
        auto enc = models::encode_prompts(ctx, src, po);
        if (reused) *reused = enc.reused_encoders;
        return enc.tensors.at("pooled_prompt_embeds");
    };
    vk::Context* ctx = &test::context();
    int reused = -1;
    const Tensor none = pooled({}, "runtime", true, ctx, &reused);
    const Tensor s1 = pooled({{a, 0.8}}, "runtime", true, ctx, &reused);
    CHECK(reused == 1);  // T5 only: CLIP with a LoRA is another entry, which replaces the one without
    CHECK(cache.size() == 2);
    CHECK(s1.bytes != none.bytes);
    const Tensor s2 = pooled({{a, -0.3}}, "runtime", true, ctx, &reused);
    CHECK(reused == 2);                                                   // the same file: the new scale is an input
    CHECK(s2.bytes == pooled({{a, -0.3}}, "runtime", false, ctx).bytes);  // bit for bit a fresh encoder
    CHECK(s2.bytes != s1.bytes);
    const Tensor other = pooled({{b, -0.3}}, "runtime", true, ctx, &reused);
    CHECK(reused == 1);
    CHECK(cache.size() == 2);
    CHECK(other.bytes == pooled({{b, -0.3}}, "runtime", false, ctx).bytes);
    // Merged: the scale is in the weights, so another scale is another entry.
    const Tensor m1 = pooled({{b, -0.3}}, "merge", true, ctx, &reused);
    CHECK(reused == 1);
    pooled({{b, 0.5}}, "merge", true, ctx, &reused);
    CHECK(reused == 1);
    // Merge and runtime, Vulkan and the CPU reference: the tolerance of the test above.
    const Tensor cpu = pooled({{b, -0.3}}, "merge", false, nullptr);
    CHECK(rel_l2(m1.to_f32(), cpu.to_f32()) <= 1e-5);
    CHECK(rel_l2(other.to_f32(), cpu.to_f32()) <= 1e-5);
    CHECK(rel_l2(pooled({{b, -0.3}}, "runtime", false, nullptr).to_f32(), cpu.to_f32()) <= 1e-5);
    CHECK(vk::Context::validation_errors() == 0);
}
