// TEMPORARY weak stubs while the shaders land; deleted once every lowering exists.
#include "runtime/core/error.h"
#include "runtime/vulkan/lower.h"
namespace kiln::vk {
__attribute__((weak)) Dispatch lower_scale(const ir::Graph&, const ir::Node&) { KILN_FAIL("op scale has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_silu(const ir::Graph&, const ir::Node&) { KILN_FAIL("op silu has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_gelu(const ir::Graph&, const ir::Node&) { KILN_FAIL("op gelu has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_softmax(const ir::Graph&, const ir::Node&) { KILN_FAIL("op softmax has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_layer_norm(const ir::Graph&, const ir::Node&) { KILN_FAIL("op layer_norm has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_group_norm(const ir::Graph&, const ir::Node&) { KILN_FAIL("op group_norm has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_rms_norm(const ir::Graph&, const ir::Node&) { KILN_FAIL("op rms_norm has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_linear(const ir::Graph&, const ir::Node&) { KILN_FAIL("op linear has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_matmul(const ir::Graph&, const ir::Node&) { KILN_FAIL("op matmul has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_attention(const ir::Graph&, const ir::Node&) { KILN_FAIL("op attention has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_modulate(const ir::Graph&, const ir::Node&) { KILN_FAIL("op modulate has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_embedding(const ir::Graph&, const ir::Node&) { KILN_FAIL("op embedding has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_timestep_embedding(const ir::Graph&, const ir::Node&) { KILN_FAIL("op timestep_embedding has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_conv2d(const ir::Graph&, const ir::Node&) { KILN_FAIL("op conv2d has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_upsample_nearest2x(const ir::Graph&, const ir::Node&) { KILN_FAIL("op upsample_nearest2x has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_permute(const ir::Graph&, const ir::Node&) { KILN_FAIL("op permute has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_concat(const ir::Graph&, const ir::Node&) { KILN_FAIL("op concat has no Vulkan lowering yet"); }
__attribute__((weak)) Dispatch lower_slice(const ir::Graph&, const ir::Node&) { KILN_FAIL("op slice has no Vulkan lowering yet"); }
}
