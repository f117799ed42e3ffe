#pragma once
// The Vulkan context a test executable keeps for its whole run. A function-local `static vk::Context` is destroyed
// after the exit handlers of the libraries loaded while it was made, the validation layer among them. Contexts made
// here are destroyed when the tests have run, before main returns (test::finish, test_support.h).
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
    static const bool registered = (exit_hooks().push_back([] {
        for (auto it = exit_contexts().rbegin(); it != exit_contexts().rend(); ++it) delete *it;
        exit_contexts().clear();
    }),
                                    true);
    (void)registered;
    exit_contexts().push_back(c);
    return *c;
}

}  // namespace kiln::test
