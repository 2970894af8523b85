// One side's durable record of a direct move, its keeper process and the fault hooks the tests
// drive (docs/formats/migrate.md, "State files" and "Faults").
#ifndef PALADIN_MIGRATE_STATE_H_
#define PALADIN_MIGRATE_STATE_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "paladin/base/status.h"
#include "paladin/migrate/control.h"

namespace paladin::migrate {

// Which side of the move keeps the state file ("source", "destination").
enum class MoveRole { kSource, kDestination };
const char* MoveRoleName(MoveRole role);
std::optional<MoveRole> MoveRoleNamed(const std::string& name);

// Where a side is in the move (docs/formats/migrate.md, "State files"). The file and the
// destination's OUTCOME answer name them; one table in state.cc holds the names and which side
// records which step.
enum class MoveStep {
  // The source's.
  kCheckpointing,
  kSending,
  kRestoring,  // the destination's too: its restore is under way
  kServing,    // post-copy
  kResumeSent,
  kDone,
  kResumed,
  kInDoubt,
  // The destination's.
  kReceived,
  kRestored,
  kProvisional,  // a fleet post-copy move
  kCommitted,
  kAborted,
};
// The step's name in the state file ("checkpointing", "resume_sent", ...), and back.
const char* MoveStepName(MoveStep step);
std::optional<MoveStep> MoveStepNamed(const std::string& name);
// Whether the `role` side ever records `step`.
bool StepOfRole(MoveRole role, MoveStep step);

struct MoveState {
  MoveRole role = MoveRole::kSource;
  std::string id;
  MoveStep step = MoveStep::kCheckpointing;
  bool acked = false;   // destination: the source has the outcome (it said BYE)
  std::string run_dir;  // the job's run directory on this side
  std::string image;    // source: the image sent; destination: the one received
  std::string host;     // source: the destination's address
  int port = 0;         // source: the destination's command port
  int64_t pid = 0;      // this side's copy's root
  double wait_s = 600;  // source: outcome_timeout_s; destination: answer_for_s
  bool keep_image = false;
  // source: the stopped copy was let go before RESTORE to free the file locks it held (a file
  // system the two sides share would keep them held); the job comes back here from `image`.
  bool released = false;
};

// Written to a temporary file, synced and renamed into place: a crash leaves the old or the new.
Status SaveState(const std::string& path, const MoveState& state);
// The job can write near a state file: one whose role or step is not a move's, or whose step is
// not its role's, is refused with an error naming the file, the key and the value.
StatusOr<MoveState> LoadState(const std::string& path);
// The state at `step`, saved.
Status SaveStep(const std::string& path, MoveState* state, MoveStep step);

// True when $PALADIN_MIGRATE_FAULT (a comma-separated list) names `fault`.
bool FaultSet(const std::string& fault);
// A crash for the tests: SIGKILL of this process where $PALADIN_MIGRATE_FAULT has crash:POINT.
void CrashPoint(const std::string& point);
// A line lost on the way ($PALADIN_MIGRATE_FAULT has drop:WHAT): the connection is cut where it
// would have been sent, so neither side hears from the other on it again. Else sent (Call: and
// its answer returned).
Status SendOrDrop(Channel* channel, const std::string& what, const std::string& line);
StatusOr<std::string> CallOrDrop(Channel* channel, const std::string& what, const std::string& line,
                                 double timeout_s);

// This side's keeper, started as `KEEPER_EXE migrate-keeper STATE` in a session of its own. While
// this process lives the keeper waits; Done() says the move is settled here (the keeper exits);
// without it (this process died, or returned with the move unsettled) the keeper settles it.
class Keeper {
 public:
  Keeper() = default;
  ~Keeper();
  Keeper(Keeper&& other) noexcept : fd_(other.fd_), pid_(other.pid_) { other.fd_ = -1; }
  Keeper& operator=(Keeper&& other) noexcept;
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;
  static StatusOr<Keeper> Start(const std::string& exe, const std::string& state,
                                const std::string& token, int listener_fd);
  void Done();
  pid_t pid() const { return pid_; }

 private:
  int fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_STATE_H_
