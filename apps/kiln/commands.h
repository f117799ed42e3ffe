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
// --vram-budget, shared by generate, forward and bench.
inline constexpr const char* kVramBudgetHelp =
    "Device memory for one model's weights and activations (e.g. 4G, 512M; default: the device's memory heap). "
    "Block weights over it stay in host memory and stream into a ring of device slots (regional mode); a budget "
    "below the minimum working set (activations + two block slots) is raised to it with a warning";
// The built-in default model (the trained dit-digits pipeline that ships with Kiln).
std::string default_model();
}  // namespace kiln::app
