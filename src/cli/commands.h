// Subcommands of the `paladin` executable. Each Register* adds its subcommand to the app and
// arranges for its exit code to land in *exit_code when it runs.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/criu.h"

namespace paladin::cli {

void RegisterSim(CLI::App& app, int* exit_code);
void RegisterPredict(CLI::App& app, int* exit_code);
void RegisterRun(CLI::App& app, int* exit_code);
// checkpoint, restore, image inspect|verify, doctor.
void RegisterCheckpoint(CLI::App& app, int* exit_code);
// rank-net create|destroy|route|unroute (ckpt/rank_net.h); registered by RegisterCheckpoint.
void RegisterRankNet(CLI::App& app, int* exit_code);
// "paladin COMMAND: LINE" on stderr.
void Say(const char* command, const std::string& line);
// Parses --gpu-map (empty: no remapping); says what is wrong and returns false on a bad one.
bool GpuMapFlag(const char* command, const std::string& text,
                std::vector<std::pair<std::string, std::string>>* map);
// CRIU, located and probed (whether it needs CRIU_FAULT=130 here), or an error to print.
StatusOr<ckpt::Criu> ReadyCriu();
// migrate, receive.
void RegisterMigrate(CLI::App& app, int* exit_code);

// The items of a comma-separated list, empty ones included (so a caller can refuse them).
std::vector<std::string> SplitComma(const std::string& s);

// "42", "42-51" or "1,5,9"; an error says what is wrong.
StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& spec);

// Adds `sim dynamic` under the `sim` subcommand.
void AddSimDynamic(CLI::App* sim, int* exit_code);

// Adds `image send` and `image receive` under the `image` subcommand.
void AddImageTransfer(CLI::App* image, int* exit_code);

// The fleet client commands: submit, ps, show, logs, cancel, migrate --to, drain, checkpoint JOB
// (when a server is configured), resume, explain, top, teams, quota, tokens (src/cli/fleet.cc).
void RegisterFleet(CLI::App& app, int* exit_code);
// `paladin server` (src/cli/server_cmd.cc).
void RegisterServer(CLI::App& app, int* exit_code);
// `paladin agent` (src/cli/agent_cmd.cc).
void RegisterAgent(CLI::App& app, int* exit_code);
// `paladin up` (src/cli/up.cc) and `paladin demo` (src/cli/demo.cc).
void RegisterUp(CLI::App& app, int* exit_code);
void RegisterDemo(CLI::App& app, int* exit_code);
// `paladin slurm task|checkpoint|requeue|steps` (src/cli/slurm.cc).
void RegisterSlurm(CLI::App& app, int* exit_code);
// `paladin k8s node` (src/cli/k8s.cc).
void RegisterK8s(CLI::App& app, int* exit_code);

// Where the data files bundled with Paladin live (data/ in the source tree or the install).
std::string BundledDataDir();

}  // namespace paladin::cli
