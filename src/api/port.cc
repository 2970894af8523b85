#include "paladin/api/port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>

namespace paladin::api {

namespace {

bool LoopbackPortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

}  // namespace

int FreeLoopbackPorts(int count) {
  constexpr int kLowest = 10000;
  int ephemeral = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> ephemeral) || ephemeral <= kLowest + 2000) ephemeral = 32768;
  if (count < 1 || count > 100) return 0;
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(kLowest, ephemeral - count - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(random);
    bool free = true;
    for (int i = 0; i < count && free; ++i) free = LoopbackPortFree(port + i);
    if (free) return port;
  }
  return 0;
}

}  // namespace paladin::api
