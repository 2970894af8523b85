// paladin: the single executable of Paladin. Subcommands live in src/cli/*.cc.
#include <cstdio>
#include <exception>

#include "commands.h"

#ifndef PALADIN_VERSION
#define PALADIN_VERSION "0.0.0"
#endif

namespace {

int Run(int argc, char** argv) {
  CLI::App app{
      "Paladin: predicts what GPU workloads need, packs them onto shared GPUs with enforced "
      "quotas, and keeps the fleet balanced by moving running work."};
  app.set_version_flag("--version", std::string("paladin ") + PALADIN_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  paladin::cli::RegisterSim(app, &exit_code);
  paladin::cli::RegisterPredict(app, &exit_code);
  paladin::cli::RegisterRun(app, &exit_code);
  paladin::cli::RegisterCheckpoint(app, &exit_code);
  paladin::cli::RegisterMigrate(app, &exit_code);
  paladin::cli::RegisterFleet(app, &exit_code);
  paladin::cli::RegisterServer(app, &exit_code);
  paladin::cli::RegisterAgent(app, &exit_code);
  paladin::cli::RegisterUp(app, &exit_code);
  paladin::cli::RegisterDemo(app, &exit_code);
  paladin::cli::RegisterSlurm(app, &exit_code);
  paladin::cli::RegisterK8s(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    // Nothing below should throw; if something does, say what and fail cleanly.
    std::fprintf(stderr, "paladin: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "paladin: internal error\n");
  }
  return 70;
}
