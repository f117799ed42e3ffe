#pragma once
// Work counted from the IR: FLOPs (multiply-add = 2) of the matrix ops and the bytes every op
// reads and writes once (a lower bound on memory traffic). For bench reports.
#include <cstdint>

#include "runtime/ir/graph.h"

namespace kiln::ir {
struct Cost {
    double flops = 0, bytes = 0;
};
Cost count_cost(const Graph& g);
}  // namespace kiln::ir
