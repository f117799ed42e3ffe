// check_output_path: the output files of `kiln generate` and `kiln forward` are checked before any work.
#include <unistd.h>

#include <filesystem>

#include "apps/kiln/commands.h"
#include "runtime/core/error.h"

namespace kiln::app {

void check_output_path(const std::string& out, const char* flag) {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(out).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    KILN_CHECK(fs::exists(dir, ec), flag, " ", out, ": folder '", dir.string(), "' does not exist");
    KILN_CHECK(fs::is_directory(dir, ec), flag, " ", out, ": '", dir.string(), "' is not a folder");
    KILN_CHECK(::access(dir.c_str(), W_OK) == 0, flag, " ", out, ": folder '", dir.string(), "' is not writable");
    KILN_CHECK(!fs::is_directory(out, ec), flag, " ", out, " is a folder (give a file name)");
}

}  // namespace kiln::app
