#pragma once
// The `kiln` subcommands. Each registers its options on the CLI11 app and returns the function
// that runs it (after parsing).
#include <CLI/CLI.hpp>
#include <functional>

namespace kiln::app {
using Run = std::function<void()>;
Run add_devices(CLI::App& app);
Run add_info(CLI::App& app);
Run add_forward(CLI::App& app);
Run add_generate(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_tokenize(CLI::App& app);
// An output path is checked before any work (before the model loads): its folder must exist and be writable, and
// it must not be a folder itself. `flag` names the option in the error ("-o").
void check_output_path(const std::string& path, const char* flag);
// The built-in default model (the trained dit-digits pipeline that ships with Kiln).
std::string default_model();
}  // namespace kiln::app
