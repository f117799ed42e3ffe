#include "runtime/ir/graph.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace kiln::ir {

const char* op_name(Op op) {
    static const char* names[] = {
#define KILN_X(name, kind) #name,
        KILN_OPS(KILN_X)
#undef KILN_X
    };
    return names[(int)op];
}

OpKind op_kind(Op op) {
    static const OpKind kinds[] = {
#define KILN_X(name, kind) OpKind::kind,
        KILN_OPS(KILN_X)
#undef KILN_X
    };
    return kinds[(int)op];
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    size_t n = std::max(a.size(), b.size());
    Shape out(n);
    for (size_t i = 0; i < n; ++i) {
        int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
        int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
        KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

namespace {
int norm_axis(int axis, size_t rank, const char* op) {
    int r = (int)rank;
    KILN_CHECK(axis >= -r && axis < r, op, ": axis ", axis, " out of range for rank ", r);
    return axis < 0 ? axis + r : axis;
}
}  // namespace

Val Graph::add_value(Value v) {
    values_.push_back(std::move(v));
    return Val{(int)values_.size() - 1};
}

Val Graph::input(const std::string& name, Shape shape, DType dtype) {
    KILN_CHECK(dtype == DType::f32 || dtype == DType::i32, "input '", name, "': dtype ", dtype_name(dtype),
               " unsupported (f32 or i32)");
    return add_value(Value{std::move(shape), dtype, Role::input, name});
}

Val Graph::weight(const std::string& name, Shape shape, DType dtype) {
    KILN_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype_is_quant(dtype), "weight '",
               name, "': dtype ", dtype_name(dtype), " unsupported (f32, f16, bf16 or a quantized type)");
    KILN_CHECK(!dtype_is_quant(dtype) || (shape.size() == 2 && shape[1] % dtype_block(dtype) == 0), "weight '", name,
               "': ", dtype_name(dtype), " ", shape_str(shape), " must be a matrix whose rows are whole ",
               dtype_block(dtype), "-value blocks");
    return add_value(Value{std::move(shape), dtype, Role::weight, name});
}

void Graph::output(Val v, const std::string& name) { outputs_.push_back({name, v.id}); }

Val Graph::add_node(Op op, std::vector<int> in, Shape out_shape, Attrs attrs) {
    for (int64_t d : out_shape) KILN_CHECK(d > 0, op_name(op), ": empty output shape ", shape_str(out_shape));
    Value v{std::move(out_shape), DType::f32, Role::activation, {}, (int)nodes_.size(), open_region_};
    Val out = add_value(std::move(v));
    nodes_.push_back(Node{op, std::move(in), out.id, {}, std::move(attrs), open_region_});
    return out;
}

void Graph::check_f32(Op op, Val v, const char* what) const {
    KILN_CHECK(v.id >= 0 && v.id < (int)values_.size(), op_name(op), ": ", what, " is not a value of this graph");
    KILN_CHECK(value(v).dtype == DType::f32, op_name(op), ": ", what, " must be f32 (got ", dtype_name(value(v).dtype),
               " for '", value(v).name, "')");
}

Val Graph::binary(Op op, Val a, Val b) {
    check_f32(op, a, "a");
    check_f32(op, b, "b");
    Shape s = broadcast_shapes(shape(a), shape(b), op_name(op));
    KILN_CHECK(s.size() <= 6, op_name(op), ": rank ", s.size(), " > 6");
    return add_node(op, {a.id, b.id}, s);
}
Val Graph::add(Val a, Val b) { return binary(Op::add, a, b); }
Val Graph::mul_add(Val a, Val b, Val c) {
    for (Val t : {a, b, c}) check_f32(Op::mul_add, t, "a/b/c");
    Shape s = broadcast_shapes(broadcast_shapes(shape(a), shape(b), "mul_add"), shape(c), "mul_add");
    KILN_CHECK(s.size() <= 6, "mul_add: rank ", s.size(), " > 6");
    return add_node(Op::mul_add, {a.id, b.id, c.id}, s);
}
Val Graph::sub(Val a, Val b) { return binary(Op::sub, a, b); }
Val Graph::mul(Val a, Val b) { return binary(Op::mul, a, b); }
Val Graph::div(Val a, Val b) { return binary(Op::div, a, b); }

Val Graph::scale(Val x, float alpha, float beta) {
    check_f32(Op::scale, x, "x");
    return add_node(Op::scale, {x.id}, shape(x), ScaleAttrs{alpha, beta});
}
Val Graph::silu(Val x) {
    check_f32(Op::silu, x, "x");
    return add_node(Op::silu, {x.id}, shape(x));
}
Val Graph::relu(Val x) {
    check_f32(Op::relu, x, "x");
    return add_node(Op::relu, {x.id}, shape(x));
}
Val Graph::tanh(Val x) {
    check_f32(Op::tanh, x, "x");
    return add_node(Op::tanh, {x.id}, shape(x));
}
Val Graph::gelu(Val x, bool tanh_approx) {
    check_f32(Op::gelu, x, "x");
    return add_node(Op::gelu, {x.id}, shape(x), GeluAttrs{tanh_approx});
}
Val Graph::softmax(Val x) {
    check_f32(Op::softmax, x, "x");
    return add_node(Op::softmax, {x.id}, shape(x));
}

Val Graph::layer_norm(Val x, Val w, Val b, float eps) {
    check_f32(Op::layer_norm, x, "x");
    const Shape& s = shape(x);
    KILN_CHECK(!s.empty(), "layer_norm: x must have rank >= 1");
    for (Val p : {w, b}) {
        if (!p) continue;
        check_f32(Op::layer_norm, p, "weight/bias");
        KILN_CHECK(shape(p) == Shape{s.back()}, "layer_norm: weight/bias shape ", shape_str(shape(p)),
                   " does not match the last dim of x ", shape_str(s));
    }
    KILN_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
    return add_node(Op::layer_norm, {x.id, w.id, b.id}, s, NormAttrs{eps, 1});
}

Val Graph::group_norm(Val x, int groups, Val w, Val b, float eps) {
    check_f32(Op::group_norm, x, "x");
    const Shape& s = shape(x);
    KILN_CHECK(s.size() >= 2, "group_norm: x must be [B, C, ...], got ", shape_str(s));
    KILN_CHECK(groups > 0 && s[1] % groups == 0, "group_norm: ", groups, " groups do not divide ", s[1],
               " channels of x ", shape_str(s));
    for (Val p : {w, b}) {
        if (!p) continue;
        check_f32(Op::group_norm, p, "weight/bias");
        KILN_CHECK(shape(p) == Shape{s[1]}, "group_norm: weight/bias shape ", shape_str(shape(p)),
                   " does not match the channels of x ", shape_str(s));
    }
    return add_node(Op::group_norm, {x.id, w.id, b.id}, s, NormAttrs{eps, groups});
}

Val Graph::rms_norm(Val x, Val w, float eps) {
    check_f32(Op::rms_norm, x, "x");
    const Shape& s = shape(x);
    if (w) {
        check_f32(Op::rms_norm, w, "weight");
        KILN_CHECK(shape(w) == Shape{s.back()}, "rms_norm: weight shape ", shape_str(shape(w)),
                   " does not match the last dim of x ", shape_str(s));
    }
    return add_node(Op::rms_norm, {x.id, w.id}, s, NormAttrs{eps, 1});
}

void Graph::set_storage(Val v, DType dt) {
    KILN_CHECK(v.id >= 0 && v.id < (int)values_.size() && values_[(size_t)v.id].role != Role::weight &&
                   (dt == DType::f32 || dt == DType::f16),
               "set_storage: an activation or input stored as f32 or f16");
    values_[(size_t)v.id].dtype = dt;
}

Val Graph::linear(Val x, Val w, Val b, Act act) {
    // x may be stored f16 (ir::store_f16: only linears read such values).
    KILN_CHECK(x.id >= 0 && x.id < (int)values_.size(), "linear: x is not a value of this graph");
    if (value(x).dtype != DType::f16 || value(x).role == Role::weight) check_f32(Op::linear, x, "x");
    const Shape &sx = shape(x), &sw = shape(w);
    KILN_CHECK(sw.size() == 2, "linear: weight '", value(w).name, "' must be [N, K], got ", shape_str(sw));
    KILN_CHECK(!sx.empty() && sx.back() == sw[1], "linear: x ", shape_str(sx), " last dim does not match weight '",
               value(w).name, "' ", shape_str(sw), " (expects [N, K])");
    if (b) {
        check_f32(Op::linear, b, "bias");
        KILN_CHECK(shape(b) == Shape{sw[0]}, "linear: bias ", shape_str(shape(b)), " does not match weight ",
                   shape_str(sw));
    }
    Shape out = sx;
    out.back() = sw[0];
    return add_node(Op::linear, {x.id, w.id, b.id}, out, LinearAttrs{act});
}

std::vector<Val> Graph::linear_multi(Val x, const std::vector<Val>& w, const std::vector<Val>& b,
                                     const std::vector<Act>& act) {
    check_f32(Op::linear_multi, x, "x");
    KILN_CHECK(!w.empty() && w.size() <= (size_t)kMultiLinear && b.size() == w.size() && act.size() == w.size(),
               "linear_multi: 1 to ", kMultiLinear, " weights, each with a bias slot and an activation (got ", w.size(),
               ", ", b.size(), ", ", act.size(), ")");
    const Shape& sx = shape(x);
    std::vector<int> in{x.id};
    LinearMultiAttrs a;
    std::vector<Shape> outs;
    for (size_t i = 0; i < w.size(); ++i) {
        const Shape& sw = shape(w[i]);
        KILN_CHECK(sw.size() == 2 && !sx.empty() && sx.back() == sw[1] && value(w[i]).dtype == value(w[0]).dtype,
                   "linear_multi: weight '", value(w[i]).name, "' ", shape_str(sw), " (", dtype_name(value(w[i]).dtype),
                   ") must be [N, K] with K = ", sx.empty() ? 0 : sx.back(), " and the dtype of the first weight");
        if (b[i]) {
            check_f32(Op::linear_multi, b[i], "bias");
            KILN_CHECK(shape(b[i]) == Shape{sw[0]}, "linear_multi: bias ", shape_str(shape(b[i])),
                       " does not match weight ", shape_str(sw));
        }
        in.push_back(w[i].id);
        in.push_back(b[i].id);
        a.act[i] = act[i];
        Shape o = sx;
        o.back() = sw[0];
        outs.push_back(o);
    }
    for (size_t i = w.size(); i < (size_t)kMultiLinear; ++i) in.push_back(-1), in.push_back(-1);
    std::vector<Val> r{add_node(Op::linear_multi, in, outs[0], a)};
    nodes_.back().extra_out.assign((size_t)kMultiLinear - 1, -1);
    for (size_t i = 1; i < outs.size(); ++i) {
        Val v = add_value(Value{outs[i], DType::f32, Role::activation, {}, (int)nodes_.size() - 1, open_region_});
        nodes_.back().extra_out[i - 1] = v.id;
        r.push_back(v);
    }
    return r;
}

Val Graph::norm_modulate(Val x, Val shift, Val scale, float eps) {
    for (Val t : {x, shift, scale}) check_f32(Op::norm_modulate, t, "x/shift/scale");
    const Shape& s = shape(x);
    KILN_CHECK(s.size() == 3, "norm_modulate: x must be [B, N, C], got ", shape_str(s));
    for (Val t : {shift, scale})
        KILN_CHECK(shape(t) == (Shape{s[0], s[2]}), "norm_modulate: shift/scale ", shape_str(shape(t)),
                   " must be [B, C] for x ", shape_str(s));
    KILN_CHECK(eps >= 0, "norm_modulate: eps must be >= 0, got ", eps);
    return add_node(Op::norm_modulate, {x.id, shift.id, scale.id}, s, NormAttrs{eps, 1});
}

Val Graph::matmul(Val a, Val b) {
    check_f32(Op::matmul, a, "a");
    check_f32(Op::matmul, b, "b");
    const Shape &sa = shape(a), &sb = shape(b);
    KILN_CHECK(sa.size() == 3 && sb.size() == 3 && sa[2] == sb[1] && (sb[0] == sa[0] || sb[0] == 1), "matmul: shapes ",
               shape_str(sa), " @ ", shape_str(sb), " do not match ([B, M, K] @ [B|1, K, N])");
    return add_node(Op::matmul, {a.id, b.id}, {sa[0], sa[1], sb[2]});
}

Val Graph::attention(Val q, Val k, Val v, int heads, Val mask, float scale) {
    AttentionAttrs a;
    a.heads = heads;
    a.scale = scale;
    return attention(q, k, v, a, mask);
}

Val Graph::attention(Val q, Val k, Val v, const AttentionAttrs& attrs, Val mask) {
    for (Val t : {q, k, v}) {  // f32, or an activation stored f16 (the flash kernel reads it)
        KILN_CHECK(t.id >= 0 && t.id < (int)values_.size(), "attention: q/k/v is not a value of this graph");
        if (value(t).dtype != DType::f16 || value(t).role == Role::weight) check_f32(Op::attention, t, "q/k/v");
    }
    AttentionAttrs a = attrs;
    const int heads = a.heads;
    if (a.kv_heads == 0) a.kv_heads = heads;
    const Shape &sq = shape(q), &sk = shape(k), &sv = shape(v);
    KILN_CHECK(sq.size() == 3 && sk.size() == 3 && sv.size() == 3, "attention: q/k/v must be [B, S, H*D], got ",
               shape_str(sq), ", ", shape_str(sk), ", ", shape_str(sv));
    KILN_CHECK(heads > 0 && sq[2] % heads == 0, "attention: ", heads, " heads do not divide width ", sq[2]);
    KILN_CHECK(a.kv_heads > 0 && heads % a.kv_heads == 0, "attention: ", heads, " query heads are not a multiple of ",
               a.kv_heads, " key/value heads");
    KILN_CHECK(sk == sv && sq[0] == sk[0] && sk[2] * heads == sq[2] * a.kv_heads, "attention: q ", shape_str(sq),
               ", k ", shape_str(sk), ", v ", shape_str(sv), " do not match (", heads, " query heads, ", a.kv_heads,
               " key/value heads)");
    KILN_CHECK(a.softcap >= 0 && std::isfinite(a.softcap) && std::isfinite(a.scale), "attention: softcap ", a.softcap,
               " and scale ", a.scale, " must be finite, softcap >= 0");
    if (mask) {
        check_f32(Op::attention, mask, "mask");
        const Shape& sm = shape(mask);
        KILN_CHECK(sm.size() == 3 && (sm[0] == 1 || sm[0] == sq[0]) && (sm[1] == 1 || sm[1] == sq[1]) && sm[2] == sk[1],
                   "attention: mask ", shape_str(sm), " must be [B|1, Sq|1, Sk] for q ", shape_str(sq), ", k ",
                   shape_str(sk));
    }
    return add_node(Op::attention, {q.id, k.id, v.id, mask.id}, sq, a);
}

Val Graph::modulate(Val x, Val shift, Val scale) {
    for (Val t : {x, shift, scale}) check_f32(Op::modulate, t, "x/shift/scale");
    const Shape& s = shape(x);
    KILN_CHECK(s.size() == 3, "modulate: x must be [B, N, C], got ", shape_str(s));
    for (Val t : {shift, scale})
        KILN_CHECK(shape(t) == (Shape{s[0], s[2]}), "modulate: shift/scale ", shape_str(shape(t)),
                   " must be [B, C] for x ", shape_str(s));
    return add_node(Op::modulate, {x.id, shift.id, scale.id}, s);
}

Val Graph::rope(Val x, Val cos, Val sin) {
    for (Val t : {x, cos, sin}) check_f32(Op::rope, t, "x/cos/sin");
    const Shape &s = shape(x), &sc = shape(cos);
    KILN_CHECK(s.size() == 3, "rope: x must be [B, S, H*D], got ", shape_str(s));
    KILN_CHECK(sc.size() == 2 && sc[0] == s[1] && shape(sin) == sc, "rope: cos ", shape_str(sc), " / sin ",
               shape_str(shape(sin)), " must be [S, D/2] with S = ", s[1], " for x ", shape_str(s));
    KILN_CHECK(s[2] % (2 * sc[1]) == 0, "rope: head dim 2*", sc[1], " does not divide width ", s[2], " of x ",
               shape_str(s));
    return add_node(Op::rope, {x.id, cos.id, sin.id}, s);
}

Val Graph::rms_norm_rope(Val x, Val w, Val cos, Val sin, float eps) {
    for (Val t : {x, cos, sin}) check_f32(Op::rms_norm_rope, t, "x/cos/sin");
    const Shape &s = shape(x), &sc = shape(cos);
    KILN_CHECK(s.size() == 3, "rms_norm_rope: x must be [B, S, H*D], got ", shape_str(s));
    KILN_CHECK(sc.size() == 2 && sc[0] == s[1] && shape(sin) == sc, "rms_norm_rope: cos ", shape_str(sc), " / sin ",
               shape_str(shape(sin)), " must be [S, D/2] with S = ", s[1], " for x ", shape_str(s));
    KILN_CHECK(sc[1] > 0 && s[2] % (2 * sc[1]) == 0, "rms_norm_rope: head dim 2*", sc[1], " does not divide width ",
               s[2], " of x ", shape_str(s));
    if (w) {
        check_f32(Op::rms_norm_rope, w, "weight");
        KILN_CHECK(shape(w) == Shape{2 * sc[1]}, "rms_norm_rope: weight shape ", shape_str(shape(w)),
                   " is not the head dim ", 2 * sc[1]);
    }
    KILN_CHECK(eps >= 0, "rms_norm_rope: eps must be >= 0, got ", eps);
    return add_node(Op::rms_norm_rope, {x.id, w.id, cos.id, sin.id}, s, NormAttrs{eps, 1});
}

Val Graph::embedding(Val table, Val ids) {
    const Shape &st = shape(table), &si = shape(ids);
    KILN_CHECK(!dtype_is_quant(value(table).dtype), "embedding: table '", value(table).name, "' is ",
               dtype_name(value(table).dtype), "; quantized weights are linear operands only");
    KILN_CHECK(st.size() == 2, "embedding: table '", value(table).name, "' must be [V, D], got ", shape_str(st));
    KILN_CHECK(value(ids).dtype == DType::i32 && si.size() == 1, "embedding: ids must be i32 [N], got ",
               dtype_name(value(ids).dtype), " ", shape_str(si));
    return add_node(Op::embedding, {table.id, ids.id}, {si[0], st[1]});
}

Val Graph::timestep_embedding(Val t, const TimestepAttrs& a) {
    check_f32(Op::timestep_embedding, t, "t");
    KILN_CHECK(shape(t).size() == 1, "timestep_embedding: t must be [N], got ", shape_str(shape(t)));
    KILN_CHECK(a.dim >= 2, "timestep_embedding: dim must be >= 2, got ", a.dim);
    return add_node(Op::timestep_embedding, {t.id}, {shape(t)[0], a.dim}, a);
}

Val Graph::conv2d(Val x, Val w, Val b, const Conv2dAttrs& a) {
    check_f32(Op::conv2d, x, "x");
    const Shape &sx = shape(x), &sw = shape(w);
    KILN_CHECK(!dtype_is_quant(value(w).dtype), "conv2d: weight '", value(w).name, "' is ", dtype_name(value(w).dtype),
               "; quantized weights are linear operands only");
    KILN_CHECK(a.groups >= 1, "conv2d: groups must be >= 1, got ", a.groups);
    KILN_CHECK(sx.size() == 4 && sw.size() == 4 && sx[1] == sw[1] * a.groups && sw[0] % a.groups == 0, "conv2d: x ",
               shape_str(sx), " and weight '", value(w).name, "' ", shape_str(sw), " do not match with groups ",
               a.groups, " ([B, C, H, W] and [O, C / groups, kh, kw], O a multiple of groups)");
    KILN_CHECK(a.stride_h > 0 && a.stride_w > 0 && a.pad_h >= 0 && a.pad_w >= 0, "conv2d: bad stride/padding ",
               a.stride_h, "x", a.stride_w, " / ", a.pad_h, "x", a.pad_w);
    if (b) {
        check_f32(Op::conv2d, b, "bias");
        KILN_CHECK(shape(b) == Shape{sw[0]}, "conv2d: bias ", shape_str(shape(b)), " does not match weight ",
                   shape_str(sw));
    }
    int64_t ho = (sx[2] + 2 * a.pad_h - sw[2]) / a.stride_h + 1;
    int64_t wo = (sx[3] + 2 * a.pad_w - sw[3]) / a.stride_w + 1;
    KILN_CHECK(ho > 0 && wo > 0, "conv2d: kernel ", shape_str(sw), " larger than padded input ", shape_str(sx));
    return add_node(Op::conv2d, {x.id, w.id, b.id}, {sx[0], sw[0], ho, wo}, a);
}

Val Graph::upsample_nearest2x(Val x) {
    check_f32(Op::upsample_nearest2x, x, "x");
    const Shape& s = shape(x);
    KILN_CHECK(s.size() == 4, "upsample_nearest2x: x must be [B, C, H, W], got ", shape_str(s));
    return add_node(Op::upsample_nearest2x, {x.id}, {s[0], s[1], 2 * s[2], 2 * s[3]});
}

Val Graph::permute(Val x, const std::vector<int>& perm) {
    check_f32(Op::permute, x, "x");
    const Shape& s = shape(x);
    KILN_CHECK(perm.size() == s.size() && s.size() <= 6, "permute: perm of size ", perm.size(), " for x ", shape_str(s),
               " (rank <= 6)");
    PermuteAttrs a;
    Shape out(s.size());
    std::vector<bool> used(s.size());
    for (size_t i = 0; i < perm.size(); ++i) {
        int p = norm_axis(perm[i], s.size(), "permute");
        KILN_CHECK(!used[(size_t)p], "permute: axis ", p, " repeated");
        used[(size_t)p] = true;
        a.perm[i] = p;
        out[i] = s[(size_t)p];
    }
    return add_node(Op::permute, {x.id}, out, a);
}

Val Graph::transpose(Val x, int a, int b) {
    size_t r = shape(x).size();
    std::vector<int> perm(r);
    for (size_t i = 0; i < r; ++i) perm[i] = (int)i;
    std::swap(perm[(size_t)norm_axis(a, r, "transpose")], perm[(size_t)norm_axis(b, r, "transpose")]);
    return permute(x, perm);
}

Val Graph::concat(Val a, Val b, int axis) {
    // a and b may be stored f16 (ir::store_f16: a concat then reads them as f32 values).
    for (auto [v, what] : {std::pair{a, "a"}, std::pair{b, "b"}}) {
        KILN_CHECK(v.id >= 0 && v.id < (int)values_.size(), "concat: ", what, " is not a value of this graph");
        if (value(v).dtype != DType::f16 || value(v).role == Role::weight) check_f32(Op::concat, v, what);
    }
    const Shape &sa = shape(a), &sb = shape(b);
    KILN_CHECK(sa.size() == sb.size() && sa.size() <= 6, "concat: ranks differ: ", shape_str(sa), ", ", shape_str(sb));
    int ax = norm_axis(axis, sa.size(), "concat");
    Shape out = sa;
    for (size_t i = 0; i < sa.size(); ++i)
        if ((int)i != ax)
            KILN_CHECK(sa[i] == sb[i], "concat: ", shape_str(sa), " and ", shape_str(sb), " differ off axis ", ax);
    out[(size_t)ax] += sb[(size_t)ax];
    return add_node(Op::concat, {a.id, b.id}, out, AxisAttrs{ax, 0, 0});
}

Val Graph::slice(Val x, int axis, int64_t start, int64_t length) {
    // x may be stored f16 (ir::store_f16: a slice then copies f16 values on, or reads them as f32 values).
    KILN_CHECK(x.id >= 0 && x.id < (int)values_.size(), "slice: x is not a value of this graph");
    if (value(x).dtype != DType::f16 || value(x).role == Role::weight) check_f32(Op::slice, x, "x");
    const Shape& s = shape(x);
    KILN_CHECK(s.size() <= 6, "slice: rank > 6");
    int ax = norm_axis(axis, s.size(), "slice");
    KILN_CHECK(start >= 0 && length > 0 && start + length <= s[(size_t)ax], "slice: [", start, ", ", start + length,
               ") out of range for axis ", ax, " of ", shape_str(s));
    Shape out = s;
    out[(size_t)ax] = length;
    return add_node(Op::slice, {x.id}, out, AxisAttrs{ax, start, length});
}

std::vector<Val> Graph::split(Val x, int axis, const std::vector<int64_t>& sizes) {
    std::vector<Val> out;
    int64_t start = 0;
    for (int64_t n : sizes) {
        out.push_back(slice(x, axis, start, n));
        start += n;
    }
    int ax = norm_axis(axis, shape(x).size(), "split");
    KILN_CHECK(start == shape(x)[(size_t)ax], "split: sizes sum to ", start, " but axis ", ax, " of ",
               shape_str(shape(x)), " has ", shape(x)[(size_t)ax]);
    return out;
}

std::vector<Val> Graph::chunk(Val x, int axis, int n) {
    int ax = norm_axis(axis, shape(x).size(), "chunk");
    int64_t d = shape(x)[(size_t)ax];
    KILN_CHECK(n > 0 && d % n == 0, "chunk: ", n, " chunks do not divide ", d);
    return split(x, ax, std::vector<int64_t>((size_t)n, d / n));
}

Val Graph::reshape(Val x, Shape s) {
    int64_t known = 1, neg = -1;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == -1) {
            KILN_CHECK(neg < 0, "reshape: more than one -1 in ", shape_str(s));
            neg = (int64_t)i;
        } else {
            KILN_CHECK(s[i] > 0, "reshape: bad dim in ", shape_str(s));
            known *= s[i];
        }
    }
    int64_t n = shape_numel(shape(x));
    if (neg >= 0) {
        KILN_CHECK(n % known == 0, "reshape: ", shape_str(shape(x)), " cannot become ", shape_str(s));
        s[(size_t)neg] = n / known;
    }
    KILN_CHECK(shape_numel(s) == n, "reshape: ", shape_str(shape(x)), " (", n, " elements) cannot become ",
               shape_str(s));
    KILN_CHECK(!dtype_is_quant(value(x).dtype), "reshape: '", value(x).name, "' is ", dtype_name(value(x).dtype),
               "; quantized weights are linear operands only");
    Val out = add_node(Op::reshape, {x.id}, s);
    values_[(size_t)out.id].dtype = value(x).dtype;
    return out;
}

