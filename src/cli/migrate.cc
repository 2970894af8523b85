// `paladin migrate JOB --peer HOST:PORT` and `paladin receive --listen PORT`: a job moved between
// machines without losing it (include/paladin/migrate/migrate.h). `paladin migrate JOB --to
// NODE[/GPU]` moves a server's job through the server (fleet_moves.cc).
#include "paladin/migrate/migrate.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "fleet.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/workload.h"
#include "paladin/transfer/transfer.h"

namespace paladin::cli {
namespace {

struct MigrateArgs {
  std::string job;
  std::string to;    // NODE[/GPU]: a server's job
  std::string peer;  // HOST:PORT of a paladin receive: a direct move
  std::string token_file;
  int streams = 4;
  bool keep_image = false;
  std::string work_dir;
  FleetFlags fleet;  // a server's job (j-NNNNNN) moves through the server
  bool no_wait = false;
  double outcome_timeout_s = 600;
  bool lazy = false;  // --lazy, the old spelling of --mode post-copy
  // image, stream, post-copy or auto; "" (not given): post-copy with --lazy, else auto.
  std::string mode;
  std::string lazy_address;
  int lazy_port = 0;
  bool lazy_plain = false;
};

// This program, for the keeper of a move's side (`paladin migrate-keeper`).
std::string SelfExe() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

int RunMigrate(MigrateArgs a) {
  StatusOr<std::pair<std::string, int>> to = transfer::ParseHostPort(a.peer);
  StatusOr<std::string> token = transfer::LoadToken(a.token_file);
  if (!to.ok() || !token.ok()) {
    Say("migrate", (!to.ok() ? to.status() : token.status()).message());
    return 2;
  }
  StatusOr<ckpt::JobRecord> job = ckpt::FindJob(a.job);
  if (!job.ok()) {
    Say("migrate", job.status().message());
    return 1;
  }
  if (job->state != ckpt::RunState::kRunning) {
    Say("migrate", "job " + job->name + " is " + std::string(ckpt::RunStateName(job->state)));
    return 1;
  }
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    Say("migrate", criu.status().message());
    return 1;
  }
  const bool auto_chosen = a.mode == "auto";
  if (auto_chosen) {
    // Asks the receiver (FEATURES), which then waits for the move itself.
    StatusOr<std::vector<std::string>> there =
        migrate::PeerMoveModes(to->first, to->second, *token);
    if (!there.ok()) {
      Say("migrate", "--mode auto: " + there.status().message());
      return 1;
    }
    const migrate::ModeChoice chosen =
        migrate::ChooseMode(!job->gpu.empty(), ckpt::LazyCriu(*criu).status(), *there);
    Say("migrate", "--mode auto: " + chosen.mode + " (" + chosen.why + ")");
    a.mode = chosen.mode;
    a.lazy = a.mode == "post-copy";
  }
  if (a.lazy) {
    // Both sides need Paladin's patches: without them a failed transfer leaves two copies.
    criu = ckpt::LazyCriu(*criu);
    if (!criu.ok()) {
      Say("migrate", "--lazy: " + criu.status().message());
      return 1;
    }
  }
  migrate::MigrateOptions options;
  options.lazy = a.lazy;
  options.stream = a.mode == "stream";
  options.image_if_refused = auto_chosen;  // --mode auto: else by image
  options.lazy_address = a.lazy_address;
  options.lazy_port = a.lazy_port;
  options.lazy_plain = a.lazy_plain;
  options.host = to->first;
  options.port = to->second;
  options.token = *token;
  options.streams = a.streams;
  options.keep_image = a.keep_image;
  options.work_dir = a.work_dir.empty() ? job->run_dir : a.work_dir;
  options.outcome_timeout_s = a.outcome_timeout_s;
  options.keeper_exe = SelfExe();
  StatusOr<migrate::MigrateReport> report = migrate::Migrate(
      *criu, &*job, options, [](const std::string& line) { Say("migrate", line); });
  if (!report.ok()) {
    Say("migrate", report.status().message());
    return 1;
  }
  if (report->page_stream_resumes > 0) {
    Say("migrate",
        "the page stream's link was cut " + std::to_string(report->page_stream_resumes) +
            " time(s) and made again; the stream went on from the byte where it stopped");
  }
  if (a.lazy) {
    std::printf(
        "moved %s to %s (pid %lld there) post-copy: pause %.2f s, total %.2f s until "
        "every page arrived and this copy was released; %s%s\n",
        job->name.c_str(), a.peer.c_str(), report->remote_pid, report->pause_s, report->total_s,
        report->times.Describe().c_str(),
        report->image.empty() ? "" : ("; image kept in " + report->image).c_str());
    return 0;
  }
  if (!report->mode_note.empty()) Say("migrate", report->mode_note);
  if (report->mode == "stream") {
    std::printf("moved %s to %s (pid %lld there) by streaming pre-copy: pause %.2f s; %s%s\n",
                job->name.c_str(), a.peer.c_str(), report->remote_pid, report->pause_s,
                report->times.Describe().c_str(),
                report->image.empty() ? "" : ("; image kept in " + report->image).c_str());
    return 0;
  }
  std::printf("moved %s to %s (pid %lld there) by image: pause %.2f s; %s%s\n", job->name.c_str(),
              a.peer.c_str(), report->remote_pid, report->pause_s, report->times.Describe().c_str(),
              report->image.empty() ? "" : ("; image kept in " + report->image).c_str());
  return 0;
}

struct MigrateReceiveArgs {
  int port = 0;
  std::string bind = "127.0.0.1";
  std::string dir;
  std::string token_file;
  std::string gpu_map;
  double command_timeout_s = 600;
  double answer_for_s = 600;
  bool lazy_plain = false;
};

int RunMigrateReceive(const MigrateReceiveArgs& a) {
  StatusOr<std::string> token = transfer::LoadToken(a.token_file);
  if (!token.ok()) {
    Say("receive", token.status().message());
    return 2;
  }
  migrate::DestinationOptions options;
  options.port = a.port;
  options.bind_address = a.bind;
  options.token = *token;
  options.dir = a.dir.empty() ? ckpt::RunBase() + "/incoming-" + std::to_string(a.port) : a.dir;
  if (!GpuMapFlag("receive", a.gpu_map, &options.gpu_map)) return 2;
  options.command_timeout_s = a.command_timeout_s;
  options.answer_for_s = a.answer_for_s;
  options.lazy_plain = a.lazy_plain;
  options.keeper_exe = SelfExe();
  StatusOr<ckpt::Criu> criu = ReadyCriu();
  if (!criu.ok()) {
    Say("receive", criu.status().message());
    return 1;
  }
  options.lazy_criu = ckpt::LazyCriu(*criu);  // now, not in a post-copy move's pause
  // A receiver killed mid-move left its streamed pages behind (or, before the sealed relays,
  // its page-stream keys).
  for (const std::string& dir : migrate::RemoveOrphanedMoveFolders({})) {
    Say("receive", "removed " + dir + ", left by a move whose process died");
  }
  StatusOr<ckpt::JobRecord> job = migrate::ServeOneMigration(
      *criu, options, [](const std::string& line) { Say("receive", line); });
  if (!job.ok()) {
    Say("receive", job.status().message());
    return 1;
  }
  std::printf("received %s: running here as pid %lld; logs in %s\n", job->name.c_str(),
              static_cast<long long>(job->pid), job->run_dir.c_str());
  return 0;
}

}  // namespace

