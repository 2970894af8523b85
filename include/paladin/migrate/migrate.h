// Live migration of a job between machines, as the transaction in DESIGN.md: the source
// checkpoints the job and leaves it stopped, sends the image (paladin::transfer), and the
// destination verifies and restores it, left stopped; then the owner of the job's record (this
// command, until there is a server) commits the move, the destination resumes the job and only
// then is the source released. Any failure before the commit resumes the source and drops the
// destination's copy: a job is never lost and never runs twice.
//
// The destination (`paladin receive --listen PORT`) takes the image on PORT and the transaction's
// commands on PORT+1 (docs/formats/migrate.md).
#ifndef PALADIN_MIGRATE_MIGRATE_H_
#define PALADIN_MIGRATE_MIGRATE_H_

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/criu.h"
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
  std::function<Status()> commit;
};

struct MigrateReport {
  ckpt::PhaseTimes times;
  double pause_s = 0;  // from stopping the job here to its resuming there
  long long remote_pid = 0;
  std::string image;  // kept only with keep_image
};

StatusOr<MigrateReport> Migrate(const ckpt::Criu& criu, ckpt::JobRecord* job,
                                const MigrateOptions& options, const ckpt::Progress& progress);

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
  // its own timeouts), since the source may already be waiting for the commit.
  const std::atomic<bool>* cancel = nullptr;
  // The destination agent's lease, which the received job's init follows (RestoreOptions2).
  int lease_fd = -1;
};

// Receives one job and carries out the destination's part of its migration. Returns the job as
// restored and resumed, or why not (the source then resumes it).
StatusOr<ckpt::JobRecord> ServeOneMigration(const ckpt::Criu& criu,
                                            const DestinationOptions& options,
                                            const ckpt::Progress& progress);

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_MIGRATE_H_
