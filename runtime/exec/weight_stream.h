#pragma once
// Internal to runtime/exec: block weights under a device-memory budget. When a model's block weights do not
// fit, the first `resident` instances of each block kind stay in device memory and the others in host memory
// (host-visible Vulkan memory, filled once at load). A replay never changes: only where it reads its weights.
//  - device selection (address table): streamed instance i is copied host -> ring slot (i - resident) mod slots,
//    `slots - 1` instances ahead, right after the barrier that freed the slot, so each copy overlaps a replay;
//    the address table of replay i points at its slot. On unified memory (in_place) the table points at the host
//    copy itself: nothing moves.
//  - copy selection: the window the recording binds is filled from the host copy instead of a device arena.
// Copies go on the compute queue, inside the step's one submission.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/vulkan/memory.h"

namespace kiln::exec::detail {

struct StreamKind {
    size_t resident = SIZE_MAX;         // instances [0, resident) in device memory
    int slots = 0;                      // ring slots (device selection, not in place)
    bool in_place = false;              // streamed instances read in host memory
    std::vector<vk::BufferRange> ring;  // device slots, stride bytes each
    std::vector<vk::BufferRange> host;  // streamed instance resident + s at host[s], stride bytes, block-major
    // Every weight of every instance in the imported model file ([instance][weight]); when set, it is the host
    // source of the streamed instances (no host copy), and on unified memory every instance is read there.
    std::vector<std::vector<vk::BufferRange>> file;
    long issued = -1;  // while recording: last streamed index whose copy is recorded
};

// Per-kind facts the budget decision needs.
struct KindNeed {
    size_t instances;
    uint64_t stride;
    bool device_select;       // weights selected through the address table (else copied into a window)
    bool in_place_ok = true;  // streamed instances may be read where they lie in host memory (else ring slots)
};

struct StreamPlan {
    uint64_t budget = 0;   // as applied (raised to the minimum where needed)
    uint64_t minimum = 0;  // the minimum working set: fixed + two slots per kind
    std::string warning;   // set when the budget was raised
    std::vector<size_t> resident;
    std::vector<int> slots;
    std::vector<bool> in_place;
};

// Chooses resident instances and ring slots per kind: everything resident when it fits; else a ring (or the copy
// window) per kind and the same fraction of every kind's instances resident. fixed: device bytes already planned
// (weights outside blocks, activations).
StreamPlan plan_stream(uint64_t budget, uint64_t fixed, const std::vector<KindNeed>& kinds, int slots,
                       bool in_place_ok);

}  // namespace kiln::exec::detail
