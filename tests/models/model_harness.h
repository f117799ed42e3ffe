#pragma once
// Shared by the model tests: one Vulkan context per process.
#include "runtime/vulkan/context.h"

namespace kiln::test {
inline vk::Context& context() {
    static vk::Context ctx;
    return ctx;
}
}  // namespace kiln::test
