// Writes an image directory's manifest.json (ckpt::WriteManifest) in a given format version and
// prints how long the pass took: version 1 hashes each file with SHA-256, version 2 each 8 MiB
// chunk with XXH3-128. For bench/transfer_integrity.sh, which compares the two on the same bytes.
// Usage: image_manifest DIR VERSION
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "paladin/ckpt/image.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: image_manifest DIR VERSION\n");
    return 2;
  }
  paladin::ckpt::Manifest m;
  m.name = "bench";
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  m.version = std::atoi(argv[2]);
  const auto start = std::chrono::steady_clock::now();
  const paladin::Status written = paladin::ckpt::WriteManifest(argv[1], m);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return 1;
  }
  std::printf("%.3f\n", seconds);
  return 0;
}
