#pragma once
// Commands of a caller's own around an executor's recorded run (Executor::submit_run): its command buffers are
// begun and ordered as the executor's are.
#include <vulkan/vulkan.h>

#include "runtime/vulkan/context.h"

namespace kiln::exec {

// A primary command buffer from `pool`, begun for reuse: submitted once per run, with runs in flight
// (VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT). The caller ends it and frees it to `pool`.
VkCommandBuffer begin_reusable(vk::Context& ctx, VkCommandPool pool);

// A memory barrier ordering every earlier shader or transfer access in cb before every later one (uniform reads
// included: the selection slots of "off" dispatches).
void full_barrier(VkCommandBuffer cb);

}  // namespace kiln::exec
