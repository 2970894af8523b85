#include "commands.h"

namespace paladin::cli {

void RegisterServer(CLI::App& /*app*/, int* /*exit_code*/) {}

}  // namespace paladin::cli
