#pragma once
// Shared by the model tests: one Vulkan context per process, and the fixture-parity checks every
// transformer runs (CPU reference vs diffusers; Vulkan in every JIT mode from a converted Kiln file).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "converter/convert.h"
#include "models/core/forward.h"
#include "runtime/core/safetensors.h"
#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"
#include "tests/support/vk_context.h"

namespace kiln::test {
// A fixture case's io.json.
inline nlohmann::json fixture_json(const std::string& fixture) {
    std::ifstream f(data_path("fixtures/" + fixture + "/io.json"));
    REQUIRE(f);
    return nlohmann::json::parse(f);
}

inline vk::Context& context() {
    static vk::Context& ctx = test::exit_safe_context();
    return ctx;
}

// Every input a fixture transformer may take (each fixture's io.safetensors has those its model uses).
inline const std::vector<std::string> kTransformerInputs = {"hidden_states",
                                                            "timestep",
                                                            "class_labels",
                                                            "encoder_hidden_states",
                                                            "encoder_attention_mask",
                                                            "pooled_projections",
                                                            "img_ids",
                                                            "txt_ids",
                                                            "guidance"};

// Fixture `fx` converted to a Kiln file with `dt` weights, in the model tests' temp folder; `tag` keeps one
// test's files apart from another's.
inline std::string convert_fixture(const std::string& fx, DType dt, const std::string& tag = "") {
    auto dir = std::filesystem::temp_directory_path() / "kiln_test_models";
    std::filesystem::create_directories(dir);
    const std::string file = (dir / (fx + (tag.empty() ? "" : "_" + tag) + "_" + dtype_name(dt) + ".kiln")).string();
    converter::Options opt;
    opt.dtype = dt;
    opt.quiet = true;
    converter::convert_folder(data_path("fixtures/" + fx), file, opt);
    return file;
}

// A second case of a fixture: io tensors that replace inputs ({input, io name}: hidden_states_nonsquare as
// hidden_states) and the io tensor the output is compared with (sample_nonsquare).
struct FixtureCase {
    std::map<std::string, std::string> replace;
    std::string expected = "sample";
};

// The named inputs of a fixture's io.safetensors (with a case's replacements).
inline std::map<std::string, Tensor> fixture_inputs(const SafeTensors& io, const std::vector<std::string>& names,
                                                    const FixtureCase& fc = {}) {
    std::map<std::string, Tensor> in;
    for (auto& n : names)
        if (io.find(n)) in[n] = io.read(n);
    for (auto& [input, name] : fc.replace) in[input] = io.read(name);
    return in;
}

// CPU reference vs diffusers' `sample`. f32 weights and activations, f64 accumulation: only diffusers'
// own f32 rounding differs (~1e-6), so relative L2 <= 1e-4.
inline void check_cpu_parity(const std::string& fx, const std::vector<std::string>& inputs,
                             const FixtureCase& fc = {}) {
    auto src = models::ModelSource::open(data_path("fixtures/" + fx));
    auto io = SafeTensors::open(data_path("fixtures/" + fx + "/io.safetensors"));
    auto out = models::forward_component(nullptr, src, "transformer", fixture_inputs(io, inputs, fc));
    double err = rel_l2(out["sample"].to_f32(), io.read(fc.expected).to_f32());
    INFO(fx << " " << fc.expected << " CPU relative L2 " << err);
    CHECK(err <= 1e-4);
}

// Converts the fixture to a Kiln file with f32 and with f16 weights and runs it on Vulkan in eager, full
// and regional modes: f32 within 1e-4 relative L2 of diffusers (as the CPU reference), f16 within
// `f16_bound` (derived per model from io.json's weights_fp16_rounded figures), modes bitwise identical.
inline void check_vulkan_parity(const std::string& fx, const std::vector<std::string>& inputs, double f16_bound,
                                const FixtureCase& fc = {}) {
    auto io = SafeTensors::open(data_path("fixtures/" + fx + "/io.safetensors"));
    const auto ref = io.read(fc.expected).to_f32();
    auto in = fixture_inputs(io, inputs, fc);
    for (DType dt : {DType::f32, DType::f16}) {
        const std::string file = convert_fixture(fx, dt);
        auto src = models::ModelSource::open(file);
        Tensor first;
        // Regional twice: block weights copied per replay, then selected on the device (device addresses).
        for (int run = 0; run < 4; ++run) {
            exec::Mode m = run == 0 ? exec::Mode::eager : run == 1 ? exec::Mode::full : exec::Mode::regional;
            ::setenv("KILN_BLOCK_WEIGHTS", run == 3 ? "device" : "copy", 1);
            auto out = models::forward_component(&context(), src, "transformer", in, m);
            ::unsetenv("KILN_BLOCK_WEIGHTS");
            double err = rel_l2(out["sample"].to_f32(), ref);
            INFO(fx << " " << fc.expected << " " << dtype_name(dt) << " " << exec::mode_name(m)
                    << (run == 3 ? " (weights on device)" : "") << " relative L2 " << err);
            CHECK(err <= (dt == DType::f32 ? 1e-4 : f16_bound));
            if (m == exec::Mode::eager)
                first = out["sample"];
            else
                CHECK(first.bytes == out["sample"].bytes);  // modes are bitwise identical
        }
    }
    CHECK(vk::Context::validation_errors() == 0);
}
}  // namespace kiln::test