void RegisterMigrate(CLI::App& app, int* exit_code) {
  auto m = std::make_shared<MigrateArgs>();
  CLI::App* migrate = app.add_subcommand(
      "migrate",
      "Move a running job to another machine (paladin receive there); on any failure "
      "before the move commits, the job resumes here");
  migrate->add_option("job", m->job, "Job name or the host pid of its root")->required();
  CLI::Option* to = migrate->add_option(
      "--to", m->to, "NODE[/GPU]: move a server's job there, through the server (its transaction)");
  CLI::Option* peer = migrate->add_option(
      "--peer", m->peer, "HOST:PORT of a paladin receive: move a job of this machine directly");
  to->excludes(peer);
  peer->excludes(to);
  AddFleetFlags(migrate, &m->fleet);
  migrate->add_flag("--no-wait", m->no_wait,
                    "A server's job: return once the move is asked for, do not follow it");
  migrate->add_option("--token-file", m->token_file, "Shared token (else $PALADIN_TOKEN)");
  migrate->add_option("--streams", m->streams, "Parallel connections for the image")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  migrate->add_flag("--keep-image", m->keep_image, "Keep the local image after the move");
  migrate
      ->add_option("--outcome-timeout", m->outcome_timeout_s,
                   "Once RESUME is sent and its answer lost: how long to ask the destination "
                   "what became of the move (the job stays stopped here meanwhile; then its copy "
                   "here is dropped and the image kept)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  migrate
      ->add_option("--mode", m->mode,
                   "--peer: image (dump to a local image, then send it), stream (streaming "
                   "pre-copy: the dump sends the memory straight to the destination, which keeps "
                   "it in memory when it has room), post-copy (the job resumes there at once and "
                   "pulls its memory from its stopped copy here, released once every page "
                   "arrived; needs the CRIU of scripts/criu_lazy.sh on both sides), auto "
                   "(post-copy where both sides can and the job has no GPU, else stream where "
                   "the receiver takes it, else image; asks the receiver first; the default). "
                   "docs/lazy_migration.md")
      ->check(CLI::IsMember({"image", "stream", "post-copy", "auto"}));
  migrate->add_flag("--lazy", m->lazy, "The same as --mode post-copy");
  migrate->add_option("--lazy-address", m->lazy_address,
                      "--lazy: the address the page relay listens on (default: the one this host "
                      "reaches the peer from)");
  migrate->add_flag("--lazy-plain", m->lazy_plain,
                    "--lazy: the page relays carry the pages in clear, not sealed with keys of "
                    "this move: anyone on the path can read the job's memory (for measurements on "
                    "a trusted network; the receiver must allow it)");
  migrate
      ->add_option("--lazy-port", m->lazy_port,
                   "--lazy: the page relay's port (default: the peer's PORT+2)")
      ->check(CLI::Range(1, 65535));
  migrate->add_option("--work-dir", m->work_dir,
                      "Where the image is written (default: the "
                      "job's run directory)");
  migrate->callback([m, exit_code, migrate] {
    if (m->mode.empty()) m->mode = m->lazy ? "post-copy" : "auto";
    if (m->lazy && m->mode != "image" && m->mode != "post-copy") {
      Say("migrate", "--lazy is --mode post-copy; it cannot be --mode " + m->mode);
      *exit_code = 2;
      return;
    }
    if (m->mode == "post-copy") m->lazy = true;
    if (m->peer.empty() && m->mode == "auto" && !migrate->count("--mode")) {
      m->mode.clear();  // a server's job: the server's --move-mode decides
    } else if ((m->mode == "stream" || m->mode == "auto") && m->peer.empty()) {
      Say("migrate", "--mode " + m->mode +
                         " moves a job of this machine directly: give --peer HOST:PORT (a "
                         "server's job moves by the server's --move-mode)");
      *exit_code = 2;
      return;
    }
    if (m->lazy_plain && !m->lazy) {
      Say("migrate", "--lazy-plain is an option of --lazy (post-copy) moves");
      *exit_code = 2;
      return;
    }
    if (!m->peer.empty()) {
      *exit_code = RunMigrate(*m);
      return;
    }
    if (m->lazy) {
      Say("migrate",
          "--lazy moves a job of this machine directly: give --peer HOST:PORT (a "
          "server's job moves by the server's --move-mode)");
      *exit_code = 2;
      return;
    }
    if (m->to.empty()) {
      Say("migrate",
          "say where to: --to NODE[/GPU] for a server's job, --peer HOST:PORT for a "
          "job of this machine (paladin receive there)");
      *exit_code = 2;
      return;
    }
    if (transfer::ParseHostPort(m->to).ok() && m->to.find('/') == std::string::npos) {
      Say("migrate", "--to " + m->to +
                         " names a node of the fleet; to move a job of this machine to a paladin "
                         "receive at " +
                         m->to + ", use --peer " + m->to);
      *exit_code = 2;
      return;
    }
    *exit_code = FleetMigrate(m->job, m->to, m->fleet, !m->no_wait);
  });

  auto r = std::make_shared<MigrateReceiveArgs>();
  CLI::App* receive = app.add_subcommand(
      "receive", "Receive one job moved by paladin migrate: verify, restore, resume when told");
  receive->add_option("--listen", r->port, "Port for images (commands use PORT+1)")
      ->required()
      ->check(CLI::Range(1, 65534));
  receive->add_option("--bind", r->bind, "Address to listen on")->capture_default_str();
  receive->add_option("--dir", r->dir, "Where the image lands");
  receive->add_option("--token-file", r->token_file, "Shared token (else $PALADIN_TOKEN)");
  receive->add_option("--gpu-map", r->gpu_map, "Restore onto other GPUs: OLD-UUID=NEW-UUID,...");
  receive
      ->add_option("--command-timeout", r->command_timeout_s,
                   "Silence from the source after which a restored, uncommitted copy is dropped")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  receive
      ->add_option("--answer-for", r->answer_for_s,
                   "How long to go on answering the source about a decided move it has not "
                   "acknowledged")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  receive->add_flag("--lazy-plain", r->lazy_plain,
                    "Also take post-copy moves whose pages come in clear "
                    "(paladin migrate --lazy --lazy-plain)");
  receive->callback([r, exit_code] { *exit_code = RunMigrateReceive(*r); });

  // The keeper of one side of a move (started by migrate and receive; docs/formats/migrate.md).
  auto state = std::make_shared<std::string>();
  CLI::App* keeper = app.add_subcommand("migrate-keeper", "");
  keeper->group("");  // internal: not listed in --help
  keeper->add_option("state", *state, "The side's state file")->required();
  keeper->callback([state, exit_code] { *exit_code = migrate::RunKeeper(*state); });
}

}  // namespace paladin::cli
