#include "runtime/vulkan/lower.h"

#include "runtime/core/error.h"

namespace kiln::vk {

void groups_1d(Dispatch& d, uint64_t n, uint32_t local) {
    uint64_t g = (n + local - 1) / local;
    if (g <= 65535) {
        d.groups[0] = (uint32_t)std::max<uint64_t>(g, 1);
        d.groups[1] = 1;
    } else {
        d.groups[0] = 65535;
        d.groups[1] = (uint32_t)((g + 65534) / 65535);
    }
    d.groups[2] = 1;
}

void modulate_rows(const ir::Node& n, int64_t C, uint32_t& sh_off, uint32_t& sh_stride, uint32_t& sc_off,
                   uint32_t& sc_stride) {
    auto row = [&](size_t i, uint32_t& off, uint32_t& stride) {
        const ir::InputView* v = ir::input_view(n, i);
        off = v ? (uint32_t)v->start : 0u;
        stride = (uint32_t)(v ? v->width : C);
        KILN_CHECK(!v || v->shape.back() == C, "internal: ", ir::op_name(n.op), " view of ", shape_str(v->shape));
    };
    row(1, sh_off, sh_stride);
    row(2, sc_off, sc_stride);
}

Dispatch lower_reshape(const ir::Graph&, const ir::Node&) { KILN_FAIL("reshape is a view and has no dispatch"); }

Dispatch lower(const ir::Graph& g, const ir::Node& n) {
    using Fn = Dispatch (*)(const ir::Graph&, const ir::Node&);
    static const Fn table[] = {
#define KILN_X(name, kind) &lower_##name,
        KILN_OPS(KILN_X)
#undef KILN_X
    };
    return table[(int)n.op](g, n);
}

}  // namespace kiln::vk
