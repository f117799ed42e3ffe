// Catch2 v2 (Debian 12) entry point shared by every test executable: the session, then test::finish (the Vulkan
// contexts are destroyed there, before main returns; see test_support.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/test_support.h"

int main(int argc, char* argv[]) { return kiln::test::finish(Catch::Session().run(argc, argv)); }
