#version 450
#extension GL_GOOGLE_include_directive : require
// select_advance: the first dispatch of a replayed block's recording. It writes the next instance's selection slots
// into the copy of the kind's slots that the next replay reads (replay i reads copy i % 2; this dispatch binds the
// other one, which replay i does not read), so the primary command buffer executes the recordings of every instance
// in one vkCmdExecuteCommands and writes nothing between replays (see SelectAdvanceParams and block_weights.cpp).
// One workgroup. Each invocation takes a ticket with atomicAdd: the counter only moves by whole dispatches, so
// ticket / width is the same replay index for every invocation, whatever their order (no barrier() needed).
#define USE_SELECT_ADVANCE
#include "runtime/ir/params.h"
layout(local_size_x = 64) in;
layout(binding = 0) buffer Rows { uint rows[]; };  // the counter at rows[p.ctr], then per kind n rows of `words`
layout(binding = 1) writeonly buffer Table { uint table[]; };  // the slots the next replay reads

void main() {
    const uint replay = atomicAdd(rows[p.ctr], 1u) / p.width;
    const uint next = replay + 1u;
    if (next >= p.n) return;
    for (uint j = gl_LocalInvocationID.x; j < p.words; j += gl_WorkGroupSize.x)
        table[p.live + j] = rows[p.row0 + next * p.words + j];
}
