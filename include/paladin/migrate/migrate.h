// Live migration of a job between machines, as the transaction in DESIGN.md: the source
// checkpoints the job and leaves it stopped, sends the image (paladin::transfer), and the
// destination verifies and restores it, left stopped; then the move commits and the destination
// resumes the job. One side owns the commit and decides it durably: the destination for a direct
// move (`paladin migrate`), the server for a fleet's. Once the source has asked for the commit
// (sent RESUME, or asked the server) it never resumes by itself: it stays stopped until it learns
// the outcome. A keeper process takes over a side whose process dies, so that no stopped copy is
// left behind. The state machine, every message and every timeout: docs/formats/migrate.md.
//
// The destination (`paladin receive --listen PORT`) takes the image on PORT and the transaction's
// commands on PORT+1.
#ifndef PALADIN_MIGRATE_MIGRATE_H_
#define PALADIN_MIGRATE_MIGRATE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
#include "paladin/ckpt/image.h"
#include "paladin/ckpt/workload.h"

namespace paladin::migrate {

struct MigrateOptions {
  std::string host;
  int port = 0;
  std::string token;
  int streams = 4;
  bool keep_image = false;
  std::string work_dir;  // where the image is written before it is sent
  // The commit point, called once the destination holds the job restored and stopped: OK
  // commits the move (the destination resumes the job, this side is released); an error
  // abandons it (the destination drops its copy, the job resumes here). Unset: this call owns
  // the job's record and commits by itself (the direct form, `paladin migrate`).
  // The owner's answer is final: OK commits; FailedPrecondition means it did not commit (the
  // source resumes); any other error leaves the outcome in doubt, and the job stays stopped here.
  std::function<Status()> commit;
  // The direct form: the migration's name (random when empty), how long the source, once it has
  // sent RESUME, keeps asking the destination what became of the move (then it gives up: its
  // stopped copy is killed and the image kept), and the program run as this side's keeper (""
  // for none: the node agent keeps its own records).
  std::string id;
  double outcome_timeout_s = 600;
  std::string keeper_exe;
  // Post-copy (`paladin migrate --lazy`, or a fleet move with commit and resolve set; `criu`
  // must come from ckpt::LazyCriu): the job resumes at the destination as soon as it is restored
  // without its memory, which it pulls from this side's stopped copy, served by the dump through
  // the page relay on lazy_address:lazy_port (a cut link is made again). This copy is released only
  // once the dump says every page went and the destination's copy still runs (the fleet form: and
  // the owner committed, asked only then); else the destination's copy is killed and the job
  // resumes here (docs/lazy_migration.md).
  bool lazy = false;
  std::string lazy_address;      // empty: the address this host uses to reach the peer
  int lazy_port = 0;             // 0: the destination's port + 2
  double lazy_timeout_s = 3600;  // for every page to reach the destination
  // The page relays seal every frame of the page stream under keys of the move (AES-128-GCM);
  // true: they carry it in clear, which anyone on the path can read (for measurements and
  // trusted networks; the destination must allow it). Either way only the other relay, proving
  // the move's relay secret, is let in.
  bool lazy_plain = false;
  // The fleet form of a post-copy move, when the destination cannot confirm that its copy is
  // gone (its agent died, the connection broke): asks the owner to decide against the move
  // unless it committed (true: committed; an error: no answer, the job stays stopped here).
  // The source then waits fence_s before resuming: a destination's copy whose agent died or lost
  // the owner is stopped by that node's lease within it, and one whose agent reaches the owner
  // is called off by it (DestinationOptions::cancel).
  std::function<StatusOr<bool>()> resolve;
  double fence_s = 0;
  // Streaming pre-copy (`paladin migrate --mode stream`; not with lazy): the dump sends the
  // job's memory straight to a page server the destination starts for this move (through the
  // page relays, every frame sealed), which keeps it on tmpfs when it has room; only the rest of
  // the image is
  // written here and sent by the transfer. The transaction is a plain move's: the job stays
  // stopped here until the destination holds it restored (docs/lazy_migration.md, "Streaming
  // pre-copy").
  bool stream = false;
  // Streaming, when the destination refuses to start a page server (it answers PAGE-SERVER with
  // ERR; nothing is stopped yet, and it waits for another connection): move by image instead,
  // and say why in MigrateReport::mode_note. False: the move fails, the job keeps running here.
  bool image_if_refused = false;
};

struct MigrateReport {
  ckpt::PhaseTimes times;
  double pause_s = 0;             // from stopping the job here to its resuming there
  double total_s = 0;             // from stopping the job here to its release here
  std::string mode = "pre-copy";  // by image; or "stream" (streaming pre-copy), "post-copy"
  std::string mode_note;          // why the mode differs from the one asked for ("" when not)
  int page_stream_resumes = 0;    // times its page stream's link was cut and made again
  long long remote_pid = 0;
  std::string image;  // kept only with keep_image
};

StatusOr<MigrateReport> Migrate(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                const MigrateOptions& options, const ckpt::Progress& progress);

// The moves the destination at host:port (its image port; commands on port + 1) takes, asked on
// a command connection of their own (FEATURES, after TOKEN; the receiver then waits for the move
// itself): "stream", and "post-copy" when it has the patched CRIU. Blocks for at most 2 minutes.
// `paladin migrate --mode auto` chooses by it (docs/lazy_migration.md).
StatusOr<std::vector<std::string>> PeerMoveModes(const std::string& host, int port,
                                                 const std::string& token);

// `paladin migrate --mode auto`'s choice, from what each end can: post-copy where the job has
// no GPU (post-copy of device memory is not done), this side has the patched CRIU
// (`post_copy_here`: ckpt::LazyCriu's answer) and the destination takes it; else streaming
// pre-copy where the destination takes a page stream; else by image.
struct ModeChoice {
  std::string mode;  // "post-copy", "stream" or "image" (MigrateArgs' --mode)
  std::string why;
};
ModeChoice ChooseMode(bool job_has_gpu, const Status& post_copy_here,
                      const std::vector<std::string>& destination_takes);

struct DestinationOptions {
  int port = 0;  // images on port, commands on port + 1
  std::string bind_address = "127.0.0.1";
  std::string dir;  // the image lands in dir/image
  std::string token;
  std::vector<std::pair<std::string, std::string>> gpu_map;
  ckpt::RestorePlacement placement;  // where the restored job may be written on this node
  double command_timeout_s = 600;
  // Set from another thread: stop waiting for the source. Honoured until the image has arrived
  // and the source has connected for commands; after that the move runs to its end (bounded by
  // its own timeouts), since the source may already be waiting for the commit. Except in a
  // fleet post-copy move whose copy runs here before the commit: then the copy stops and the
  // owner is asked (resolve) whether to keep it.
  const std::atomic<bool>* cancel = nullptr;
  // The destination agent's lease, which the received job's init follows (RestoreOptions2).
  int lease_fd = -1;
  // The direct form: how long, once the move is decided, the destination goes on answering the
  // source's questions about it (until the source says BYE; 0: not at all), and the keeper
  // program ("" none).
  double answer_for_s = 600;
  std::string keeper_exe;
  // The fleet form: the owner of the job's record decides when the source goes away after
  // RESTORE: true, committed (the copy here resumes); false, not (it is dropped); an error, not
  // known yet (asked again). Unset: this side decides, and decides against the move.
  std::function<StatusOr<bool>()> resolve;
  // Called once the job is restored here, stopped, before the source hears of it: from then on
  // this side holds a copy that must outlive this process's death (the fleet agent records it,
  // so that its successor settles it with the owner).
  std::function<void(const ckpt::JobRecord&)> restored;
  // Called with the arrived image's manifest before it is restored (and before a post-copy
  // move's pages are pulled): the node finishes what the restore needs of it (the fleet agent:
  // the job's uid held, its run directory made as the source had it). An error ends the move
  // before anything is restored (the source resumes the job). Unset: nothing to do.
  std::function<Status(const ckpt::Manifest&)> before_restore;
  // Post-copy: also take a source whose relay sends its pages in clear
  // (MigrateOptions::lazy_plain).
  bool lazy_plain = false;
  // The post-copy CRIU (ckpt::LazyCriu of the CRIU given, or why there is none), found before
  // the move: finding it runs CRIU twice (about 0.1 s), which RESTORE LAZY would otherwise spend
  // in the job's pause. Unset: found when a source asks.
  std::optional<StatusOr<ckpt::Criu>> lazy_criu;
};

// Receives one job and carries out the destination's part of its migration. Returns the job as
// restored and resumed, or why not (the source then resumes it).
StatusOr<ckpt::JobRecord> ServeOneMigration(const ckpt::Criu& criu,
                                            const DestinationOptions& options,
                                            const ckpt::Progress& progress);

// What moves received or sent on this host left behind when their process died mid-move (a fleet
// agent killed, say), which that process could not remove: the folders in each of `move_dirs`
// (a fleet agent's incoming and outgoing folders, each move's an OwnedDir), the page-stream keys
// in the temporary directory, a streaming move's pages on /dev/shm. Never a live move's: each
// such folder is locked by its owner for as long as it lives (paladin/migrate/owned_dir.h).
// Returns those removed.
std::vector<std::string> RemoveOrphanedMoveFolders(const std::vector<std::string>& move_dirs);

// The keeper of one side of a direct move (`paladin migrate-keeper`, started by Migrate and
// ServeOneMigration with keeper_exe): it waits for its side's process to end and, if that process
// died before the move was settled, settles it from the side's state file (the job resumed or
// released at the source; the copy killed or resumed at the destination, and the source's
// questions answered). The liveness pipe is on fd 3, a destination's command listener on fd 4,
// the token in $PALADIN_MIGRATE_KEEPER_TOKEN. Returns the exit status.
int RunKeeper(const std::string& state_file);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_MIGRATE_H_
