#include "runtime/exec/regions.h"

#include <algorithm>
#include <map>

#include "runtime/core/error.h"

namespace kiln::exec {

namespace {
bool same_value_type(const ir::Value& a, const ir::Value& b) { return a.shape == b.shape && a.dtype == b.dtype; }
}  // namespace

std::vector<BlockKind> analyze_regions(const ir::Graph& g) {
    const auto& regs = g.regions();
    const auto& nodes = g.nodes();
    std::map<std::string, BlockKind> kinds;
    std::vector<std::string> order;
    for (size_t i = 0; i < regs.size(); ++i) {
        auto& k = kinds[regs[i].kind];
        if (k.regions.empty()) {
            k.kind = regs[i].kind;
            order.push_back(regs[i].kind);
        }
        k.regions.push_back((int)i);
    }
    std::vector<BlockKind> out;
    for (auto& name : order) {
        BlockKind k = kinds[name];
        if (k.regions.size() < 2) continue;  // a lone instance has nothing to replay: it runs inline
        const ir::Region& t = regs[(size_t)k.regions[0]];
        const int len = t.end - t.first;
        k.first = t.first;
        k.end = regs[(size_t)k.regions.back()].end;
        KILN_CHECK(len > 0, "block '", name, "' 0 is empty");
        // Instance of a value's producer: which instance (or -1) and relative node position, times kOuts, plus
        // which of the node's outputs it is (linear_multi writes several).
        constexpr int kOuts = 8;
        auto where = [&](int vid) -> std::pair<int, int> {
            int p = g.value(vid).producer;
            if (p < 0) return {-1, -1};
            const auto outs = ir::node_outputs(nodes[(size_t)p]);
            const int slot = (int)(std::find(outs.begin(), outs.end(), vid) - outs.begin());
            for (size_t r = 0; r < k.regions.size(); ++r) {
                const auto& R = regs[(size_t)k.regions[r]];
                if (p >= R.first && p < R.end) return {(int)r, (p - R.first) * kOuts + slot};
            }
            return {-1, -1};
        };
        // The template's value at a position from where().
        auto tmpl_value = [&](int pos) {
            return ir::node_outputs(nodes[(size_t)(t.first + pos / kOuts)])[(size_t)(pos % kOuts)];
        };
        std::map<int, int> weight_index;  // template weight id -> k
        std::map<int, int> chain_of;      // template external X -> relative producer position of Y
        k.weights.assign(k.regions.size(), {});
        for (size_t r = 0; r < k.regions.size(); ++r) {
            const auto& R = regs[(size_t)k.regions[r]];
            KILN_CHECK(R.end - R.first == len, "block '", name, "' ", R.index, " has ", R.end - R.first,
                       " ops but block ", t.index, " has ", len, ": blocks of one kind must be identical");
            if (r > 0)
                KILN_CHECK(R.first == regs[(size_t)k.regions[r - 1]].end, "block '", name, "' ", R.index,
                           " does not directly follow the previous block");
            for (int j = 0; j < len; ++j) {
                const ir::Node &a = nodes[(size_t)(t.first + j)], &b = nodes[(size_t)(R.first + j)];
                bool same_outs = a.extra_out.size() == b.extra_out.size();
                for (size_t o = 0; same_outs && o < a.extra_out.size(); ++o)
                    same_outs =
                        (a.extra_out[o] < 0) == (b.extra_out[o] < 0) &&
                        (a.extra_out[o] < 0 || same_value_type(g.value(a.extra_out[o]), g.value(b.extra_out[o])));
                KILN_CHECK(a.op == b.op && a.attrs == b.attrs && a.views == b.views && a.in.size() == b.in.size() &&
                               same_outs && same_value_type(g.value(a.out), g.value(b.out)),
                           "block '", name, "' ", R.index, " op ", j, " (", ir::op_name(b.op), ") differs from block ",
                           t.index, " (", ir::op_name(a.op), ")");
                for (size_t s = 0; s < a.in.size(); ++s) {
                    int va = a.in[s], vb = b.in[s];
                    KILN_CHECK((va < 0) == (vb < 0), "block '", name, "' ", R.index, " op ", j, ": optional input ", s,
                               " present in one block only");
                    if (va < 0) continue;
                    KILN_CHECK(same_value_type(g.value(va), g.value(vb)), "block '", name, "' ", R.index, " op ", j,
                               " input ", s, ": shape/dtype differs from block ", t.index);
                    auto [ra, pa] = where(va);
                    auto [rb, pb] = where(vb);
                    if (rb == (int)r) {  // internal value
                        KILN_CHECK(ra == 0 && pa == pb, "block '", name, "' ", R.index, " op ", j, " input ", s,
                                   ": internal wiring differs from block ", t.index);
                    } else if (g.value(va).role == ir::Role::weight) {
                        // Per-instance weight (a weight every instance shares maps to itself).
                        KILN_CHECK(g.value(vb).role == ir::Role::weight, "block '", name, "' ", R.index, " op ", j,
                                   ": activation where block ", t.index, " has a weight");
                        auto it = weight_index.find(va);
                        if (it == weight_index.end()) {
                            KILN_CHECK(r == 0, "block '", name, "': weight layout differs between blocks");
                            it = weight_index.emplace(va, (int)k.tmpl_weights.size()).first;
                            k.tmpl_weights.push_back(va);
                            k.weights[0].push_back(va);
                        } else if (r > 0) {
                            auto& w = k.weights[r];
                            if ((int)w.size() <= it->second) w.resize((size_t)it->second + 1, -1);
                            KILN_CHECK(w[(size_t)it->second] < 0 || w[(size_t)it->second] == vb, "block '", name, "' ",
                                       R.index, ": one template weight maps to two weights");
                            w[(size_t)it->second] = vb;
                        }
                    } else if (va == vb) {  // shared by every instance (e.g. the timestep embedding)
                        KILN_CHECK(ra < 0, "block '", name, "' reads a value of another block");
                    } else {
                        KILN_CHECK(r > 0 && rb == (int)r - 1, "block '", name, "' ", R.index, " op ", j, " input ", s,
                                   " comes neither from the previous block, a weight, nor a shared value");
                        KILN_CHECK(ra < 0, "block '", name, "': chain input of block ", t.index, " is internal");
                        auto [it, fresh] = chain_of.emplace(va, pb);
                        KILN_CHECK(it->second == pb, "block '", name, "': one chain input fed by two values");
                    }
                }
            }
        }
        for (size_t r = 1; r < k.regions.size(); ++r)
            KILN_CHECK(k.weights[r].size() == k.tmpl_weights.size() &&
                           std::find(k.weights[r].begin(), k.weights[r].end(), -1) == k.weights[r].end(),
                       "block '", name, "' ", regs[(size_t)k.regions[r]].index, " does not bind every weight");
        for (auto [x, pos] : chain_of) k.chain.push_back({x, tmpl_value(pos)});

        // Uses after the blocks: only the last instance's chain outputs may be read outside.
        const auto& last = regs[(size_t)k.regions.back()];
        auto check_outside_use = [&](int v, const std::string& who) {
            auto [r, pos] = where(v);
            if (r < 0) return;
            KILN_CHECK(r == (int)k.regions.size() - 1, "block '", name, "' value used by ", who,
                       " comes from a block that is not the last");
            int y_t = tmpl_value(pos);
            auto it = std::find_if(k.chain.begin(), k.chain.end(), [&](auto& c) { return c.second == y_t; });
            KILN_CHECK(it != k.chain.end(), "block '", name, "' value used by ", who,
                       " is not carried from block to block");
            int vl = ir::node_outputs(nodes[(size_t)(last.first + pos / kOuts)])[(size_t)(pos % kOuts)];
            if (std::find_if(k.last_outputs.begin(), k.last_outputs.end(), [&](auto& p) { return p.first == vl; }) ==
                k.last_outputs.end())
                k.last_outputs.push_back({vl, it->first});
        };
        for (size_t n = 0; n < nodes.size(); ++n) {
            if ((int)n >= k.first && (int)n < k.end) continue;
            for (int v : nodes[n].in)
                if (v >= 0) check_outside_use(v, std::string("op ") + ir::op_name(nodes[n].op));
        }
        for (auto& [oname, v] : g.outputs()) check_outside_use(v, "output '" + oname + "'");
        // A chain input is overwritten by the replay: nothing after the blocks may still need its old value.
        for (auto [x, y] : k.chain) {
            for (size_t n = (size_t)k.end; n < nodes.size(); ++n)
                for (int v : nodes[n].in)
                    KILN_CHECK(v != x, "block '", name, "': the block input is read again after the blocks");
            for (auto& [oname, v] : g.outputs())
                KILN_CHECK(v != x, "block '", name, "': the block input is also the output '", oname, "'");
        }
        out.push_back(std::move(k));
    }
    return out;
}

}  // namespace kiln::exec
