// kiln bench --lora-ranks: the runtime LoRA side path against no LoRA on the benched transformer. Per rank, a PEFT
// LoRA file on every linear of every block but the modulation (norm*.linear): written to a temporary file, read
// back through load_loras (the load time), then planned in regional mode; the weight bytes the plan adds and the
// step time against the same graph without LoRA.
#include <cstdio>
#include <filesystem>
#include <random>

#include "apps/kiln/bench.h"
#include "models/core/forward.h"
#include "models/registry/registry.h"
#include "runtime/core/error.h"
#include "runtime/core/safetensors.h"

namespace kiln::app {

namespace {
// The block linears a LoRA targets here, as module names with their [out, in]: the graph's 2-D weights inside
// transformer_blocks.* / single_transformer_blocks.*, modulation left out (as most trainers leave it).
std::vector<std::pair<std::string, Shape>> lora_targets(const ir::Graph& g) {
    std::vector<std::pair<std::string, Shape>> out;
    for (const ir::Value& v : g.values()) {
        const std::string& n = v.name;
        if (v.role != ir::Role::weight || v.shape.size() != 2 || n.size() < 7 ||
            n.compare(n.size() - 7, 7, ".weight") != 0 || n.find("norm") != std::string::npos ||
            n.find("lora_") != std::string::npos)
            continue;
        if (n.rfind("transformer_blocks.", 0) == 0 || n.rfind("single_transformer_blocks.", 0) == 0)
            out.push_back({n.substr(0, n.size() - 7), v.shape});
    }
    return out;
}

// A PEFT file (bf16, as published LoRAs mostly are) of rank r on those modules; its size in bytes.
uint64_t write_lora(const std::string& path, const std::vector<std::pair<std::string, Shape>>& targets, int r) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.01f, 0.01f);
    std::vector<std::pair<std::string, Tensor>> ts;
    uint64_t bytes = 0;
    auto random = [&](Shape s) {
        Tensor t(DType::f32, s);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
        bytes += (uint64_t)t.numel() * 2;
        return t.astype(DType::bf16);
    };
    for (const auto& [m, s] : targets) {
        ts.push_back({"transformer." + m + ".lora_A.weight", random({r, s[1]})});
        ts.push_back({"transformer." + m + ".lora_B.weight", random({s[0], r})});
    }
    write_safetensors(path, ts);
    return bytes;
}

// A regional executor with its inputs set, warmed up.
std::unique_ptr<exec::Executor> planned(vk::Context& ctx, const ir::Graph& g, const models::Builder& b,
                                        const std::map<std::string, Tensor>& in, exec::BlockWeights bw,
                                        const exec::Budget& budget, int warmup) {
    auto ex = std::make_unique<exec::Executor>(ctx, g, b.weight_fn(), exec::Mode::regional, false, bw, budget);
    for (const auto& [name, t] : in) ex->set_input(name, t);
    for (int i = 0; i < warmup; ++i) ex->run();
    return ex;
}
double timed_run(exec::Executor& ex) {
    const auto t0 = Clock::now();
    ex.run();
    return ms_since(t0);
}
}  // namespace

nlohmann::json lora_rows(vk::Context& ctx, const models::WeightStore& ws, const models::SyntheticArch& arch,
                         const std::map<std::string, Tensor>& inputs, const std::vector<int>& ranks,
                         exec::BlockWeights bw, const exec::Budget& budget, int warmup, int steps) {
    const models::ComponentClass* cc = models::find_component_class(arch.cls);
    const models::ComponentKind kind = cc ? cc->kind : arch.kind;  // a model file's arch has the class only
    const models::Family* fam = models::transformer_family(kind);
    KILN_CHECK(fam && (kind == models::ComponentKind::flux || kind == models::ComponentKind::sd3),
               "--lora-ranks: LoRAs apply to the SD3 and Flux transformers, not ", arch.cls);
    KILN_CHECK(steps > 0, "--lora-ranks times steps: give --steps 1 or more");
    ir::Graph g0;
    models::Builder b0(g0, ws);
    const auto in0 = models::build_component(b0, arch.cls, arch.config, inputs);
    const auto targets = lora_targets(g0);
    auto base = planned(ctx, g0, b0, in0, bw, budget, warmup);
    const uint64_t base_bytes = base->counters().weight_bytes;
    std::printf(
        "lora (runtime, regional; steps alternate with the same graph without LoRA, medians): %zu block "
        "linears targeted, weights %.1f MiB without LoRA\n",
        targets.size(), (double)base_bytes / (1 << 20));
    std::printf("%6s %10s %9s %11s %12s %9s %9s\n", "rank", "file_MiB", "load_ms", "lora_MiB", "no_lora_ms", "step_ms",
                "ratio");
    nlohmann::json rows = nlohmann::json::array();
    const auto dir = std::filesystem::temp_directory_path();
    for (int r : ranks) {
        KILN_CHECK(r >= 1, "--lora-ranks: rank ", r, " (1 or more)");
        const std::string path = (dir / ("kiln_bench_lora_r" + std::to_string(r) + ".safetensors")).string();
        const uint64_t file_bytes = write_lora(path, targets, r);
        models::LoraOptions lo;
        lo.files = {{path, 1.0}};
        const auto t0 = Clock::now();
        auto set = models::load_loras(ws, fam->name, lo);  // read, matched and checked: what a generation pays
        const double load_ms = ms_since(t0);
        std::filesystem::remove(path);
        ir::Graph g;
        models::Builder b(g, ws);
        b.set_loras(set);
        const auto in = models::build_component(b, arch.cls, arch.config, inputs);
        auto ex = planned(ctx, g, b, in, bw, budget, warmup);
        const uint64_t added = ex->counters().weight_bytes - base_bytes;
        // Alternating steps: a shared machine's drift hits both alike; the ratio is taken per pair.
        std::vector<double> none_ms, lora_ms, ratio;
        for (int i = 0; i < steps; ++i) {
            none_ms.push_back(timed_run(*base));
            lora_ms.push_back(timed_run(*ex));
            ratio.push_back(lora_ms.back() / none_ms.back());
        }
        std::printf("%6d %10.1f %9.1f %11.1f %12.1f %9.1f %9.3f\n", r, (double)file_bytes / (1 << 20), load_ms,
                    (double)added / (1 << 20), median(none_ms), median(lora_ms), median(ratio));
        std::fflush(stdout);
        rows.push_back({{"rank", r},
                        {"modules", targets.size()},
                        {"file_bytes", file_bytes},
                        {"load_ms", load_ms},
                        {"lora_weight_bytes", added},
                        {"step_ms", lora_ms},
                        {"step_ms_no_lora", none_ms},
                        {"step_ms_median", median(lora_ms)},
                        {"step_ms_median_no_lora", median(none_ms)},
                        {"ratio_median", median(ratio)}});
    }
    return rows;
}

}  // namespace kiln::app
