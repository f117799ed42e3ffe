// Activations larger than one binding (maxStorageBufferRange, or KILN_MAX_BINDING_RANGE): the arena holds them
// whole (a buffer may exceed the binding range; only a bound range is limited), and every dispatch that binds one
// is split into row-chunk dispatches. A value [.., C] is rows = numel / C of C elements; chunk j binds rows
// [r0, r0 + n) of each row-indexed binding (its input and output activations), the whole range of the others
// (weights, biases, operands broadcast over the rows), and a per-batch slice of operands indexed by batch only
// (modulate's shift/scale, a [B, 1, C] gate). Its push constants and group counts come from lowering the same op on
// the chunk's shapes ([1, .., 1, n, C]), so each output element is computed by the same arithmetic as unsplit: a
// linear's chunks run the kernel the whole node runs (not the table's pick at the chunk's rows) and start at whole
// workgroups of the tiled GEMM (multiples of 256 rows, where a chunk holds that many).
#include <functional>
#include <numeric>
#include <string>
#include <variant>

#include "runtime/core/error.h"
#include "runtime/exec/executor_impl.h"
#include "runtime/exec/linear_select.h"
#include "runtime/ir/fuse.h"

namespace kiln::exec {
namespace {
enum class Bind { whole, row, batch };

int64_t lead(const Shape& s) { return s.empty() ? 1 : shape_numel(s) / std::max<int64_t>(s.back(), 1); }

// Leading dims (all but the last) without leading 1s: equal for values that share their rows.
Shape row_dims(const Shape& s) {
    Shape d(s.begin(), s.end() - (s.empty() ? 0 : 1));
    while (!d.empty() && d.front() == 1) d.erase(d.begin());
    return d;
}

// How input `s` of a broadcasting op with output `so` is indexed by the output's rows; false: not row-wise.
bool classify_broadcast(const Shape& s, const Shape& so, Bind& how) {
    if (row_dims(s) == row_dims(so) && (s.empty() ? 1 : s.back()) == so.back()) return how = Bind::row, true;
    if (lead(s) == 1) return how = Bind::whole, true;
    if (s.size() == so.size() && so.size() >= 3 && s[0] == so[0] && lead(s) == s[0]) return how = Bind::batch, true;
    return false;
}

// The node rebuilt in `s` on inputs `in` (shapes of one chunk); returns its lowering (a linear: on the kernel the
// whole node runs on, chosen for its rows, not the chunk's, so that every chunk sums as the unsplit node does).
vk::Dispatch lower_on(vk::Context& ctx, const ir::Graph& g, const ir::Node& node, ir::Graph& s,
                      const std::vector<ir::Val>& in) {
    using ir::Op;
    auto at = [&](size_t i) { return i < in.size() ? in[i] : ir::Val{}; };
    switch (node.op) {
        case Op::add:
            s.add(in[0], in[1]);
            break;
        case Op::sub:
            s.sub(in[0], in[1]);
            break;
        case Op::mul:
            s.mul(in[0], in[1]);
            break;
        case Op::div:
            s.div(in[0], in[1]);
            break;
        case Op::mul_add:
            s.mul_add(in[0], in[1], in[2]);
            break;
        case Op::scale: {
            auto a = std::get<ir::ScaleAttrs>(node.attrs);
            s.scale(in[0], a.alpha, a.beta);
            break;
        }
        case Op::silu:
            s.silu(in[0]);
            break;
        case Op::relu:
            s.relu(in[0]);
            break;
        case Op::tanh:
            s.tanh(in[0]);
            break;
        case Op::gelu:
            s.gelu(in[0], std::get<ir::GeluAttrs>(node.attrs).tanh);
            break;
        case Op::softmax:
            s.softmax(in[0]);
            break;
        case Op::layer_norm:
            s.layer_norm(in[0], at(1), at(2), std::get<ir::NormAttrs>(node.attrs).eps);
            break;
        case Op::rms_norm:
            s.rms_norm(in[0], at(1), std::get<ir::NormAttrs>(node.attrs).eps);
            break;
        case Op::linear: {  // with its fused activation, if any (ir::fuse)
            const auto* a = std::get_if<ir::LinearAttrs>(&node.attrs);
            s.linear(in[0], in[1], at(2), a ? a->act : ir::Act::none);
            break;
        }
        case Op::linear_multi: {  // in: x, then (weight, bias) per part
            const auto& a = std::get<ir::LinearMultiAttrs>(node.attrs);
            std::vector<ir::Val> w, b;
            std::vector<ir::Act> act;
            for (size_t i = 1; i + 1 < in.size(); i += 2) {
                w.push_back(in[i]);
                b.push_back(at(i + 1));
                act.push_back(a.act[(i - 1) / 2]);
            }
            s.linear_multi(in[0], w, b, act);
            break;
        }
        case Op::norm_modulate:
            s.norm_modulate(in[0], in[1], in[2], std::get<ir::NormAttrs>(node.attrs).eps);
            break;
        case Op::matmul:
            s.matmul(in[0], in[1]);
            break;
        case Op::modulate:
            s.modulate(in[0], in[1], in[2]);
            break;
        case Op::concat:
            s.concat(in[0], in[1], std::get<ir::AxisAttrs>(node.attrs).axis);
            break;
        case Op::slice: {
            auto a = std::get<ir::AxisAttrs>(node.attrs);
            s.slice(in[0], a.axis, a.start, a.length);
            break;
        }
        default:
            KILN_FAIL("internal: ", ir::op_name(node.op), " has no row split");
    }
    // Outputs keep their storage dtype (ir::store_f16).
    const std::vector<int> outs = ir::node_outputs(s.nodes().back()), orig = ir::node_outputs(node);
    for (size_t i = 0; i < outs.size(); ++i)
        if (outs[i] >= 0) s.set_storage(ir::Val{outs[i]}, g.value(orig[i]).dtype);
    vk::Dispatch d = vk::lower(s, s.nodes().back());
    if (node.op == Op::linear)
        choose_linear_as(ctx, s, s.nodes().back(), d, linear_choice(ctx, g, node));
    else
        choose_linear(ctx, s, s.nodes().back(), d);
    return d;
}

// How each binding of node (nb: inputs, then outputs) is indexed by the output's rows; fail(reason) when the node
// is not row-wise.
std::vector<Bind> binding_rows(const ir::Graph& g, const ir::Node& node, size_t nb,
                               const std::function<void(const std::string&)>& fail) {
    const Shape& so = g.value(node.out).shape;
    std::vector<Bind> how(nb, Bind::whole);
    for (size_t b = node.in.size(); b < nb; ++b) how[b] = Bind::row;
    using ir::Op;
    if (ir::linear_gated(node))  // ir::fuse makes one only where no chunk is needed (FuseOptions::view_max_bytes)
        fail("a gated linear (fused residual) is not split by rows");
    if (std::holds_alternative<ir::ActAttrs>(node.attrs))  // likewise (ir::fuse, binary_act)
        fail("an elementwise op with a fused activation is not split by rows");
    switch (node.op) {
        case Op::linear:
        case Op::linear_multi:
        case Op::layer_norm:
        case Op::rms_norm:
        case Op::softmax:
        case Op::scale:
        case Op::silu:
        case Op::relu:
        case Op::tanh:
        case Op::gelu:
            how[0] = Bind::row;
            break;  // weights, biases: whole
        case Op::matmul:
            how[0] = Bind::row;
            how[1] = g.value(node.in[1]).shape[0] == 1 ? Bind::whole : Bind::batch;
            break;
        case Op::modulate:  // x [B, N, C]; shift, scale [B, C]
        case Op::norm_modulate:
            how[0] = Bind::row;
            how[1] = how[2] = so[0] == 1 ? Bind::whole : Bind::batch;
            break;
        case Op::add:
        case Op::sub:
        case Op::mul:
        case Op::div:
        case Op::mul_add:
            for (size_t b = 0; b < node.in.size(); ++b)
                if (!classify_broadcast(g.value(node.in[b]).shape, so, how[b]))
                    fail("operand " + shape_str(g.value(node.in[b]).shape) + " broadcasts over part of the rows of " +
                         shape_str(so));
            break;
        case Op::concat:
        case Op::slice:
            if (std::get<ir::AxisAttrs>(node.attrs).axis != (int)so.size() - 1)
                fail("it runs along axis " + std::to_string(std::get<ir::AxisAttrs>(node.attrs).axis) +
                     ", not the last");
            for (size_t b = 0; b < node.in.size(); ++b) how[b] = Bind::row;
            break;
        default:
            fail(
                "only linear (fused or not), matmul, elementwise ops, modulate, layer_norm (+ modulate), rms_norm, "
                "softmax and concat/slice along the last axis split by rows");
    }
    return how;
}
}  // namespace

std::vector<Part> Executor::Impl::parts(int n) const {
    const ir::Node& node = g.nodes()[(size_t)n];
    const std::vector<int> outs = ir::node_outputs(node);
    const size_t nb = node.in.size() + outs.size();  // bindings: inputs, then the outputs
    auto value_of = [&](size_t b) { return b < node.in.size() ? node.in[b] : outs[b - node.in.size()]; };
    // The largest activation this dispatch binds; weights are placed (and checked) by plan_weights / block weights.
    int big = -1;
    for (size_t b = 0; b < nb; ++b) {
        int v = value_of(b);
        if (v >= 0 && g.value(v).role != ir::Role::weight && value_bytes(g.value(v)) > max_binding &&
            (big < 0 || value_bytes(g.value(v)) > value_bytes(g.value(big))))
            big = v;
    }
    if (big < 0) {
        vk::Dispatch d = vk::lower(g, node);
        choose_linear(ctx, g, node, d);
        return {Part{std::move(d), std::vector<Sub>(nb)}};
    }

    const Shape& so = g.value(node.out).shape;
    std::string why;
    // ir::fuse reads slices in place only in nodes within the limit (FuseOptions::view_max_bytes).
    KILN_CHECK(node.views.empty(), "internal: ", ir::op_name(node.op),
               " reads a slice in place over the binding limit");
    auto fail = [&](const std::string& reason) {
        KILN_FAIL("op ", ir::op_name(node.op), " binds activation ", shape_str(g.value(big).shape), " (",
                  value_bytes(g.value(big)), " bytes), over the binding limit of ", max_binding,
                  " bytes (maxStorageBufferRange), and cannot be split into row chunks: ", reason,
                  "; use a smaller batch or resolution");
    };
    const std::vector<Bind> how = binding_rows(g, node, nb, fail);
    const int64_t R = lead(so);
    if (so.size() < 2 || R < 2) fail("it has a single row");
    bool per_batch = false;
    const int64_t B = so[0];
    VkDeviceSize widest = 0;
    std::vector<VkDeviceSize> unit_bytes(nb, 0);  // row: bytes per row; batch: bytes per batch
    for (size_t b = 0; b < nb; ++b) {
        int v = value_of(b);
        if (v < 0) continue;
        const ir::Value& val = g.value(v);
        const bool weight = val.role == ir::Role::weight;
        if (how[b] == Bind::row) {
            if (lead(val.shape) != R) fail("input " + shape_str(val.shape) + " has other rows than " + shape_str(so));
            unit_bytes[b] = (VkDeviceSize)dtype_nbytes(val.dtype, val.shape.back());
            widest = std::max(widest, unit_bytes[b]);
        } else if (how[b] == Bind::batch) {
            per_batch = true;
            unit_bytes[b] = value_bytes(val) / (VkDeviceSize)val.shape[0];
            if (unit_bytes[b] > max_binding) fail("its per-batch operand " + shape_str(val.shape) + " is too large");
        } else if (!weight && value_bytes(val) > max_binding) {
            fail("operand " + shape_str(val.shape) + " is read whole by every row");
        }
    }
    // Chunk starts must stay aligned for binding (minStorageBufferOffsetAlignment; 16 at least: the vec4 shaders
    // read rows as 16-byte vectors): n rows of every row binding a multiple of the alignment.
    const VkDeviceSize align = std::max<VkDeviceSize>(ctx.info().min_storage_offset_align, 16);
    VkDeviceSize unit = 1;
    for (size_t b = 0; b < nb; ++b)
        if (how[b] == Bind::row && unit_bytes[b]) unit = std::lcm(unit, align / std::gcd(align, unit_bytes[b]));
    const int64_t seg = per_batch ? R / B : R;  // chunks do not cross a batch when an operand is per batch
    int64_t rows = (int64_t)(max_binding / widest / unit * unit);
    if (rows <= 0) fail("one aligned chunk of " + std::to_string(unit) + " rows already exceeds the limit");
    rows = std::min(rows, seg);
    // A linear's chunks start at multiples of 256 rows where a chunk holds that many: the tiled GEMM scales x stored
    // f32 per slice of its workgroup's BM rows (linear_gemm.glsl; BM = WM FM CM, a power of two up to 128), so a chunk
    // starting inside a workgroup's rows would give some rows other neighbours, and another power of two, than the
    // unsplit node does: equal within the split's bound, not bitwise (f16 subnormals of the scaled lo parts).
    if (node.op == ir::Op::linear) {
        const int64_t step = std::lcm((int64_t)256, (int64_t)unit);
        if (rows >= step && rows < seg) rows = rows / step * step;
    }
    for (size_t b = 0; b < nb && per_batch; ++b)
        if ((how[b] == Bind::row && seg * unit_bytes[b] % align) || (how[b] == Bind::batch && unit_bytes[b] % align))
            fail("a batch does not start at an aligned offset");

    // Chunk shapes: row values [1, .., 1, n, C] (rank kept; rank 2: [n, C]), per-batch values with batch 1.
    std::vector<Part> out;
    for (int64_t s0 = 0; s0 < R; s0 += seg) {
        for (int64_t r0 = s0; r0 < s0 + seg; r0 += rows) {
            const int64_t cnt = std::min(rows, s0 + seg - r0);
            ir::Graph s;
            std::vector<ir::Val> in;
            Part p{{}, std::vector<Sub>(nb)};
            for (size_t b = 0; b < nb; ++b) {
                int v = value_of(b);
                if (v < 0) {
                    if (b < node.in.size()) in.push_back({});
                    continue;
                }
                const ir::Value& val = g.value(v);
                Shape sh = val.shape;
                if (how[b] == Bind::row) {
                    for (auto& d : sh) d = 1;
                    sh[sh.size() - 2] = cnt, sh.back() = val.shape.back();
                    p.sub[b] = {(VkDeviceSize)r0 * unit_bytes[b], (VkDeviceSize)cnt * unit_bytes[b]};
                } else if (how[b] == Bind::batch) {
                    sh[0] = 1;
                    p.sub[b] = {(VkDeviceSize)(s0 / seg) * unit_bytes[b], unit_bytes[b]};
                }
                if (b >= node.in.size()) continue;  // the outputs' shapes follow from the op
                if (val.role == ir::Role::weight) {
                    in.push_back(s.weight(val.name, sh, val.dtype));
                } else {  // an f16-stored activation: an f32 input, then its storage (ir::store_f16)
                    in.push_back(s.input(val.name, sh, val.dtype == DType::f16 ? DType::f32 : val.dtype));
                    if (val.dtype == DType::f16) s.set_storage(in.back(), DType::f16);
                }
            }
            p.d = lower_on(ctx, g, node, s, in);
            KILN_CHECK(lead(s.values().back().shape) == cnt, "internal: row chunk of ", ir::op_name(node.op),
                       " has shape ", shape_str(s.values().back().shape));
            out.push_back(std::move(p));
        }
    }
    return out;
}

}  // namespace kiln::exec
