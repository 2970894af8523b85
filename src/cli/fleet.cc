#include "commands.h"

namespace paladin::cli {

void RegisterFleet(CLI::App& /*app*/, int* /*exit_code*/) {}

}  // namespace paladin::cli
