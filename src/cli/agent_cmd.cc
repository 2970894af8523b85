#include "commands.h"

namespace paladin::cli {

void RegisterAgent(CLI::App& /*app*/, int* /*exit_code*/) {}

}  // namespace paladin::cli
