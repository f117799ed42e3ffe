#pragma once
// Runs one of the built binaries (build/apps/kiln, kiln-convert) the way a user does, through /bin/sh, for the CLI
// tests: the exit code and what it printed.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace kiln::test {

struct CliResult {
    int rc = -1;
    std::string err;  // stderr (with `and_stdout`, stdout before it in the same file)
};

// The command that starts a built binary (BINARY: "kiln", "kiln-convert"): its path, after $KILN_TEST_RUNNER when that
// is set. A device wrapper such as scripts/ci/lavapipe26.sh's `run` starts the test through another dynamic loader,
// which a child process does not inherit: a spawned kiln runs on the test's device only through this prefix.
inline std::vector<std::string> cli_argv(const std::string& binary) {
    const std::string path = std::string(KILN_BUILD_DIR) + "/apps/" + binary;
    const char* runner = std::getenv("KILN_TEST_RUNNER");
    if (runner && *runner) return {runner, path};
    return {path};
}
// The same as one /bin/sh word list.
inline std::string cli_binary(const std::string& binary) {
    std::string cmd;
    for (const std::string& w : cli_argv(binary)) cmd += (cmd.empty() ? "" : " ") + w;
    return cmd;
}

// BINARY ARGS ("kiln", "generate --model ..."), with stderr captured in tmp; `and_stdout`: stdout too.
inline CliResult run_cli(const TempDir& tmp, const std::string& binary, const std::string& args,
                         bool and_stdout = false) {
    const std::string out = tmp / "cli_output.txt";
    const std::string cmd = cli_binary(binary) + " " + args + (and_stdout ? " >" + out + " 2>&1" : " 2>" + out);
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(out);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    return r;
}

}  // namespace kiln::test
