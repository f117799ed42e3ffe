#include "runtime/ir/fuse.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln::ir {

namespace {
// One fusion pass per method, over a copy of the graph's nodes; a fused-away node is marked dead, and rebuild()
// makes the graph of the live ones. values: the graph's values (read only; ids are kept).
struct Fuser {
    const Graph& graph;  // as given (values are shared: ids are kept)
    const std::vector<Value>& values;
    const FuseOptions& opt;
    std::vector<Node> nodes;
    std::vector<bool> dead;
    std::vector<int> readers;  // per value: node inputs, and graph outputs (readers that cannot be fused into)
    FuseStats st;

    Fuser(const Graph& g, const std::vector<Value>& vals, const std::vector<Node>& ns,
          const std::vector<std::pair<std::string, int>>& outputs, const FuseOptions& o)
        : graph(g), values(vals), opt(o), nodes(ns), dead(ns.size(), false), readers(vals.size(), 0) {
        for (const Node& n : nodes)
            for (int v : n.in)
                if (v >= 0) readers[(size_t)v]++;
        for (auto& [name, v] : outputs) readers[(size_t)v] += 2;
    }

    // The node producing v, when v is that node's only reader's sole input from it and both lie in one region.
    int single_use_producer(int v, const Node& reader) const {
        const int p = values[(size_t)v].producer;
        if (p < 0 || dead[(size_t)p] || readers[(size_t)v] != 1 || nodes[(size_t)p].region != reader.region) return -1;
        return p;
    }
    uint64_t bytes(int v) const {
        return v < 0 ? 0 : dtype_nbytes(values[(size_t)v].dtype, shape_numel(values[(size_t)v].shape));
    }
    // Whether n's activations are within FuseOptions::view_max_bytes (no row chunks needed).
    bool fits(const Node& n) const {
        if (!opt.view_max_bytes) return true;
        for (int v : n.in)
            if (v >= 0 && values[(size_t)v].role != Role::weight && bytes(v) > opt.view_max_bytes) return false;
        for (int v : node_outputs(n))
            if (bytes(v) > opt.view_max_bytes) return false;
        return true;
    }

