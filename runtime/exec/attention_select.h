#pragma once
// Which kernel an attention node runs (KILN_ATTENTION, ExecOptions::attention): the flash kernel
// (vk::lower_attention_flash) or the rows kernel (vk::lower_attention, through storage or texel buffers as
// choose_texel_op picks). docs/attention.md says why flash is the default.
#include <string>

#include "runtime/vulkan/context.h"
#include "runtime/vulkan/lower.h"

namespace kiln::exec {

// Rewrites d (vk::lower of attention node n) to a flash kernel and returns true:
//  - KILN_ATTENTION=coopmat4: the cooperative-matrix variant with the query rows split over subgroups where it applies
//    on ctx's device, else as coopmat; coopmat: the cooperative-matrix variant with 64 invocations per query tile
//    where it applies, else the scalar flash kernel (either on a device without cooperative matrices throws);
//  - else the scalar flash kernel where it applies and KILN_ATTENTION is flash, or auto on a GPU (not a CPU device:
//    there the rows kernel is faster), or where q/k/v are stored f16 (only flash reads them; throws where it does not
//    apply).
//  - auto on a GPU: the kernel the device's attention table picks for the node's head size, q/k/v storage and
//    sequence length (attention_table.h: measured once per device), where it runs the node; the scalar flash kernel
//    where the table has none.
// Returns false, d untouched, where the rows kernel stays.
bool choose_attention_flash(vk::Context& ctx, const ir::Graph& g, const ir::Node& n, vk::Dispatch& d);

// Overrides KILN_ATTENTION on this thread while set ("" clears), at KILN_PRECISION=exact whatever it says: the
// attention table's measurements.
void set_attention_override(const std::string& v);

// The texel-buffer choice (auto, buf or tex) for a node left on the rows kernel under KILN_ATTENTION = v.
std::string attention_texel_choice(const std::string& v);

}  // namespace kiln::exec
