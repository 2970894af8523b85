#include "paladin/migrate/migrate.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "paladin/ckpt/cgroup.h"
#include "paladin/migrate/control.h"
#include "paladin/quota/usage.h"
#include "paladin/transfer/transfer.h"

namespace paladin::migrate {

namespace fs = std::filesystem;

namespace {

constexpr double kAnswerTimeoutS = 600;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// For tests (PALADIN_MIGRATE_FAULT=corrupt-image): one byte of the image's largest file is
// flipped after the manifest is written, as a disk or a copy might.
void MaybeCorrupt(const std::string& image, const ckpt::Progress& progress) {
  const char* fault = getenv("PALADIN_MIGRATE_FAULT");
  if (fault == nullptr || std::string(fault) != "corrupt-image") return;
  fs::path largest;
  uintmax_t size = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(image, ec)) {
    if (e.is_regular_file() && e.file_size() > size && e.path().filename() != "manifest.json") {
      largest = e.path();
      size = e.file_size();
    }
  }
  if (size == 0) return;
  std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size / 2));
  char byte = 0;
  f.read(&byte, 1);
  f.seekp(static_cast<std::streamoff>(size / 2));
  byte = static_cast<char>(byte ^ 0x5a);
  f.write(&byte, 1);
  progress("fault injected: one byte of " + largest.filename().string() + " flipped");
}

// The source's way back when the move fails before the commit.
Status Abandon(ckpt::JobRecord* job, Channel* channel, const Status& why,
               const ckpt::Progress& progress) {
  if (channel != nullptr) (void)channel->Call("ABORT", 60);
  progress("the move failed (" + why.message() + "); resuming the job here");
  Status resumed = ckpt::ResumeJob(job);
  if (!resumed.ok()) {
    return Status(why.code(), why.message() +
                                  "; resuming it here failed too: " + resumed.message() +
                                  " (the job is stopped at pid " + std::to_string(job->pid) + ")");
  }
  return Status(why.code(), why.message() + "; the job resumed here");
}

// The source once the destination runs the job: its stopped copy goes.
void Release(ckpt::JobRecord* job) {
  for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(job->pid))) {
    kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

}  // namespace

StatusOr<MigrateReport> Migrate(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                const MigrateOptions& options, const ckpt::Progress& progress) {
  MigrateReport report;
  const std::string image =
      options.work_dir + "/" + job->name + "-" + std::to_string(time(nullptr)) + ".image";
  ckpt::CheckpointOptions checkpoint;
  checkpoint.after = ckpt::CheckpointOptions::After::kLeaveStopped;
  progress("checkpointing " + job->name + " (it stays stopped here until the move commits)");
  const auto paused = std::chrono::steady_clock::now();
  StatusOr<ckpt::PhaseTimes> times = ckpt::CheckpointJob(criu, job, image, checkpoint, progress);
  if (!times.ok()) return times.status();  // the job keeps running
  report.times = *times;
  MaybeCorrupt(image, progress);
  auto cleanup = [&] {
    std::error_code ec;
    if (!options.keep_image) fs::remove_all(image, ec);
  };

  transfer::SendOptions send;
  send.token = options.token;
  send.streams = options.streams;
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  if (fault.ok()) send.fault = *fault;
  progress("sending the image to " + options.host + ":" + std::to_string(options.port));
  const auto sending = std::chrono::steady_clock::now();
  StatusOr<transfer::SendReport> sent =
      transfer::SendImage(image, options.host, options.port, send, nullptr);
  if (!sent.ok()) {
    cleanup();
    return Abandon(job, nullptr, sent.status(), progress);
  }
  report.times.seconds.emplace_back("transfer", Since(sending));

  StatusOr<Channel> channel = Channel::Connect(options.host, options.port + 1, 60);
  if (!channel.ok()) {
    cleanup();
    return Abandon(job, nullptr, channel.status(), progress);
  }
  StatusOr<std::string> hello = channel->Call("TOKEN " + options.token, 30);
  if (!hello.ok()) {
    cleanup();
    return Abandon(job, &*channel, hello.status(), progress);
  }
  progress("the destination verified the image; restoring it there, stopped");
  const auto restoring = std::chrono::steady_clock::now();
  StatusOr<std::string> restored = channel->Call("RESTORE", kAnswerTimeoutS);
  if (!restored.ok()) {
    cleanup();
    return Abandon(job, &*channel,
                   Status(restored.status().code(), "the destination could not restore the job: " +
                                                        restored.status().message()),
                   progress);
  }
  report.remote_pid = std::atoll(restored->c_str());
  report.times.seconds.emplace_back("remote restore", Since(restoring));

  // The commit: the owner of the job's record (the server, or this command) decides.
  if (options.commit) {
    progress("the destination holds the job, stopped; asking the job's owner to commit");
    if (Status committed = options.commit(); !committed.ok()) {
      cleanup();
      return Abandon(job, &*channel,
                     Status(committed.code(), "the move was not committed: " + committed.message()),
                     progress);
    }
  }
  job->state = "moving";
  (void)ckpt::WriteJob(*job);
  StatusOr<std::string> resumed = channel->Call("RESUME", kAnswerTimeoutS);
  if (!resumed.ok()) {
    job->state = "stopped";
    cleanup();
    return Abandon(job, &*channel, resumed.status(), progress);
  }
  report.pause_s = Since(paused);
  Release(job);
  job->state = "moved";
  job->image = options.host + ":" + std::to_string(options.port) + " pid " + *restored;
  (void)ckpt::WriteJob(*job);
  if (!job->cgroup.empty()) (void)ckpt::Cgroup::Existing(job->cgroup).Remove();
  if (options.keep_image) report.image = image;
  cleanup();
  return report;
}

