#include "commands.h"

namespace paladin::cli {

void RegisterDemo(CLI::App& /*app*/, int* /*exit_code*/) {}

}  // namespace paladin::cli
