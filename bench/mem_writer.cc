// A workload for the checkpoint benchmarks: holds SIZE_MIB of memory, touched, and rewrites
// PCT percent of it per second (in 10 slices a second), forever. Prints "ready" once the memory
// is touched. Plain program: no sanitizers (CRIU dumps it).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mem_writer SIZE_MIB PCT_PER_SECOND\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(std::atoll(argv[1])) << 20;
  const double pct = std::atof(argv[2]);
  std::vector<unsigned char> memory(bytes);
  for (size_t i = 0; i < bytes; i += 4096) memory[i] = static_cast<unsigned char>(i >> 12);
  std::printf("ready\n");
  std::fflush(stdout);
  const size_t pages = bytes / 4096;
  const size_t per_slice = static_cast<size_t>(static_cast<double>(pages) * pct / 100.0 / 10.0);
  size_t next = 0;
  unsigned char round = 1;
  for (;;) {
    for (size_t i = 0; i < per_slice; ++i) {
      // A stride through the pages so each slice dirties different pages.
      next = (next + 7919) % pages;
      std::memset(&memory[next * 4096], round, 64);
    }
    ++round;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}
