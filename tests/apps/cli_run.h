#pragma once
// Runs one of the built binaries (build/apps/kiln, kiln-convert) the way a user does, through /bin/sh, for the CLI
// tests: the exit code and what it printed.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/test_support.h"

namespace kiln::test {

struct CliResult {
    int rc = -1;
    std::string err;  // stderr (with `and_stdout`, stdout before it in the same file)
};

// BINARY ARGS ("kiln", "generate --model ..."), with stderr captured in tmp; `and_stdout`: stdout too.
inline CliResult run_cli(const TempDir& tmp, const std::string& binary, const std::string& args,
                         bool and_stdout = false) {
    const std::string out = tmp / "cli_output.txt";
    const std::string cmd = std::string(KILN_BUILD_DIR) + "/apps/" + binary + " " + args +
                            (and_stdout ? " >" + out + " 2>&1" : " 2>" + out);
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(out);
    r.err.assign(std::istreambuf_iterator<char>(f), {});
    return r;
}

}  // namespace kiln::test
