#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "commands.h"

namespace paladin::cli {
namespace {

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string BundledDataDir() {
  // Installed layout first (<prefix>/bin/paladin -> <prefix>/share/paladin/data), then the tree
  // the binary was built from.
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.find_last_of('/'));
    std::string installed = dir + "/../share/paladin/data";
    if (IsDir(installed)) return installed;
  }
  return PALADIN_SOURCE_DATA_DIR;
}

}  // namespace paladin::cli
