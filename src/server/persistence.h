// What the control plane keeps on disk, as its records, and the only SQL in the server: the
// tables of docs/server.md ("The store") behind typed calls. Control loads everything at start-up
// and writes what changed in one transaction per pass (Store::Transaction over store()); a
// replicated store would implement the same calls.
//
// Thread safety: none; the control plane serialises every call under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model.h"
#include "paladin/api/wire.h"
#include "paladin/base/status.h"
#include "paladin/server/store.h"

namespace paladin::server {

struct TokenRecord {
  int64_t id = 0;
  std::string digest;  // SHA-256 of the secret: the secret itself is never stored
  std::string scope;
  std::string name;
  double created_at = 0;
};

struct EventRecord {
  int64_t id = 0;  // assigned by the store
  double t = 0;
  std::string job, node, kind, message, team;
};

struct UsageSampleRecord {
  int64_t job = 0;
  double t = 0;
  int64_t used = 0, quota = 0, predicted = 0;
};

// Which events to read: of one job (or all), of one team (or all), after an event id or a time.
struct EventQuery {
  std::string job;
  std::string team;  // "" = every team's
  int64_t after_id = 0;
  double after_t = 0;
  int limit = 1000;  // the newest ones
};

class Persistence {
 public:
  explicit Persistence(Store* store) : store_(store) {}
  Store* store() const { return store_; }

  // --- whole tables, at start-up ---
  StatusOr<std::vector<TokenRecord>> Tokens();
  StatusOr<std::vector<TeamRecord>> Teams();
  StatusOr<std::vector<NodeRecord>> Nodes();
  // In id order, with seq, id, team and state from their columns.
  StatusOr<std::vector<JobRecord>> Jobs();
  // The commands not yet acknowledged; *max_id: the highest id ever given (0 when none).
  StatusOr<std::vector<CommandRecord>> UnackedCommands(int64_t* max_id);
  StatusOr<std::vector<MigrationRecord>> Migrations();
  StatusOr<std::map<std::string, int64_t>> Counters();
  // The ledger of pod moves (PodBook), in id order. A row that does not read back is an error
  // naming it: the server does not start on a ledger it cannot trust.
  StatusOr<std::vector<api::PodMove>> PodMoves();

  // --- writes ---
  Status SaveJob(const JobRecord& j);
  Status SaveNode(const NodeRecord& n);  // and its GPUs
  Status SaveTeam(const TeamRecord& t);
  Status SaveCommand(const CommandRecord& c);
  Status SaveMigration(const MigrationRecord& m);
  Status SaveCounter(const std::string& key, int64_t value);
  Status SavePodMove(const api::PodMove& m);
  // Drops all but the newest `keep` ended (done or failed) pod moves.
  Status KeepNewestEndedPodMoves(int64_t keep);
  Status AddEvent(const EventRecord& e);
  Status AddUsageSample(const UsageSampleRecord& s);
  // Drops all but the newest `keep` samples of the job.
  Status KeepNewestSamples(int64_t job, int64_t keep);
  // Appends to a job's stream, keeping its last `keep_bytes`.
  Status AppendLog(int64_t job, const std::string& stream, const std::string& text,
                   size_t keep_bytes);
  Status AddCheckpoint(const std::string& job, int64_t seq, const CheckpointRef& ref);
  Status MarkCheckpointDeleted(const std::string& job, const std::string& path);
  StatusOr<int64_t> AddToken(const TokenRecord& t);  // returns its id
  Status DeleteToken(int64_t id);

  // --- reads while serving ---
  StatusOr<std::string> Log(int64_t job, const std::string& stream);
  StatusOr<std::vector<UsageSampleRecord>> UsageSamples(int64_t job);  // oldest first
  // The job's checkpoints not deleted, beyond its newest `keep`.
  StatusOr<std::vector<std::string>> CheckpointsBeyond(const std::string& job, int64_t keep);
  StatusOr<std::vector<EventRecord>> Events(const EventQuery& query);  // oldest first

 private:
  Store* store_;
};

}  // namespace paladin::server
