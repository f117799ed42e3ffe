// kiln bench --kernels: the linear selection table of this device (runtime/exec/linear_select.h), measured now:
// GFLOP/s of every linear variant per weight dtype and shape, whether the probe admitted it, and the pick.
// With the default shapes and dtypes the table is also written where linear_table() reads it.
#include <cstdio>
#include <set>

#include "apps/kiln/commands.h"
#include "runtime/core/error.h"
#include "runtime/exec/linear_select.h"
#include "runtime/vulkan/linear_kernels.h"

namespace kiln::app {
namespace {
// The coopmat column's legend: the device's shape, or why the kernel is absent.
std::string coopmat_note(vk::Context& ctx) {
    const vk::DeviceInfo& d = ctx.info();
    if (!exec::linear_variant_available(ctx, "coopmat", DType::f16))
        return "absent, " + vk::linear_kernel_unavailable(*vk::find_linear_kernel("coopmat"), d, DType::f16);
    return "f16, bf16 and ggml weights, VK_KHR_cooperative_matrix " + std::to_string(d.coopmat_m) + "x" +
           std::to_string(d.coopmat_n) + "x" + std::to_string(d.coopmat_k);
}

// The coopmat2 column's legend: its tile on this device, or why it is absent.
std::string coopmat2_note(vk::Context& ctx) {
    const vk::DeviceInfo& d = ctx.info();
    if (!exec::linear_variant_available(ctx, "coopmat2", DType::f16))
        return "absent, " + vk::linear_kernel_unavailable(*vk::find_linear_kernel("coopmat2"), d, DType::f16);
    return "f16 weights, x stored f16 (timed so), VK_NV_cooperative_matrix2 " + std::to_string(d.cm2_bm) + "x" +
           std::to_string(d.cm2_bn) + " BK" + std::to_string(d.cm2_bk) + ", " + std::to_string(d.cm2_invocations) +
           " invocations";
}

// The tiled GEMM kernels' tiles on this device for f16 weights: "coopmat 64x64 BK32x2 34828 B, ...".
std::string gemm_tiles(vk::Context& ctx) {
    std::string out;
    for (const vk::LinearKernel& k : vk::linear_kernels()) {
        if (!k.caps.wm || !exec::linear_variant_available(ctx, k.name, DType::f16)) continue;
        const auto c = vk::gemm_config(k, ctx.info(), DType::f16);
        if (!c) continue;
        char b[160];
        std::snprintf(b, sizeof b, "%s%s %ux%u (%ux%ux%u) BK%ux%u %u B", out.empty() ? "" : ", ", k.name.c_str(),
                      c->bm(), c->bn(), c->shape.m, c->shape.n, c->shape.k, c->bk, c->nbuf,
                      vk::gemm_shared_bytes(*c, DType::f16));
        out += b;
    }
    return out.empty() ? "none" : out;
}

// The split-K kernels' split factor S at each shape for f16 weights (1: the unsplit kernel's one dispatch), at
// coopmat_sk's tile where the device runs it, else gemm_sk's.
std::string split_note(vk::Context& ctx, const std::vector<exec::LinearShape>& shapes) {
    const bool cm = exec::linear_variant_available(ctx, "coopmat_sk", DType::f16);
    const auto c = vk::gemm_config(*vk::find_linear_kernel(cm ? "coopmat_sk" : "gemm_sk"), ctx.info(), DType::f16);
    if (!c) return "absent";
    const uint32_t units = ctx.info().compute_units;
    std::string out = std::to_string(c->bm()) + "x" + std::to_string(c->bn()) + " tiles split along K for " +
                      (units ? std::to_string(units) + " compute units"
                             : std::to_string(vk::kDefaultComputeUnits) + " compute units (assumed)") +
                      ", S per tile";
    for (const exec::LinearShape& s : shapes)
        out += " " + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + ":" +
               std::to_string(vk::splitk_factor(*c, ctx.info(), (uint32_t)s.M, (uint32_t)s.N, (uint32_t)s.K));
    return out;
}
}  // namespace

void bench_kernels(int device, bool no_pipeline_cache, const std::vector<std::string>& shapes,
                   const std::string& dtypes, int reps) {
    Settings settings = cli_settings(device);
    settings.context.skip_pipeline_cache_file = no_pipeline_cache;
    vk::Context ctx(settings);
    std::vector<exec::LinearShape> sh;
    for (const std::string& s : shapes) {
        long long m = 0, n = 0, k = 0;
        char tail = 0;
        KILN_CHECK(
            std::sscanf(s.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) == 3 && m > 0 && n > 0 && k > 0 && k % 4 == 0,
            "--shape '", s, "' (MxNxK, K a multiple of 4)");
        sh.push_back({m, n, k});
    }
    const bool defaults = sh.empty() && dtypes == "f32,f16,bf16";
    if (sh.empty()) sh = exec::linear_table_shapes();
    std::vector<DType> dts;
    for (size_t a = 0; a <= dtypes.size();) {
        size_t b = dtypes.find(',', a);
        if (b == std::string::npos) b = dtypes.size();
        DType dt = parse_dtype(dtypes.substr(a, b - a), "--kernel-dtypes");
        KILN_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16 || dtype_is_quant(dt),
                   "--kernel-dtypes: f32, f16, bf16 or a quantized type (q8_0, q4_0, ...)");
        dts.push_back(dt);
        a = b + 1;
    }
    std::printf("kiln bench --kernels: linear y = x W^T + b on %s (%s), best of %d runs\n", ctx.info().name.c_str(),
                ctx.info().driver.c_str(), reps);
    std::fflush(stdout);
    exec::LinearTable t = exec::measure_linear_table(ctx, sh, dts, reps, false);
    std::printf("%-5s %-19s", "dtype", "M x N x K");
    for (const std::string& v : exec::linear_variants()) std::printf(" %10s", v.c_str());
    std::printf("  pick\n");
    std::set<std::pair<int, std::string>> seen;
    for (const auto& r : t.rows) {
        char key[40];
        std::snprintf(key, sizeof key, "%lldx%lldx%lld", (long long)r.shape.M, (long long)r.shape.N,
                      (long long)r.shape.K);
        if (!seen.insert({(int)r.dtype, key}).second) continue;
        std::printf("%-5s %-19s", dtype_name(r.dtype), key);
        for (const std::string& v : exec::linear_variants()) {
            bool any = false;
            for (const auto& q : t.rows)
                if (q.dtype == r.dtype && q.variant == v && q.shape.M == r.shape.M && q.shape.N == r.shape.N &&
                    q.shape.K == r.shape.K)
                    any = true, q.admitted ? std::printf(" %10.2f", q.gflops) : std::printf(" %10s", "excluded");
            if (!any) std::printf(" %10s", "-");  // not available on this device for this dtype
        }
        exec::LinearTable one;
        for (const auto& q : t.rows)
            if (q.dtype == r.dtype && q.shape.M == r.shape.M && q.shape.N == r.shape.N && q.shape.K == r.shape.K)
                one.rows.push_back(q);
        std::printf("  %s\n", one.pick(r.dtype, r.shape.M).c_str());
    }
    for (const auto& r : t.rows)
        if (!r.admitted) std::printf("excluded: %s %s: %s\n", dtype_name(r.dtype), r.variant.c_str(), r.note.c_str());
    std::printf(
        "(GFLOP/s = 2 M N K / time; pick: the fastest admitted variant at that shape; coopmat: %s; gemm: "
        "coopmat's kernel with scalar products; 128: the 128-row tile; f16 tiles, slices x buffers, shared memory: "
        "%s; coopmat2: %s; _sk: %s; tex: %s)\n",
        coopmat_note(ctx).c_str(), gemm_tiles(ctx).c_str(), coopmat2_note(ctx).c_str(), split_note(ctx, sh).c_str(),
        ctx.info().texel_formats ? "x and W through uniform texel buffers"
                                 : "absent, no RGBA32F/RGBA16F/RGBA16_UINT uniform texel buffers");
    const std::string path = exec::linear_table_path(ctx);
    std::string why;
    if (defaults && !path.empty()) {
        if (exec::write_linear_table(ctx, path, t, why))
            std::printf("table written: %s\n", path.c_str());
        else
            std::printf("table not written: %s\n", why.c_str());
    }
}

}  // namespace kiln::app
