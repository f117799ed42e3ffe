#include "runtime/ir/level_order.h"

#include <algorithm>
#include <numeric>

namespace kiln::ir {

namespace {
// Stretches: every region's [first, end), and the runs of nodes between them.
std::vector<std::pair<int, int>> stretches(const Graph& g) {
    std::vector<std::pair<int, int>> out;
    std::vector<Region> regions = g.regions();
    std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.first < b.first; });
    int at = 0;
    for (const Region& r : regions) {
        if (r.first > at) out.push_back({at, r.first});
        out.push_back({r.first, r.end});
        at = std::max(at, r.end);
    }
    if ((int)g.nodes().size() > at) out.push_back({at, (int)g.nodes().size()});
    return out;
}

// Each node's level within its stretch; returns the stretch's number of levels. depth[v]: the level after which
// value v is available within the stretch (0: from outside it). A compute node's output is one level past the node;
// a view's (no dispatch) is its input's.
int levels(const Graph& g, int first, int end, std::vector<int>& depth, std::vector<int>& level) {
    int top = 0;
    for (int i = first; i < end; ++i) {
        const Node& n = g.nodes()[(size_t)i];
        int l = 0;
        for (int v : n.in)
            if (v >= 0) {
                const int p = g.values()[(size_t)v].producer;
                if (p >= first && p < i) l = std::max(l, depth[(size_t)v]);
            }
        level[(size_t)i] = l;
        const int d = op_kind(n.op) == OpKind::view ? l : l + 1;
        for (int o : node_outputs(n))
            if (o >= 0) depth[(size_t)o] = d;
        top = std::max(top, d);
    }
    return top;
}
}  // namespace

std::vector<int> level_run_ends(const Graph& g) {
    std::vector<int> depth(g.values().size(), 0), level(g.nodes().size(), 0), end(g.nodes().size());
    for (auto [first, last] : stretches(g)) {
        levels(g, first, last, depth, level);
        for (int i = last - 1; i >= first; --i)
            end[(size_t)i] = i + 1 < last && level[(size_t)i + 1] == level[(size_t)i] ? end[(size_t)i + 1] : i;
    }
    return end;
}

Graph order_by_level(const Graph& g, LevelOrderStats* stats) {
    LevelOrderStats st;
    const std::vector<Node>& nodes = g.nodes_;
    std::vector<int> depth(g.values_.size(), 0), level(nodes.size(), 0), order(nodes.size());
    std::iota(order.begin(), order.end(), 0);
    for (auto [first, end] : stretches(g)) {
        st.levels += levels(g, first, end, depth, level);
        std::stable_sort(order.begin() + first, order.begin() + end,
                         [&](int a, int b) { return level[(size_t)a] < level[(size_t)b]; });
    }

    Graph out;
    out.values_ = g.values_;
    out.outputs_ = g.outputs_;
    out.regions_ = g.regions_;  // the same ranges: nodes move only within their stretch
    for (size_t i = 0; i < order.size(); ++i) {
        st.moved += order[i] != (int)i;
        const Node& n = nodes[(size_t)order[i]];
        for (int o : node_outputs(n))
            if (o >= 0) out.values_[(size_t)o].producer = (int)out.nodes_.size();
        out.nodes_.push_back(n);
    }
    if (stats) *stats = st;
    return out;
}

}  // namespace kiln::ir
