#include "commands.h"

namespace paladin::cli {

void RegisterUp(CLI::App& /*app*/, int* /*exit_code*/) {}

}  // namespace paladin::cli
