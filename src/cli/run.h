// `paladin run`'s workload supervisor, shared with `paladin slurm task` (the SLURM step shim):
// it starts (or restores) one workload in its own PID namespace and cgroup under the quota
// interposer, copies its log files to this process's stdout and stderr, waits for it, and
// returns its exit code.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "paladin/ckpt/workload.h"

namespace paladin::cli {

struct RunArgs {
  std::string name;
  std::string gpu_mem;
  std::string gpu_mem_max;
  std::string emulated_gpus;
  std::string gpus;
  int compute_share = 0;
  std::string usage_log;
  double usage_every_s = 1.0;
  std::string run_dir;
  bool keep_run_dir = false;
  // The network namespace the workload runs in: a rank network's NAME (/run/netns/NAME) or a
  // namespace file's absolute path; "" for this process's. With rank_address, the rank network
  // NAME is made first (ckpt::CreateRankNet; kept when it exists with that address).
  std::string net_ns;
  std::string rank_address;
  std::vector<std::string> command;

  // For other supervisors than `paladin run`:
  std::string say_as = "paladin run";  // the prefix of its messages
  // Restore the job held by this checkpoint image instead of starting `command`; the restored
  // root becomes this process's child (it is made a child subreaper).
  std::string restore_from;
  std::vector<std::pair<std::string, std::string>> gpu_map;  // for the restore
  // Called once the workload runs (started or restored), with its record.
  std::function<void(const ckpt::JobRecord&)> on_started;
  // Who the workload runs as (-1: this process's user; another needs root): `paladin slurm
  // helper` starts a SLURM user's step this way, so that it can be checkpointed.
  int64_t uid = -1;
  int64_t gid = -1;
  // The workload's own environment and working directory, for a supervisor that runs as root
  // for someone else (`paladin slurm helper`): `env` reaches only the workload, after the switch
  // of user, never this process (ckpt::WorkloadSpec); without `inherit_env` nothing of this
  // process's environment does either. Paladin's loader paths come first, the workload's after.
  std::vector<std::pair<std::string, std::string>> env;
  bool inherit_env = true;
  std::string cwd;          // "": this process's
  bool follow_logs = true;  // copy the workload's logs to this process's stdout and stderr
};

int RunWorkload(RunArgs args);

// Copies what the workload appends to its log files onto this terminal while it runs.
class LogFollower {
 public:
  LogFollower(std::string out, std::string err) : out_(std::move(out)), err_(std::move(err)) {}
  ~LogFollower() { Stop(); }
  LogFollower(const LogFollower&) = delete;
  LogFollower& operator=(const LogFollower&) = delete;
  // Copies only what is appended from now on (a restored job's earlier output was shown before).
  void SkipExisting() {
    std::error_code ec;
    const auto out = std::filesystem::file_size(out_, ec);
    out_offset_ = ec ? 0 : static_cast<long>(out);
    const auto err = std::filesystem::file_size(err_, ec);
    err_offset_ = ec ? 0 : static_cast<long>(err);
  }
  void Start() {
    thread_ = std::thread([this] {
      while (!stop_) {
        Pump();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      Pump();
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Pump() {
    Copy(out_, &out_offset_, stdout);
    Copy(err_, &err_offset_, stderr);
  }
  static void Copy(const std::string& path, long* offset, FILE* to) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return;
    std::fseek(f, *offset, SEEK_SET);
    char buf[8192];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      std::fwrite(buf, 1, n, to);
      *offset += static_cast<long>(n);
    }
    std::fflush(to);
    std::fclose(f);
  }

  std::string out_;
  std::string err_;
  long out_offset_ = 0;
  long err_offset_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace paladin::cli