    // linear -> gelu / silu: the linear writes the activation's output (and stays where it is).
    void linear_act() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (n.op != Op::gelu && n.op != Op::silu) continue;
            const int p = single_use_producer(n.in[0], n);
            if (p < 0 || nodes[(size_t)p].op != Op::linear) continue;
            auto& a = std::get<LinearAttrs>(nodes[(size_t)p].attrs);
            if (a.act != Act::none) continue;
            a.act = n.op == Op::silu ? Act::silu : std::get<GeluAttrs>(n.attrs).tanh ? Act::gelu_tanh : Act::gelu;
            nodes[(size_t)p].out = n.out;
            dead[i] = true;
            st.linear_act++;
        }
    }

    // add / sub / mul / div -> gelu / silu: the binary op applies the activation to its result and writes the
    // activation's output (DiT's conditioning: silu(timestep embedding + class embedding) in every block). Only where
    // no row chunk is needed (fits): row_split re-lowers ops without their fused activation.
    void binary_act() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (n.op != Op::gelu && n.op != Op::silu) continue;
            const int p = single_use_producer(n.in[0], n);
            if (p < 0) continue;
            Node& b = nodes[(size_t)p];
            if ((b.op != Op::add && b.op != Op::sub && b.op != Op::mul && b.op != Op::div) ||
                !std::holds_alternative<NoAttrs>(b.attrs))
                continue;
            Node f = b;
            f.attrs = ActAttrs{n.op == Op::silu                    ? Act::silu
                               : std::get<GeluAttrs>(n.attrs).tanh ? Act::gelu_tanh
                                                                   : Act::gelu};
            f.out = n.out;
            if (!fits(f)) continue;
            b = std::move(f);
            dead[i] = true;
            st.binary_act++;
        }
    }

    // layer_norm (no affine) -> modulate: one norm_modulate where the modulate was (shift and scale exist there).
    void norm_modulate() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (n.op != Op::modulate) continue;
            const int p = single_use_producer(n.in[0], n);
            if (p < 0) continue;
            const Node& ln = nodes[(size_t)p];
            if (ln.op != Op::layer_norm || ln.in[1] >= 0 || ln.in[2] >= 0) continue;
            n = Node{Op::norm_modulate, {ln.in[0], n.in[1], n.in[2]}, n.out, {}, ln.attrs, n.region};
            dead[(size_t)p] = true;
            st.norm_modulate++;
        }
    }

    // add(mul(a, b), c) -> mul_add(a, b, c) where the add was (c may be either addend: f32 addition commutes).
    void mul_add() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (n.op != Op::add) continue;
            for (size_t k = 0; k < 2; ++k) {
                const int p = single_use_producer(n.in[k], n);
                if (p < 0 || nodes[(size_t)p].op != Op::mul) continue;
                const Node& m = nodes[(size_t)p];
                n = Node{Op::mul_add, {m.in[0], m.in[1], n.in[1 - k]}, n.out, {}, NoAttrs{}, n.region};
                dead[(size_t)p] = true;
                st.mul_add++;
                break;
            }
        }
    }

    // rope(reshape(rms_norm(reshape(x, [B, S, H, D])), [B, S, H*D])) -> rms_norm_rope(x) where the rope was (a
    // per-head qk-norm, then the rotary embedding: Flux). Only where no row chunks are needed (fits).
    void rms_norm_rope() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (n.op != Op::rope || !n.views.empty()) continue;
            const int r2 = single_use_producer(n.in[0], n);
            if (r2 < 0 || nodes[(size_t)r2].op != Op::reshape) continue;
            const int rn = single_use_producer(nodes[(size_t)r2].in[0], nodes[(size_t)r2]);
            if (rn < 0 || nodes[(size_t)rn].op != Op::rms_norm || !nodes[(size_t)rn].views.empty()) continue;
            const int r1 = single_use_producer(nodes[(size_t)rn].in[0], nodes[(size_t)rn]);
            if (r1 < 0 || nodes[(size_t)r1].op != Op::reshape) continue;
            const Node& rms = nodes[(size_t)rn];
            const int x = nodes[(size_t)r1].in[0];
            const Shape& so = values[(size_t)n.out].shape;
            if (values[(size_t)x].shape != so ||
                values[(size_t)rms.out].shape.back() != 2 * values[(size_t)n.in[1]].shape[1])
                continue;
            Node f{Op::rms_norm_rope, {x, rms.in[1], n.in[1], n.in[2]}, n.out, {}, rms.attrs, n.region};
            if (!fits(f)) continue;
            n = std::move(f);
            dead[(size_t)r2] = dead[(size_t)rn] = dead[(size_t)r1] = true;
            st.rms_norm_rope++;
        }
    }

    // mul_add(gate, h, res) with h = linear(..) read by nothing else -> the linear with inputs {x, w, b, gate, res}
    // where the mul_add was (x, w, b exist there: the linear came first). Runs after slice_views: a gate read in place
    // stays so (as input 3). The residual has no view and the output's shape, as has h; all f32 (store_f16 comes
    // later and keeps the fused linear's y f32, as the mul_add's was). A gate or residual that is a weight (a
    // layer-scale parameter) stays a mul_add.
    void gated_residual() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            if (dead[i] || n.op != Op::mul_add || input_view(n, 2)) continue;
            const Shape& so = values[(size_t)n.out].shape;
            for (size_t k = 0; k < 2; ++k) {
                const int p = single_use_producer(n.in[k], n);
                if (p < 0 || nodes[(size_t)p].op != Op::linear || nodes[(size_t)p].in.size() != 3 || input_view(n, k))
                    continue;
                const Node& lin = nodes[(size_t)p];
                const int gate = n.in[1 - k], res = n.in[2];
                const InputView* gv = input_view(n, 1 - k);
                const Shape& gs = gv ? gv->shape : values[(size_t)gate].shape;
                if (values[(size_t)lin.out].shape != so || values[(size_t)res].shape != so ||
                    gate_row_span(gs, so) == 0)
                    continue;
                // Gate and residual are activations: the "_off" / "_ptr" shaders select only W and b per block.
                if (values[(size_t)gate].dtype != DType::f32 || values[(size_t)res].dtype != DType::f32 ||
                    values[(size_t)lin.out].dtype != DType::f32 || values[(size_t)gate].role == Role::weight ||
                    values[(size_t)res].role == Role::weight)
                    continue;
                Node f{Op::linear, {lin.in[0], lin.in[1], lin.in[2], gate, res}, n.out, {}, lin.attrs, n.region};
                if (gv) f.views.push_back(InputView{3, gv->start, gv->width, gv->shape});
                if (!fits(f)) continue;
                n = std::move(f);
                dead[(size_t)p] = true;
                st.linear_gated++;
                break;
            }
        }
    }

    // Slices along the last axis read in place: the reader takes the slice's source with an InputView.
    void slice_views() {
        for (size_t i = 0; i < nodes.size(); ++i) {
            Node& n = nodes[i];
            size_t first = 0, end = 0;
            if (n.op == Op::add || n.op == Op::sub || n.op == Op::mul || n.op == Op::div || n.op == Op::mul_add)
                end = n.in.size();
            else if (n.op == Op::modulate || n.op == Op::norm_modulate)
                first = 1, end = 3;
            if (dead[i] || !fits(n)) continue;
            for (size_t k = first; k < end; ++k) view_input(n, k);
        }
    }
    // Input k of n read in place where it is a slice (possibly reshaped, same last dim) along the last axis.
    void view_input(Node& n, size_t k) {
        const int v = n.in[k];
        int p = single_use_producer(v, n), r = -1;
        if (p >= 0 && nodes[(size_t)p].op == Op::reshape)
            r = p, p = single_use_producer(nodes[(size_t)r].in[0], nodes[(size_t)r]);
        if (p < 0 || nodes[(size_t)p].op != Op::slice) return;
        const Node& s = nodes[(size_t)p];
        const Value& src = values[(size_t)s.in[0]];
        const auto& a = std::get<AxisAttrs>(s.attrs);
        const Shape& vs = values[(size_t)v].shape;
        if (src.role == Role::weight || a.axis != (int)src.shape.size() - 1 || vs.empty() || vs.back() != a.length ||
            input_view(n, k))
            return;
        Node trial = n;
        trial.in[k] = s.in[0];
        if (!fits(trial)) return;
        n.views.push_back(InputView{(int)k, a.start, src.shape.back(), vs});
        n.in[k] = s.in[0];
        dead[(size_t)p] = true;
        if (r >= 0) dead[(size_t)r] = true;
        st.views++;
    }

    // Linears of one x: grouped in order of appearance, up to kMultiLinear per group, at the first one's place
    // (x and every weight exist there; each output's readers come after its own linear, so after the group).
    void linear_multi() {
        std::map<std::tuple<int, int, DType>, std::vector<size_t>> open;  // (x, region, weight dtype) -> members
        std::vector<std::vector<size_t>> groups;
        auto close = [&](std::vector<size_t>& m) {
            if (m.size() >= 2) groups.push_back(m);
            m.clear();
        };
        for (size_t i = 0; i < nodes.size(); ++i) {
            const Node& n = nodes[i];
            if (!opt.linear_multi || dead[i] || n.op != Op::linear || linear_gated(n)) continue;
            const Value& w = values[(size_t)n.in[1]];
            if (w.shape[1] % 4 != 0) continue;  // linear_multi has the 4-vector form only
            if (opt.multi_member && !opt.multi_member(graph, n)) continue;
            auto& m = open[{n.in[0], n.region, w.dtype}];
            m.push_back(i);
            if (m.size() == (size_t)kMultiLinear) close(m);
        }
        for (auto& [key, m] : open) close(m);
        for (auto& m : groups) {
            Node f{Op::linear_multi, {nodes[m[0]].in[0]}, nodes[m[0]].out, {}, LinearMultiAttrs{}, nodes[m[0]].region};
            auto& a = std::get<LinearMultiAttrs>(f.attrs);
            for (size_t j = 0; j < (size_t)kMultiLinear; ++j) {
                const bool has = j < m.size();
                f.in.push_back(has ? nodes[m[j]].in[1] : -1);
                f.in.push_back(has ? nodes[m[j]].in[2] : -1);
                if (j > 0) f.extra_out.push_back(has ? nodes[m[j]].out : -1);
                if (has) a.act[j] = std::get<LinearAttrs>(nodes[m[j]].attrs).act;
            }
            for (size_t j = 1; j < m.size(); ++j) dead[m[j]] = true;
            nodes[m[0]] = std::move(f);
            st.linear_multi++;
            st.linears_grouped += (int)m.size();
        }
    }
};
}  // namespace