namespace {

// Carries out the source's commands until RESUME or ABORT.
StatusOr<ckpt::JobRecord> Obey(const ckpt::Criu& criu, const DestinationOptions& options,
                               Channel* channel, const std::string& image,
                               const ckpt::Progress& progress) {
  ckpt::JobRecord job;
  bool restored = false;
  for (;;) {
    StatusOr<std::string> command = channel->Receive(options.command_timeout_s);
    if (!command.ok()) {
      if (restored) {
        for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(job.pid))) {
          kill(static_cast<pid_t>(pid), SIGKILL);
        }
      }
      return Status(command.status().code(), "the source went away before the commit (" +
                                                 command.status().message() +
                                                 "); the restored copy was dropped");
    }
    if (*command == "RESTORE" && !restored) {
      ckpt::RestoreOptions2 restore;
      restore.gpu_map = options.gpu_map;
      restore.placement = options.placement;
      restore.leave_stopped = true;
      restore.verified = true;  // by the transfer, as it committed the image
      restore.lease_fd = options.lease_fd;
      ckpt::PhaseTimes times;
      StatusOr<ckpt::JobRecord> got = ckpt::RestoreJob(criu, image, restore, progress, &times);
      if (!got.ok()) {
        (void)channel->Send("ERR " + got.status().message());
        return got.status();
      }
      job = *got;
      restored = true;
      PALADIN_RETURN_IF_ERROR(channel->Send("OK " + std::to_string(job.pid)));
    } else if (*command == "RESUME" && restored) {
      Status s = ckpt::ResumeJob(&job);
      (void)channel->Send(s.ok() ? "OK" : "ERR " + s.message());
      if (!s.ok()) return s;
      return job;
    } else if (*command == "ABORT") {
      if (restored) {
        for (uint32_t pid : quota::ProcessTree(static_cast<uint32_t>(job.pid))) {
          kill(static_cast<pid_t>(pid), SIGKILL);
        }
      }
      (void)channel->Send("OK");
      return FailedPrecondition("the source abandoned the move; the restored copy was dropped");
    } else {
      (void)channel->Send("ERR unexpected command '" + *command + "'");
    }
  }
}

}  // namespace

StatusOr<ckpt::JobRecord> ServeOneMigration(const ckpt::Criu& criu,
                                            const DestinationOptions& options,
                                            const ckpt::Progress& progress) {
  const std::string image = options.dir + "/image";
  StatusOr<Listener> commands = Listener::Listen(options.bind_address, options.port + 1);
  if (!commands.ok()) return commands.status();
  transfer::ReceiverOptions receive;
  receive.out_dir = image;
  receive.token = options.token;
  receive.bind_address = options.bind_address;
  receive.port = options.port;
  receive.local_criu_version = criu.version;
  receive.idle_timeout_s = 600;  // a source that gives up must not keep the destination waiting
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  if (fault.ok()) receive.fault = *fault;
  StatusOr<std::unique_ptr<transfer::Receiver>> receiver = transfer::Receiver::Listen(receive);
  if (!receiver.ok()) return receiver.status();
  progress("listening on " + options.bind_address + ":" + std::to_string(options.port) +
           " (images) and :" + std::to_string(options.port + 1) + " (commands)");
  const auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(); };
  StatusOr<transfer::ReceiveReport> received = [&]() -> StatusOr<transfer::ReceiveReport> {
    std::atomic<bool> over{false};
    std::thread watch([&] {
      while (!over.load() && !cancelled()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!over.load()) (*receiver)->Stop();
    });
    StatusOr<transfer::ReceiveReport> r = (*receiver)->ReceiveOne();
    over.store(true);
    watch.join();
    return r;
  }();
  if (cancelled()) return FailedPrecondition("the move was called off before its image arrived");
  if (!received.ok()) return received.status();
  progress("received and verified " + std::to_string(received->files) + " files");
  StatusOr<Channel> channel = IoError("no command connection from the source within 120 s");
  for (int waited = 0; waited < 120 * 5 && !cancelled(); ++waited) {
    channel = commands->Accept(0.2);
    if (channel.ok()) break;
  }
  if (cancelled()) return FailedPrecondition("the move was called off before the source connected");
  if (!channel.ok()) return channel.status();
  StatusOr<std::string> hello = channel->Receive(30);
  if (!hello.ok()) return hello.status();
  if (hello->rfind("TOKEN ", 0) != 0 || !SameSecret(hello->substr(6), options.token)) {
    (void)channel->Send("ERR authentication failed");
    return FailedPrecondition("a command connection failed authentication");
  }
  PALADIN_RETURN_IF_ERROR(channel->Send("OK"));
  return Obey(criu, options, &*channel, image, progress);
}

}  // namespace paladin::migrate