Val Graph::patchify(Val x, int p) {
    const Shape& s = shape(x);
    KILN_CHECK(s.size() == 4 && s[2] % p == 0 && s[3] % p == 0, "patchify: x ", shape_str(s),
               " must be [B, C, H, W] with H, W divisible by ", p);
    int64_t B = s[0], C = s[1], h = s[2] / p, w = s[3] / p;
    Val t = reshape(x, {B, C, h, p, w, p});    // [B, C, h, py, w, px]
    t = permute(t, {0, 2, 4, 1, 3, 5});        // [B, h, w, C, py, px]
    return reshape(t, {B, h * w, C * p * p});  // [B, h*w, C*p*p]
}

Val Graph::unpatchify(Val x, int p, int channels, int h, int w) {
    const Shape& s = shape(x);
    KILN_CHECK(s.size() == 3 && s[1] == (int64_t)h * w && s[2] == (int64_t)p * p * channels, "unpatchify: x ",
               shape_str(s), " is not [B, ", h * w, ", ", p * p * channels, "]");
    int64_t B = s[0];
    Val t = reshape(x, {B, h, w, p, p, channels});  // n h w p q c
    t = permute(t, {0, 5, 1, 3, 2, 4});             // n c h p w q
    return reshape(t, {B, channels, (int64_t)h * p, (int64_t)w * p});
}

void Graph::begin_region(const std::string& kind, int index) {
    KILN_CHECK(open_region_ < 0, "begin_region: region '", kind, "' ", index, " opened inside another");
    regions_.push_back(Region{kind, index, (int)nodes_.size(), (int)nodes_.size()});
    open_region_ = (int)regions_.size() - 1;
}

void Graph::end_region() {
    KILN_CHECK(open_region_ >= 0, "end_region without begin_region");
    regions_[(size_t)open_region_].end = (int)nodes_.size();
    open_region_ = -1;
}

std::vector<int> Graph::inputs() const {
    std::vector<int> r;
    for (size_t i = 0; i < values_.size(); ++i)
        if (values_[i].role == Role::input) r.push_back((int)i);
    return r;
}

std::vector<int> Graph::weights() const {
    std::vector<int> r;
    for (size_t i = 0; i < values_.size(); ++i)
        if (values_[i].role == Role::weight) r.push_back((int)i);
    return r;
}

}  // namespace kiln::ir
