#pragma once
// Lowering of linear to the shared-memory tiled shaders (shaders/linear_smem.comp, linear_coopmat.comp), for GPUs;
// linear.glsl's register-tiled lowering (lower_linear) stays the default. Which one a node gets is decided after
// lowering, where the device is known (runtime/exec/linear_select.h).
#include <cstdint>
#include <string>

#include "runtime/vulkan/lower.h"

namespace kiln::vk {

// Output tile of one linear_smem workgroup: (16 tm) x (16 tn); tm, tn in {4, 8}.
struct SmemTile {
    uint32_t tm = 4, tn = 4;
};

// "" when node n (a linear) can take the shared-memory path, else why not: K % 4 != 0 (it loads 4-vectors
// along K) or attributes it does not implement (a fused epilogue).
std::string linear_smem_unsupported(const ir::Graph& g, const ir::Node& n);

// The dispatch of linear node n on linear_smem with tile t (the same bindings and push constants as
// lower_linear, so the "_ptr"/"_off" block-weight suffixes apply unchanged). Throws where unsupported.
Dispatch lower_linear_smem(const ir::Graph& g, const ir::Node& n, SmemTile t);

// The same for linear_coopmat.comp (cooperative matrices, 64 x 64 tiles; never run, see the shader): f16 weights
// only, besides the above. Whether the device has cooperative matrices is the caller's to check
// (DeviceInfo::coopmat_nv_f16).
std::string linear_coopmat_unsupported(const ir::Graph& g, const ir::Node& n);
Dispatch lower_linear_coopmat(const ir::Graph& g, const ir::Node& n);

}  // namespace kiln::vk
