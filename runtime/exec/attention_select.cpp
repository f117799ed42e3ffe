#include "runtime/exec/attention_select.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/vulkan/attention_flash.h"

namespace kiln::exec {

bool choose_attention_flash(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d) {
    const std::string& v = ctx.settings().exec.attention;
    KILN_CHECK(v == "auto" || v == "coopmat" || v == "flash" || v == "rows" || v == "buf" || v == "tex",
               "KILN_ATTENTION='", v, "' (auto, coopmat, flash, rows, buf or tex)");
    bool f16 = false;
    for (size_t i = 0; i < 3; ++i) f16 = f16 || g.value(n.in[i]).dtype == DType::f16;
    uint32_t smem = ctx.info().max_shared_memory;
    if (uint32_t t = ctx.settings().test.max_shared_memory) smem = std::min(smem, t);  // KILN_TEST_MAX_SHARED_MEMORY
    const bool cpu = ctx.info().vk_type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    // coopmat: forced, or auto on a GPU (a CPU device keeps the rows kernel: docs/attention.md), where it applies.
    if (v == "coopmat") {  // where the device has none: an error, not a silent fallback
        const std::string why = vk::attention_coopmat_unavailable(ctx.info());
        KILN_CHECK(why.empty(), "KILN_ATTENTION=coopmat on '", ctx.info().name, "': ", why);
    }
    if ((v == "coopmat" || (v == "auto" && !cpu)) &&
        vk::attention_coopmat_unsupported(ctx.info(), g, n, smem).empty()) {
        d = vk::lower_attention_coopmat(ctx.info(), g, n, smem, ctx.settings().exec.precision == "fast");
        return true;
    }
    if (f16) {  // the rows kernel reads f32 only
        d = vk::lower_attention_flash(g, n, smem);
        return true;
    }
    if (v != "auto" && v != "flash" && v != "coopmat") return false;
    // auto on a CPU device (lavapipe): the rows kernel, 7-17x faster there (docs/attention.md).
    if (v == "auto" && cpu) return false;
    if (!vk::attention_flash_unsupported(g, n, smem).empty()) return false;
    d = vk::lower_attention_flash(g, n, smem);
    return true;
}

std::string attention_texel_choice(const std::string& v) { return v == "buf" || v == "tex" ? v : "auto"; }

}  // namespace kiln::exec
