#include "runtime/exec/attention_select.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/exec/attention_table.h"
#include "runtime/vulkan/attention_flash.h"

namespace kiln::exec {

namespace {
thread_local std::string t_override;  // set_attention_override
}  // namespace

void set_attention_override(const std::string& v) { t_override = v; }

bool choose_attention_flash(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d) {
    std::string v = t_override.empty() ? ctx.settings().exec.attention : t_override;
    KILN_CHECK(
        v == "auto" || v == "coopmat4" || v == "coopmat" || v == "flash" || v == "rows" || v == "buf" || v == "tex",
        "KILN_ATTENTION='", v, "' (auto, coopmat4, coopmat, flash, rows, buf or tex)");
    bool f16 = g.value(n.out).dtype == DType::f16;  // q, k, v or the output stored f16 (ir::store_f16)
    for (size_t i = 0; i < 3; ++i) f16 = f16 || g.value(n.in[i]).dtype == DType::f16;
    uint32_t smem = ctx.info().max_shared_memory;
    if (uint32_t t = ctx.settings().test.max_shared_memory) smem = std::min(smem, t);  // KILN_TEST_MAX_SHARED_MEMORY
    const bool cpu = ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    // Under an override (the attention table's measurement) exact: its probe bounds the exact arithmetic, and its
    // picks hold at fast, which runs fewer products with the same loads.
    const bool fast = t_override.empty() && ctx.settings().exec.precision == "fast";
    const uint32_t lanes = ctx.settings().test.attention_lanes;  // KILN_TEST_ATTENTION_LANES
    // auto where the device's attention table decides (a GPU; attention_table.h): its pick for this node's head size,
    // q/k/v storage and key count, among the kernels that run the node (rows only where q, k, v and the output are
    // f32). No pick (nothing admitted): the fallbacks below.
    if (v == "auto" && attention_table_decides(ctx)) {
        const AttentionKey key = attention_key(g, n);
        const std::string pick =
            attention_table(ctx, key.head_dim, key.f16)
                .pick(key.head_dim, key.f16, g.value(n.in[1]).shape[1], [&](const std::string& k) {
                    return attention_kernel_unsupported(ctx, k, g, n).empty() && (k != "rows" || !f16);
                });
        if (!pick.empty()) v = pick;
    }
    const bool cm = v == "coopmat" || v == "coopmat4";
    // Forced cooperative matrices where the device has none: an error, not a silent fallback.
    if (cm) {
        const std::string why = v == "coopmat4" ? vk::attention_coopmat4_unavailable(ctx.info())
                                                : vk::attention_coopmat_unavailable(ctx.info());
        KILN_CHECK(why.empty(), "KILN_ATTENTION=", v, " on '", ctx.info().name, "': ", why);
    }
    // coopmat4: the rows-per-subgroup variant where a tile fits, else as coopmat (head_dim 256 in 48 KiB).
    if (v == "coopmat4" && vk::attention_coopmat4_unsupported(ctx.info(), g, n, smem, lanes).empty()) {
        d = vk::lower_attention_coopmat4(ctx.info(), g, n, smem, fast, lanes);
        return true;
    }
    if (cm && vk::attention_coopmat_unsupported(ctx.info(), g, n, smem).empty()) {
        d = vk::lower_attention_coopmat(ctx.info(), g, n, smem, fast);
        return true;
    }
    if (f16) {  // the rows kernel reads and writes f32 only
        d = vk::lower_attention_flash(g, n, smem);
        return true;
    }
    if (v != "auto" && v != "flash" && !cm) return false;
    // auto: the scalar flash kernel on a GPU (the fastest measured, docs/attention.md); on a CPU device (lavapipe)
    // the rows kernel, 7-17x faster there.
    if (v == "auto" && cpu) return false;
    if (!vk::attention_flash_unsupported(g, n, smem).empty()) return false;
    d = vk::lower_attention_flash(g, n, smem);
    return true;
}

std::string attention_texel_choice(const std::string& v) { return v == "buf" || v == "tex" ? v : "auto"; }

}  // namespace kiln::exec
