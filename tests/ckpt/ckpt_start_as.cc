// ckpt_start_as NAME UID GID -- COMMAND [ARG...]: starts COMMAND with ckpt::StartWorkload as
// `paladin run` does (PID namespace, cgroup NAME-PID, logs and job record in
// $PALADIN_RUN_DIR/NAME-PID, the run directory as its working directory), but as user UID and
// group GID, the way the node agent starts its workloads, and returns at once: `paladin
// checkpoint NAME` and `paladin restore` take it from there. Prints "pid PID init 0|1".
// With $PALADIN_TEST_LEASE set to a file, it writes a node lease good for an hour there and gives
// it to the workload's init, as the node agent does (include/paladin/ckpt/fence.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "paladin/ckpt/fence.h"
#include "paladin/ckpt/workload.h"

namespace ckpt = paladin::ckpt;

int main(int argc, char** argv) {
  if (argc < 6 || std::strcmp(argv[4], "--") != 0) {
    std::fprintf(stderr, "usage: ckpt_start_as NAME UID GID -- COMMAND [ARG...]\n");
    return 2;
  }
  const std::string name = argv[1];
  const std::string group = name + "-" + std::to_string(getpid());
  const std::string run_dir = ckpt::RunBase() + "/" + group;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ckpt_start_as: cannot create %s: %s\n", run_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  chmod(run_dir.c_str(), 0755);

  ckpt::WorkloadSpec spec;
  for (int i = 5; i < argc; ++i) spec.command.emplace_back(argv[i]);
  spec.stdout_log = run_dir + "/stdout.log";
  spec.stderr_log = run_dir + "/stderr.log";
  spec.cgroup = group;
  spec.cwd = run_dir;
  spec.uid = std::strtoll(argv[2], nullptr, 10);
  spec.gid = std::strtoll(argv[3], nullptr, 10);
  if (const char* lease = getenv("PALADIN_TEST_LEASE"); lease != nullptr && lease[0] != '\0') {
    spec.lease_fd = open(lease, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    timespec now{};
    clock_gettime(CLOCK_BOOTTIME, &now);
    unsigned char record[ckpt::fence::kRecordBytes];
    ckpt::fence::Encode(
        ckpt::fence::DeadlineAfter(static_cast<uint64_t>(now.tv_sec) * 1000000000ULL, 3600),
        record);
    if (spec.lease_fd < 0 ||
        pwrite(spec.lease_fd, record, sizeof record, 0) != static_cast<ssize_t>(sizeof record)) {
      std::fprintf(stderr, "ckpt_start_as: cannot write the lease %s\n", lease);
      return 1;
    }
  }
  paladin::StatusOr<ckpt::StartedWorkload> started = ckpt::StartWorkload(spec);
  if (!started.ok()) {
    std::fprintf(stderr, "ckpt_start_as: %s\n", started.status().message().c_str());
    return 1;
  }
  for (const std::string& warning : started->warnings) {
    std::fprintf(stderr, "ckpt_start_as: warning: %s\n", warning.c_str());
  }
  ckpt::JobRecord job;
  job.name = name;
  job.command = spec.command;
  job.cwd = run_dir;
  job.run_dir = run_dir;
  job.pid = started->pid;
  job.pid_namespace = started->pid_namespace;
  job.cgroup = started->cgroup;
  job.stdout_log = spec.stdout_log;
  job.stderr_log = spec.stderr_log;
  if (paladin::Status s = ckpt::WriteJob(job); !s.ok()) {
    std::fprintf(stderr, "ckpt_start_as: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("pid %d init %d\n", static_cast<int>(started->pid), started->init ? 1 : 0);
  return 0;
}
