// paladin: the single executable of Paladin. Subcommands live in src/cli/*.cc.
#include <cstdio>

#include "commands.h"

#ifndef PALADIN_VERSION
#define PALADIN_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{
      "Paladin: predicts what GPU workloads need, packs them onto shared GPUs with enforced "
      "quotas, and keeps the fleet balanced by moving running work."};
  app.set_version_flag("--version", std::string("paladin ") + PALADIN_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  paladin::cli::RegisterSim(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
