// `kiln serve` in a build without cpp-httplib (the Windows cross build: Debian's cpp-httplib is a Linux library, and
// its header alone is not the implementation). The command stays listed and says why it cannot run.
#include "apps/kiln/commands.h"
#include "runtime/core/error.h"

namespace kiln::app {

Run add_serve(CLI::App& app) {
    app.allow_extras();
    return [] { KILN_FAIL("kiln serve is not in this build (built without cpp-httplib: the Windows build)"); };
}

}  // namespace kiln::app
