// Subcommands of the `paladin` executable. Each Register* adds its subcommand to the app and
// arranges for its exit code to land in *exit_code when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace paladin::cli {

void RegisterSim(CLI::App& app, int* exit_code);
void RegisterPredict(CLI::App& app, int* exit_code);

// Where the data files bundled with Paladin live (data/ in the source tree or the install).
std::string BundledDataDir();

}  // namespace paladin::cli
