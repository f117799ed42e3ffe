#pragma once
// Region analysis for the regional JIT: checks that every block instance of a kind has the same
// structure as the first (the template) and works out how instance r differs from it: its weights,
// and the chain values that carry the residual stream(s) from instance r-1 to r.
#include <string>
#include <vector>

#include "runtime/ir/graph.h"

namespace kiln::exec {

struct BlockKind {
    std::string kind;
    std::vector<int> regions;               // indices into Graph::regions(), in execution order; [0] is the template
    int first = 0, end = 0;                 // node range of all instances together
    std::vector<int> tmpl_weights;          // weight value ids the template reads (per-instance weights)
    std::vector<std::vector<int>> weights;  // [instance][k]: the weight replacing tmpl_weights[k]
    // Chain pairs: (template's external input X, template value Y): instance r+1 reads instance r's Y
    // where the template reads X. After each instance, Y is copied into X's buffer.
    std::vector<std::pair<int, int>> chain;
    // Values of the last instance used after the blocks, each with the chain input that holds it then.
    std::vector<std::pair<int, int>> last_outputs;  // (value id in last instance, template chain input X)
};

// Groups regions by kind (kinds with a single instance are left out: they run inline) and validates
// replayability; throws kiln::Error explaining what differs.
std::vector<BlockKind> analyze_regions(const ir::Graph& g);

}  // namespace kiln::exec
