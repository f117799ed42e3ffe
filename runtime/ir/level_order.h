#pragma once
// Recording order (the Vulkan executor's, before it plans): within each stretch of nodes that records as one run
// (a block instance, or the nodes between blocks), nodes sorted by level, the longest chain of dispatches within the
// stretch that leads to them, keeping graph order among equals. The executor's recorder puts a barrier where a
// dispatch reads what one since the last barrier wrote, so a graph built stream by stream (SD3's and Flux's image
// and text streams, each a chain of norm, modulation, projections) recorded as built pays a barrier per link of
// each chain in turn; by level, the streams' links of one level share it. Values and what each node computes are
// unchanged (the CPU reference runs graphs as built); instances of one block kind get the same order, so regional
// mode still replays one recording.
#include "runtime/ir/graph.h"

namespace kiln::ir {

struct LevelOrderStats {
    int moved = 0;   // nodes whose position changed
    int levels = 0;  // sum over stretches of their levels
};

Graph order_by_level(const Graph& g, LevelOrderStats* stats = nullptr);

// Per node i: the last node of the run of nodes of i's level that i belongs to, within its stretch (i itself where
// its neighbours' levels differ). The executor keeps a value alive to the end of its last reader's run, so that no
// node of that level (recorded without a barrier between them) writes into its memory: a write-after-read hazard
// the recorder would answer with a barrier.
std::vector<int> level_run_ends(const Graph& g);

}  // namespace kiln::ir
