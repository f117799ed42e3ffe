#pragma once
// The Vulkan context a test executable keeps for its whole run. A function-local `static vk::Context` is destroyed
// after the exit handlers of the libraries loaded while it was made, the validation layer among them: layer
// 1.4.309 then crashes in vkDestroyDevice (rc 139 after Catch2's summary). Contexts made here are destroyed by an
// atexit handler registered after the first one was made, so it runs before the layer's handlers.
#include <cstdlib>
#include <vector>

#include "runtime/vulkan/context.h"
#include "tests/support/test_support.h"

namespace kiln::test {

inline std::vector<vk::Context*>& exit_contexts() {
    static std::vector<vk::Context*> v;  // made before any context: destroyed after the handler below has run
    return v;
}

// A new context on test::settings() (or `s`), alive until exit.
inline vk::Context& exit_safe_context(const Settings& s = settings()) {
    exit_contexts();
    auto* c = new vk::Context(s);
    static const bool registered = std::atexit([] {
        for (auto it = exit_contexts().rbegin(); it != exit_contexts().rend(); ++it) delete *it;
        exit_contexts().clear();
    }) == 0;
    (void)registered;
    exit_contexts().push_back(c);
    return *c;
}

}  // namespace kiln::test
