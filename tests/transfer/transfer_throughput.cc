// Loopback throughput of SendImage against the plainest possible copy measured in the same run:
// one TCP stream, read the file and write the socket on one side, read the socket and write a
// file on the other (what `cat file > /dev/tcp/HOST/PORT` into `nc -l > file` does), no hashes.
// Usage: transfer_throughput [MiB=1024] [streams,...=1,4] [rounds=3]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "paladin/ckpt/image.h"
#include "paladin/transfer/transfer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void WriteRandomFile(const std::string& path, size_t bytes) {
  std::mt19937_64 rng(42);
  std::vector<uint64_t> block(1 << 17);
  std::ofstream out(path, std::ios::binary);
  for (size_t done = 0; done < bytes;) {
    for (uint64_t& v : block) v = rng();
    const size_t n = std::min(bytes - done, block.size() * sizeof(uint64_t));
    out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n));
    done += n;
  }
}

// Copies `path` over one loopback TCP connection into `to`; returns seconds. `durable`: the
// copy is fsynced and hashed once (SHA-256) on arrival, the least a checked copy needs.
double PlainCopy(const std::string& path, const std::string& to, bool durable) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(listener, 1);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const Clock::time_point start = Clock::now();
  std::thread receiver([&] {
    const int conn = accept(listener, nullptr, nullptr);
    const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char> buf(1 << 20);
    ssize_t n = 0;
    while ((n = read(conn, buf.data(), buf.size())) > 0) {
      if (write(out, buf.data(), static_cast<size_t>(n)) != n) break;
    }
    if (durable) fsync(out);
    close(out);
    close(conn);
  });
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int in = open(path.c_str(), O_RDONLY);
  std::vector<char> buf(1 << 20);
  ssize_t n = 0;
  while ((n = read(in, buf.data(), buf.size())) > 0) {
    if (write(sock, buf.data(), static_cast<size_t>(n)) != n) break;
  }
  close(in);
  close(sock);
  receiver.join();
  close(listener);
  if (durable && !paladin::ckpt::Sha256File(to).ok()) return -1;
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One SendImage of `src` into a fresh `out`; returns seconds, or -1 on failure.
double Transfer(const std::string& src, const std::string& out, int streams) {
  fs::remove_all(out);
  paladin::transfer::ReceiverOptions ro;
  ro.out_dir = out;
  ro.token = "bench";
  auto receiver = paladin::transfer::Receiver::Listen(ro);
  if (!receiver.ok()) return -1;
  std::thread serving([&] { (void)(*receiver)->ReceiveOne(); });
  paladin::transfer::SendOptions so;
  so.token = "bench";
  so.streams = streams;
  auto report = paladin::transfer::SendImage(src, "127.0.0.1", (*receiver)->port(), so, {});
  serving.join();
  if (!report.ok()) {
    std::fprintf(stderr, "send failed: %s\n", report.status().ToString().c_str());
    return -1;
  }
  return report->seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  std::vector<int> streams;
  std::stringstream list(argc > 2 ? argv[2] : "1,4");
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  for (std::string item; std::getline(list, item, ',');) streams.push_back(std::atoi(item.c_str()));
  const fs::path root =
      fs::temp_directory_path() / ("paladin-xfer-bench-" + std::to_string(getpid()));
  const std::string src = (root / "src").string();
  fs::create_directories(src);
  WriteRandomFile(src + "/pages-1.img", mib << 20);
  WriteRandomFile(src + "/core-1.img", 4096);
  paladin::ckpt::Manifest m;
  m.name = "bench";
  m.arch = "x86_64";
  m.criu_version = "4.1.1";
  if (!paladin::ckpt::WriteManifest(src, m).ok()) return 1;
  // Best of `repeats` rounds, the contenders interleaved so that a busy moment hits all alike.
  const double bytes = static_cast<double>(mib << 20);
  double plain = 1e9;
  double checked = 1e9;
  std::vector<double> sent(streams.size(), 1e9);
  for (int round = 0; round < repeats; ++round) {
    plain = std::min(plain, PlainCopy(src + "/pages-1.img", (root / "copy").string(), false));
    checked = std::min(checked, PlainCopy(src + "/pages-1.img", (root / "copy").string(), true));
    for (size_t i = 0; i < streams.size(); ++i) {
      const double t = Transfer(src, (root / "out").string(), streams[i]);
      if (t < 0) return 1;
      sent[i] = std::min(sent[i], t);
    }
  }
  std::printf("image %zu MiB on loopback, %u CPUs, best of %d\n", mib,
              std::thread::hardware_concurrency(), repeats);
  std::printf("plain single-stream copy:         %6.2f s, %5.0f MiB/s\n", plain,
              bytes / plain / (1 << 20));
  std::printf("same + fsync + one SHA-256 pass:  %6.2f s, %5.0f MiB/s\n", checked,
              bytes / checked / (1 << 20));
  for (size_t i = 0; i < streams.size(); ++i) {
    std::printf(
        "paladin image send --streams %-2d:  %6.2f s, %5.0f MiB/s, %.2fx plain, %.2fx checked\n",
        streams[i], sent[i], bytes / sent[i] / (1 << 20), plain / sent[i], checked / sent[i]);
  }
  fs::remove_all(root);
  return 0;
}
