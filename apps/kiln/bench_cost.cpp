#include "apps/kiln/bench_cost.h"

#include <algorithm>
#include <cstdio>

namespace kiln::app {

const std::vector<CostDevice>& cost_devices() {
    // Sources in docs/benchmarks.md#the-cost-model.
    static const std::vector<CostDevice> d = {
        {"H100", 989.4e12, 3.35e12,
         "NVIDIA H100 SXM5 datasheet: FP16 Tensor Core 1979 TFLOPS with sparsity, dense half; HBM3 3.35 TB/s", 50e6,
         "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 50 MB L2 (H100 SXM5)", 66.9e12,
         "NVIDIA H100 SXM5 datasheet: FP32 67 TFLOPS (whitepaper: 66.9)"},
        {"H200", 989.4e12, 4.8e12,
         "NVIDIA H200 SXM datasheet: FP16 Tensor Core 1979 TFLOPS with sparsity, dense half; HBM3e 4.8 TB/s", 50e6,
         "the H100 SXM5's GH100 configuration (50 MB L2); NVIDIA's H200 datasheet gives no L2 size", 66.9e12,
         "NVIDIA H200 SXM datasheet: FP32 67 TFLOPS (the H100 SXM5's 66.9)"},
        {"RTX 4090", 165.2e12, 1008e9,
         "NVIDIA Ada (AD102) whitepaper: FP16 Tensor with FP32 accumulate 165.2 TFLOPS dense; GDDR6X 21 Gbps x 384 bit "
         "= "
         "1008 GB/s",
         72e6, "NVIDIA Ada whitepaper, appendix: L2 cache 73728 KB (RTX 4090)", 82.6e12,
         "NVIDIA Ada whitepaper, appendix: peak FP32 82.6 TFLOPS (RTX 4090)"},
        {"Apple M3 Max", 14.3e12, 400e9,
         "Apple publishes no FLOP figure: 40-core GPU, 5120 ALUs x 2 x 1.398 GHz (f16 at the f32 rate); Apple: 400 "
         "GB/s",
         0, "Apple publishes no cache size: none modelled", 14.3e12, "the same ALUs: f32 at the f16 rate"},
        {"Adreno 750", 5.5e12, 76.8e9,
         "Qualcomm publishes no FLOP figure: 1536 ALUs x 2 x 0.903 GHz x 2 (f16 at twice the f32 rate); LPDDR5X "
         "4800 MHz x 64 bit = 76.8 GB/s",
         0, "Qualcomm publishes no cache size: none modelled", 2.77e12,
         "the same ALUs at the f32 rate: 1536 x 2 x "
         "0.903 GHz"},
    };
    return d;
}

// One execution's bytes to and from memory on d (vk::memory_bytes of its traffic).
double memory_bytes(const exec::DispatchCost& x, const CostDevice& d) {
    vk::Traffic t;
    t.read = x.bytes;  // read + written: memory_bytes only subtracts re-reads that hit
    t.rereads = x.rereads;
    return vk::memory_bytes(t, d.cache_bytes);
}

// One execution's floor on d in seconds: its executed FLOPs at the peak its kernel runs at, or its memory bytes.
double dispatch_floor_s(const exec::DispatchCost& x, const CostDevice& d) {
    return std::max(x.flops_executed / (x.matrix ? d.flops_per_s : d.alu_flops_per_s),
                    memory_bytes(x, d) / d.bytes_per_s);
}

double floor_ms(const exec::StepCost& c, const CostDevice& d) {
    double s = 0;
    for (const exec::DispatchCost& x : c.per_dispatch) s += x.per_run * dispatch_floor_s(x, d);
    return s * 1e3;
}

nlohmann::json cost_json(const exec::StepCost& c) {
    nlohmann::json floor = nlohmann::json::object();
    for (const CostDevice& d : cost_devices()) floor[d.name] = floor_ms(c, d);
    return {{"flops", c.flops},     {"bytes", c.bytes},       {"bytes_min", c.bytes_min}, {"dispatches", c.dispatches},
            {"submits", c.submits}, {"barriers", c.barriers}, {"floor_ms", floor}};
}

namespace {
// The device shader_costs ranks by and --cost-by-shader gives shares of: the H200, the card of the side by side.
size_t ranking_device() {
    const auto& d = cost_devices();
    for (size_t i = 0; i < d.size(); ++i)
        if (std::string(d[i].name) == "H200") return i;
    return 0;
}
}  // namespace

std::vector<ShaderCost> shader_costs(const exec::StepCost& c) {
    std::vector<ShaderCost> out;
    const auto& devices = cost_devices();
    for (const exec::DispatchCost& x : c.per_dispatch) {
        if (x.per_run == 0) continue;
        auto it = std::find_if(out.begin(), out.end(), [&](const ShaderCost& e) { return e.shader == x.shader; });
        if (it == out.end()) {
            out.push_back({x.shader, 0, 0, 0, 0, std::vector<double>(devices.size(), 0.0)});
            it = out.end() - 1;
        }
        it->count += x.per_run;
        it->flops += x.per_run * x.flops;
        it->flops_executed += x.per_run * x.flops_executed;
        it->bytes += x.per_run * x.bytes;
        for (size_t i = 0; i < devices.size(); ++i)
            it->floor_ms[i] += x.per_run * dispatch_floor_s(x, devices[i]) * 1e3;
    }
    // The H200's floor, largest first: where the step's time would go (ties by name, stable output).
    const size_t r = ranking_device();
    std::sort(out.begin(), out.end(), [r](const ShaderCost& a, const ShaderCost& b) {
        return a.floor_ms[r] != b.floor_ms[r] ? a.floor_ms[r] > b.floor_ms[r] : a.shader < b.shader;
    });
    return out;
}

nlohmann::json cost_by_shader(const exec::StepCost& c) {
    nlohmann::json by = nlohmann::json::object();
    const auto& devices = cost_devices();
    for (const ShaderCost& e : shader_costs(c)) {
        nlohmann::json floor = nlohmann::json::object();
        for (size_t i = 0; i < devices.size(); ++i) floor[devices[i].name] = e.floor_ms[i];
        by[e.shader] = {{"count", e.count},
                        {"flops", e.flops},
                        {"flops_executed", e.flops_executed},
                        {"bytes", e.bytes},
                        {"floor_ms", floor}};
    }
    return by;
}

nlohmann::json cost_model_json() {
    nlohmann::json devices = nlohmann::json::object();
    for (const CostDevice& d : cost_devices())
        devices[d.name] = {
            {"flops_per_s", d.flops_per_s}, {"bytes_per_s", d.bytes_per_s},   {"source", d.source},
            {"cache_bytes", d.cache_bytes}, {"cache_source", d.cache_source}, {"alu_flops_per_s", d.alu_flops_per_s},
            {"alu_source", d.alu_source}};
    return {{"note",
             "a model, not a measurement: per step, each dispatch as planned with its FLOPs and the bytes its tiling "
             "reads and writes (bytes: no cache between workgroups); flops_executed = flops x the matrix products "
             "per term of each dispatch's kernel (a cooperative-matrix GEMM's hi + lo split of an f32 x runs two); "
             "floor_ms = sum over dispatches of max(flops_executed / "
             "peak, memory bytes / bandwidth), the peak of the matrix units (flops_per_s) for the cooperative-matrix "
             "kernels and their scalar twins (gemm*), else the ALUs' (alu_flops_per_s), memory bytes: a binding "
             "re-read by the tiling counts once where the "
             "bytes touched between two reads of it fit half the device's last-level cache; bytes_min = every weight "
             "once + each block's inputs and outputs"},
            {"devices", devices}};
}

void print_cost(const std::string& label, const exec::StepCost& c, bool header) {
    if (header) {
        std::printf(
            "cost model (per step, as planned; not measured: floor = sum over dispatches of max(executed FLOPs / peak, "
            "bytes / bandwidth), re-reads that fit half the last-level cache counted once)\n");
        std::printf("%-9s %9s %9s %9s %8s %6s %6s %8s", "mode", "GFLOP", "GB", "GB_min", "GB/min", "disp", "submit",
                    "barriers");
        for (const CostDevice& d : cost_devices()) std::printf(" %13s", (std::string(d.name) + " ms").c_str());
        std::printf("\n");
    }
    std::printf("%-9s %9.1f %9.3f %9.3f %8.2f %6d %6d %8d", label.c_str(), c.flops * 1e-9, c.bytes * 1e-9,
                c.bytes_min * 1e-9, c.bytes_min > 0 ? c.bytes / c.bytes_min : 0.0, c.dispatches, c.submits, c.barriers);
    for (const CostDevice& d : cost_devices()) std::printf(" %13.3f", floor_ms(c, d));
    std::printf("\n");
    std::fflush(stdout);
}

void print_cost_by_shader(const exec::StepCost& c) {
    const auto& devices = cost_devices();
    const size_t r = ranking_device();
    const double total = floor_ms(c, devices[r]);
    // A table of its own under the mode's row: per shader its executed GFLOP, GB, share of the H200's floor,
    // executions per step, and its floor on each named device.
    std::printf("  %-28s %9s %9s %7s %6s", "shader", "GFLOP", "GB", "H200 %", "count");
    for (const CostDevice& d : devices) std::printf(" %13s", (std::string(d.name) + " ms").c_str());
    std::printf("\n");
    for (const ShaderCost& e : shader_costs(c)) {
        std::printf("  %-28.28s %9.1f %9.3f %6.1f%% %6d", e.shader.c_str(), e.flops_executed * 1e-9, e.bytes * 1e-9,
                    total > 0 ? 100.0 * e.floor_ms[r] / total : 0.0, e.count);
        for (double ms : e.floor_ms) std::printf(" %13.3f", ms);
        std::printf("\n");
    }
    std::fflush(stdout);
}

}  // namespace kiln::app
