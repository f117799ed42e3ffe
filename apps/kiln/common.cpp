// What the subcommands share: output paths checked before any work, and the C API handles.
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

void capi_check(kiln_status s) {
    if (s != KILN_OK) KILN_FAIL(kiln_last_error());
}

ContextPtr open_context(int device) {
    kiln_context_options o = KILN_CONTEXT_OPTIONS_INIT;
    o.device = device;
    kiln_context* c = nullptr;
    capi_check(kiln_context_create(&o, &c));
    return ContextPtr(c);
}

ModelPtr open_model(kiln_context* ctx, const std::string& path) {
    kiln_model* m = nullptr;
    capi_check(kiln_model_open(ctx, path.c_str(), &m));
    return ModelPtr(m);
}

}  // namespace kiln::app
