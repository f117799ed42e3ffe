#include "apps/kiln/commands.h"
#include "runtime/core/error.h"
namespace kiln::app {
Run add_generate(CLI::App&) { return [] { KILN_FAIL("generate: not built yet"); }; }
}
