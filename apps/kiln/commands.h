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
// The built-in default model (the trained dit-digits pipeline that ships with Kiln).
std::string default_model();
}  // namespace kiln::app