Graph fuse(const Graph& g, FuseStats* stats, const FuseOptions& opt) {
    Fuser f(g, g.values_, g.nodes_, g.outputs_, opt);
    f.linear_act();
    f.norm_modulate();
    f.mul_add();
    f.rms_norm_rope();
    f.slice_views();
    f.binary_act();  // after mul_add, which keeps no attributes of the add it replaces
    f.gated_residual();
    f.linear_multi();

    // The new graph: same values, live nodes renumbered, regions remapped.
    Graph out;
    out.values_ = g.values_;
    out.outputs_ = g.outputs_;
    for (auto& v : out.values_)
        if (v.producer >= 0) v.producer = -1;  // set again below for every value a live node writes
    std::vector<int> new_index(f.nodes.size() + 1, 0);
    for (size_t i = 0; i < f.nodes.size(); ++i) {
        new_index[i] = (int)out.nodes_.size();
        if (f.dead[i]) continue;
        for (int o : node_outputs(f.nodes[i]))
            if (o >= 0) out.values_[(size_t)o].producer = (int)out.nodes_.size();
        out.nodes_.push_back(std::move(f.nodes[i]));
    }
    new_index[f.nodes.size()] = (int)out.nodes_.size();
    out.regions_ = g.regions_;
    for (auto& r : out.regions_) r.first = new_index[(size_t)r.first], r.end = new_index[(size_t)r.end];
    f.st.nodes_removed = (int)(g.nodes_.size() - out.nodes_.size());
    if (stats) *stats = f.st;
    return out;
}

