// The node's lease. An agent that has not reached the server for lease_s seconds must have its
// jobs stopped before the server may restore them elsewhere, so that a job never runs in two
// places, and this must hold when the agent itself is dead, stopped or cut off.
//
// So the agent does not enforce it alone: it writes a deadline into its lease file
// (DATA/agents/NODE/lease, include/paladin/ckpt/fence.h) after every heartbeat the server
// answered, and each job's paladin-workload-init, which holds that file open, stops the job once
// the deadline passes and continues it when the file is renewed. The agent renews only after the
// answer's commands ran when the lease was out (the server may have killed some), so what the
// server decided is what continues. Jobs without an init (no PID namespace; no init found) are
// stopped and continued by the agent itself, as long as it runs. docs/agent.md, "Fencing".
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent_impl.h"
#include "paladin/base/process.h"
#include "paladin/ckpt/fence.h"

namespace paladin::agent {

namespace {

// A directory only its owner (root, for a root agent) can enter; refuses a symlink.
Status PrivateDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("cannot create " + path + ": " + strerror(errno));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return IoError(path + " is not a directory");
  }
  if (st.st_uid != geteuid()) {
    return FailedPrecondition(path + " belongs to uid " + std::to_string(st.st_uid) +
                              ", not to this agent's user: refusing to keep records there");
  }
  if ((st.st_mode & 07777) != 0700 && chmod(path.c_str(), 0700) != 0) {
    return IoError("cannot make " + path + " private: " + strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Status Agent::OpenLease() {
  if (options_.name.find('/') != std::string::npos || options_.name[0] == '.') {
    return InvalidArgument("--name " + options_.name + ": not usable as a directory name");
  }
  PALADIN_RETURN_IF_ERROR(PrivateDir(data_dir_ + "/agents"));
  records_dir_ = data_dir_ + "/agents/" + options_.name;
  PALADIN_RETURN_IF_ERROR(PrivateDir(records_dir_));
  lease_path_ = records_dir_ + "/lease";
  lease_fd_ = open(lease_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lease_fd_ < 0) return IoError("cannot open " + lease_path_ + ": " + strerror(errno));
  // Never renewed here: a previous agent's jobs stay as its lease left them until the server has
  // answered (a new file starts out run out).
  unsigned char record[ckpt::fence::kRecordBytes];
  uint64_t deadline = 0;
  const ssize_t n = pread(lease_fd_, record, sizeof record, 0);
  if (ckpt::fence::Decode(record, static_cast<long>(n), &deadline) !=
      ckpt::fence::Read::kDeadline) {
    ckpt::fence::Encode(0, record);
    if (pwrite(lease_fd_, record, sizeof record, 0) != static_cast<ssize_t>(sizeof record)) {
      return IoError("cannot write " + lease_path_ + ": " + strerror(errno));
    }
  }
  lease_.Renewed(deadline);
  return Status::Ok();
}

void Agent::RenewLease(uint64_t sent_ns) {
  if (lease_fd_ < 0) return;
  const uint64_t deadline = LeasePolicy::DeadlineFor(sent_ns, lease_s_.load());
  unsigned char record[ckpt::fence::kRecordBytes];
  ckpt::fence::Encode(deadline, record);
  // In place: the inits hold this inode. One pwrite of 24 bytes; a reader that sees it torn
  // reads again (fence::Decode's check).
  if (pwrite(lease_fd_, record, sizeof record, 0) != static_cast<ssize_t>(sizeof record)) {
    Say("cannot renew the lease in " + lease_path_ + ": " + strerror(errno) +
        "; the jobs will be stopped when it runs out");
    return;
  }
  lease_.Renewed(deadline);
}

bool Agent::LeaseOut() const { return lease_.Out(clock_.BootNs()); }

void Agent::SignalTree(pid_t root, int signal) {
  // The root first: a SIGSTOPped root cannot start new children meanwhile.
  if (root > 0) kill(root, signal);
  for (uint32_t pid : base::ProcessTree(static_cast<uint32_t>(root))) {
    kill(static_cast<pid_t>(pid), signal);
  }
}

void Agent::CheckLease() {
  const double now = clock_.SteadySeconds();
  if (!lease_.SilenceFreezes(now, lease_s_.load())) return;
  FreezeJobs(lease_.Silence(now), false);
}

void Agent::FreezeJobs(double silent, bool only_if_any) {
  int frozen = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      // A busy job is stopped or moving under its worker; it is frozen once the worker is done.
      if (w->busy || w->frozen || w->state == api::CopyState::kExited) continue;
      // The init stops a fenced job itself (within fence::kPollMs of the same deadline).
      if (!w->fenced) SignalTree(static_cast<pid_t>(w->record.pid), SIGSTOP);
      w->frozen = true;
      ++frozen;
    }
  }
  if (only_if_any && frozen == 0) return;
  if (frozen > 0 || !frozen_) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "no contact with the server for %.1f s (lease %.2g s): froze %d workload(s) "
                  "until the server answers",
                  silent, lease_s_.load(), frozen);
    Say(line);
  }
  frozen_ = true;
}

void Agent::Thaw() {
  int thawed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, w] : jobs_) {
      if (!w->frozen) continue;
      // A fenced job continues when its init sees the renewed lease.
      if (!w->fenced) SignalTree(static_cast<pid_t>(w->record.pid), SIGCONT);
      w->frozen = false;
      ++thawed;
    }
  }
  frozen_ = false;
  Say("the server answers again: " + std::to_string(thawed) + " workload(s) continue");
}

}  // namespace paladin::agent
