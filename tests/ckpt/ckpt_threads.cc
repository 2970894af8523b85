// ckpt_threads: a multi-threaded workload for the checkpoint tests. Each of --threads threads
// owns a buffer of --mib MiB whose every word is a function of (thread, word, step). A step
// checks the whole buffer against the current step (and sums it), writes the next step's contents
// and prints one line:
//   thread 2 step 41 sum 0123456789abcdef
// where `sum` is the checksum of the buffer as it was at that step (verified, not recomputed).
// A wrong word prints "MISMATCH ..." and exits 3. Steps only ever count up: a restarted program
// would start again at step 1.
//
// Usage: ckpt_threads [--threads N] [--mib N] [--pause-ms N]
//        ckpt_threads --checksum MIB THREAD STEP   (prints the expected sum for that step)
//
// CRIU does not dump processes with a sanitizer runtime well, so this is built with plain flags
// and links nothing of Paladin's.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t Word(uint64_t thread, uint64_t index, uint64_t step) {
  uint64_t x = (thread + 1) * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x + step * 0x94D049BB133111EBull;
}

uint64_t ExpectedSum(uint64_t thread, size_t words, uint64_t step) {
  uint64_t sum = 0;
  for (size_t i = 0; i < words; ++i) sum += Word(thread, i, step) * (i | 1);
  return sum;
}

// One line per write(2), so lines from different threads never interleave in the log.
void Say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* fmt, ...) {
  char line[256];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  ssize_t ignored = write(STDOUT_FILENO, line, static_cast<size_t>(n));
  (void)ignored;
}

void Run(uint64_t thread, size_t words, int pause_ms) {
  std::vector<uint64_t> buffer(words);
  uint64_t step = 1;
  for (size_t i = 0; i < words; ++i) buffer[i] = Word(thread, i, step);
  for (;;) {
    uint64_t sum = 0;
    for (size_t i = 0; i < words; ++i) {
      if (buffer[i] != Word(thread, i, step)) {
        Say("MISMATCH thread %" PRIu64 " step %" PRIu64 " word %zu: %016" PRIx64
            ", expected %016" PRIx64 "\n",
            thread, step, i, buffer[i], Word(thread, i, step));
        std::_Exit(3);
      }
      sum += buffer[i] * (i | 1);
    }
    Say("thread %" PRIu64 " step %" PRIu64 " sum %016" PRIx64 "\n", thread, step, sum);
    ++step;
    for (size_t i = 0; i < words; ++i) buffer[i] = Word(thread, i, step);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--checksum") == 0) {
    const size_t words = (std::strtoull(argv[2], nullptr, 10) << 20) / sizeof(uint64_t);
    std::printf("%016" PRIx64 "\n", ExpectedSum(std::strtoull(argv[3], nullptr, 10), words,
                                                std::strtoull(argv[4], nullptr, 10)));
    return 0;
  }
  int threads = 4;
  uint64_t mib = 64;
  int pause_ms = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (flag == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (flag == "--pause-ms" && i + 1 < argc) {
      pause_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: ckpt_threads [--threads N] [--mib N] [--pause-ms N]\n"
                   "       ckpt_threads --checksum MIB THREAD STEP\n");
      return 1;
    }
  }
  const size_t words = (mib << 20) / sizeof(uint64_t);
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) workers.emplace_back(Run, t, words, pause_ms);
  for (std::thread& w : workers) w.join();
}