int64_t gate_row_span(const Shape& gs, const Shape& out) {
    if (out.empty() || gs.empty() || gs.size() > out.size() || gs.back() != out.back()) return 0;
    const size_t r = out.size(), pad = r - gs.size();
    auto dim = [&](size_t i) { return i < pad ? int64_t{1} : gs[i - pad]; };  // gs left-padded with 1s
    size_t j = 0;
    while (j + 1 < r && dim(j) == out[j]) ++j;  // the dims gs shares with out
    int64_t span = 1;
    for (size_t i = j; i + 1 < r; ++i) {
        if (dim(i) != 1) return 0;
        span *= out[i];
    }
    return std::max<int64_t>(span, 1);
}

int store_f16(Graph& g, uint64_t* bytes_saved, const std::function<bool(const Graph&, const Node&)>& f16_attention) {
    // Candidates: activations written by a linear, a concat or slice, the adaLN modulation before a linear
    // (modulate, norm_modulate), or attention where it runs a flash kernel. A candidate stays one while every reader
    // is a linear reading it as x, attention reading it as q, k or v, or a concat or slice whose output stays a
    // candidate (it then copies the f16 values on, or rounds its f32 inputs once at its own store); to a fixed
    // point, since dropping a concat or slice drops its inputs.
    std::vector<bool> cand(g.values_.size(), false);
    std::vector<std::vector<std::pair<int, size_t>>> readers(g.values_.size());  // (node, input slot)
    for (size_t i = 0; i < g.nodes_.size(); ++i) {
        const Node& n = g.nodes_[i];
        for (size_t k = 0; k < n.in.size(); ++k)
            if (n.in[k] >= 0) readers[(size_t)n.in[k]].push_back({(int)i, k});
        const bool modulation = n.op == Op::modulate || n.op == Op::norm_modulate;  // shift/scale may be views
        // Attention writes f16 where it reads f16 (the flash kernels), whatever views its inputs are.
        const bool attention = n.op == Op::attention && f16_attention && f16_attention(g, n);
        const bool copy = n.op == Op::concat || n.op == Op::slice;  // f16 in, f16 out unchanged; f32 in rounded once
        if ((n.op != Op::linear && !copy && !modulation && !attention) || linear_gated(n)) continue;
        const Value& v = g.values_[(size_t)n.out];
        // Concats read in place through views are not expected here; a concat reads whole values.
        if (v.role == Role::activation && v.dtype == DType::f32 && (n.views.empty() || modulation || attention))
            cand[(size_t)n.out] = true;
    }
    for (auto& [name, v] : g.outputs_) cand[(size_t)v] = false;  // graph outputs stay f32
    for (size_t v = 0; v < cand.size(); ++v)
        if (cand[v] && readers[v].empty()) cand[v] = false;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t v = 0; v < cand.size(); ++v) {
            if (!cand[v]) continue;
            for (auto [ni, k] : readers[v]) {
                const Node& r = g.nodes_[(size_t)ni];
                const bool ok = (r.op == Op::linear && k == 0) ||
                                (r.op == Op::attention && k < 3 && f16_attention && f16_attention(g, r)) ||
                                ((r.op == Op::concat || r.op == Op::slice) && cand[(size_t)r.out]);
                if (!ok) {
                    cand[v] = false, changed = true;
                    break;
                }
            }
        }
    }
    int count = 0;
    uint64_t saved = 0;
    for (size_t v = 0; v < cand.size(); ++v) {
        if (!cand[v]) continue;
        g.values_[v].dtype = DType::f16;
        saved += (uint64_t)shape_numel(g.values_[v].shape) * 2;
        count++;
    }
    if (bytes_saved) *bytes_saved = saved;
    return count;
}

}  // namespace kiln::ir
