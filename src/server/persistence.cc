// The control plane's tables (persistence.h): every SQL statement of the server is here.
#include "persistence.h"

#include <algorithm>
#include <exception>

#include "paladin/server/validate.h"

namespace paladin::server {
namespace {

// A record's JSON document; an unreadable one reads as an empty object (the record keeps its
// columns and defaults).
Json Doc(const DbValue& text) {
  Json doc = Json::parse(DbText(text), nullptr, false);
  return doc.is_object() ? doc : Json::object();
}

}  // namespace

StatusOr<std::vector<TokenRecord>> Persistence::Tokens() {
  auto rows = store_->Query("SELECT id, digest, scope, name, created_at FROM tokens");
  if (!rows.ok()) return rows.status();
  std::vector<TokenRecord> out;
  for (const DbRow& r : *rows) {
    out.push_back({DbInt(r[0]), DbText(r[1]), DbText(r[2]), DbText(r[3]), DbReal(r[4])});
  }
  return out;
}

StatusOr<std::vector<TeamRecord>> Persistence::Teams() {
  auto rows = store_->Query("SELECT name, max_gpus, max_gpu_mem, priority, usage FROM teams");
  if (!rows.ok()) return rows.status();
  std::vector<TeamRecord> out;
  for (const DbRow& r : *rows) {
    TeamRecord t;
    t.name = DbText(r[0]);
    t.max_gpus = DbInt(r[1]);
    t.max_gpu_mem = DbInt(r[2]);
    t.priority = static_cast<int>(DbInt(r[3]));
    t.usage = TeamUsageFromDoc(Json::parse(DbText(r[4]), nullptr, false));
    out.push_back(std::move(t));
  }
  return out;
}

StatusOr<std::vector<NodeRecord>> Persistence::Nodes() {
  auto rows = store_->Query("SELECT doc, name FROM nodes");
  if (!rows.ok()) return rows.status();
  std::vector<NodeRecord> out;
  for (const DbRow& r : *rows) {
    NodeRecord n;
    try {
      n = NodeFromDoc(Doc(r[0]));
    } catch (const std::exception&) {
    }
    n.name = DbText(r[1]);
    out.push_back(std::move(n));
  }
  return out;
}

StatusOr<std::vector<JobRecord>> Persistence::Jobs() {
  auto rows = store_->Query("SELECT id, team, state, doc FROM jobs ORDER BY id");
  if (!rows.ok()) return rows.status();
  std::vector<JobRecord> out;
  for (const DbRow& r : *rows) {
    JobRecord j;
    try {
      j = JobFromDoc(Doc(r[3]));
    } catch (const std::exception&) {
    }
    j.seq = DbInt(r[0]);
    j.id = FormatJobId(j.seq);
    j.team = DbText(r[1]);
    // The state column is the doc's state, kept apart for queries: a known one stands.
    if (std::optional<JobState> column = ParseJobState(DbText(r[2]))) j.LoadState(*column);
    out.push_back(std::move(j));
  }
  return out;
}

StatusOr<std::vector<CommandRecord>> Persistence::UnackedCommands(int64_t* max_id) {
  auto rows = store_->Query("SELECT id, node, job, kind, body, created_at, acked FROM commands");
  if (!rows.ok()) return rows.status();
  std::vector<CommandRecord> out;
  *max_id = 0;
  for (const DbRow& r : *rows) {
    *max_id = std::max(*max_id, DbInt(r[0]));
    if (DbInt(r[6]) != 0) continue;
    CommandRecord c;
    c.id = DbInt(r[0]);
    c.node = DbText(r[1]);
    c.job = DbText(r[2]);
    StatusOr<api::Command> command = api::DecodeCommand(Json::parse(DbText(r[4]), nullptr, false));
    if (!command.ok()) {
      return Internal("the store's command " + std::to_string(c.id) +
                      " does not read back: " + command.status().message());
    }
    c.command = std::move(*command);
    c.created_at = DbReal(r[5]);
    out.push_back(std::move(c));
  }
  return out;
}

StatusOr<std::vector<MigrationRecord>> Persistence::Migrations() {
  auto rows = store_->Query("SELECT id, doc FROM migrations");
  if (!rows.ok()) return rows.status();
  std::vector<MigrationRecord> out;
  for (const DbRow& r : *rows) {
    MigrationRecord m;
    try {
      m = MigrationFromDoc(Doc(r[1]));
    } catch (const std::exception&) {
    }
    m.id = DbInt(r[0]);
    out.push_back(std::move(m));
  }
  return out;
}

StatusOr<std::map<std::string, int64_t>> Persistence::Counters() {
  auto rows = store_->Query("SELECT key, value FROM counters");
  if (!rows.ok()) return rows.status();
  std::map<std::string, int64_t> out;
  for (const DbRow& r : *rows) out[DbText(r[0])] = DbInt(r[1]);
  return out;
}

Status Persistence::SaveJob(const JobRecord& j) {
  return store_->Run(
      "INSERT INTO jobs (id, team, state, doc) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
      "SET team = excluded.team, state = excluded.state, doc = excluded.doc",
      {j.seq, j.team, j.StateName(), JobToDoc(j).dump()});
}

Status Persistence::SaveNode(const NodeRecord& n) {
  PALADIN_RETURN_IF_ERROR(store_->Run(
      "INSERT INTO nodes (name, address, migrate_port, state, last_heartbeat, doc) VALUES "
      "(?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET address = excluded.address, "
      "migrate_port = excluded.migrate_port, state = excluded.state, "
      "last_heartbeat = excluded.last_heartbeat, doc = excluded.doc",
      {n.name, n.address, int64_t{n.migrate_port}, std::string(NodeStateName(n.state)),
       n.last_heartbeat, NodeDoc(n).dump()}));
  PALADIN_RETURN_IF_ERROR(store_->Run("DELETE FROM gpus WHERE node = ?", {n.name}));
  for (const GpuRecord& g : n.gpus) {
    PALADIN_RETURN_IF_ERROR(store_->Run(
        "INSERT INTO gpus (node, idx, uuid, model, memory_bytes, emulated, healthy, fault) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {n.name, int64_t{g.index}, g.uuid, g.model, g.memory_bytes, int64_t{g.emulated},
         int64_t{g.healthy}, g.fault}));
  }
  return Status::Ok();
}

Status Persistence::SaveTeam(const TeamRecord& t) {
  return store_->Run(
      "INSERT INTO teams (name, max_gpus, max_gpu_mem, priority, usage) VALUES (?, ?, ?, ?, ?) "
      "ON CONFLICT(name) DO UPDATE SET max_gpus = excluded.max_gpus, max_gpu_mem = "
      "excluded.max_gpu_mem, priority = excluded.priority, usage = excluded.usage",
      {t.name, t.max_gpus, t.max_gpu_mem, int64_t{t.priority}, TeamUsageDoc(t.usage).dump()});
}

Status Persistence::SaveCommand(const CommandRecord& c) {
  return store_->Run(
      "INSERT INTO commands (id, node, job, kind, body, created_at, delivered_at, acked, ok, "
      "result) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
      "delivered_at = excluded.delivered_at, acked = excluded.acked, ok = excluded.ok, "
      "result = excluded.result",
      {c.id, c.node, c.job, api::CommandKindName(c.command.kind), api::ToJson(c.command).dump(),
       c.created_at, c.sent_at > 0 ? DbValue(c.sent_at) : DbValue(nullptr), int64_t{c.acked},
       c.acked ? DbValue(int64_t{c.ok}) : DbValue(nullptr), c.result.dump()});
}

Status Persistence::SaveMigration(const MigrationRecord& m) {
  return store_->Run(
      "INSERT INTO migrations (id, job, from_node, from_gpu, to_node, to_gpu, step, "
      "commit_answer, created_at, ended_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT(id) DO UPDATE SET step = excluded.step, commit_answer = "
      "excluded.commit_answer, ended_at = excluded.ended_at, doc = excluded.doc",
      {m.id, m.job, m.from_node, int64_t{m.from_gpu}, m.to_node, int64_t{m.to_gpu}, m.StepName(),
       m.commit_answer ? DbValue(int64_t{*m.commit_answer}) : DbValue(nullptr), m.created_at,
       m.ended_at > 0 ? DbValue(m.ended_at) : DbValue(nullptr), MigrationDoc(m).dump()});
}

StatusOr<std::vector<api::PodMove>> Persistence::PodMoves() {
  auto rows = store_->Query("SELECT id, doc FROM pod_moves ORDER BY id");
  if (!rows.ok()) return rows.status();
  std::vector<api::PodMove> out;
  for (const DbRow& r : *rows) {
    const std::string row = "pod_moves row " + std::to_string(DbInt(r[0])) + ": ";
    const Json doc = Json::parse(DbText(r[1]), nullptr, false);
    StatusOr<api::PodMove> m = api::DecodePodMove(doc);
    if (!m.ok()) return Internal(row + m.status().message());
    if (m->id != DbInt(r[0])) return Internal(row + "its doc has another id");
    out.push_back(std::move(*m));
  }
  return out;
}

Status Persistence::SavePodMove(const api::PodMove& m) {
  return store_->Run(
      "INSERT INTO pod_moves (id, cluster, namespace, name, state, doc) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT(id) DO UPDATE SET state = excluded.state, doc = excluded.doc",
      {m.id, m.cluster, m.ns, m.name, std::string(api::PodMoveStateName(m.state)),
       api::ToJson(m).dump()});
}

Status Persistence::KeepNewestEndedPodMoves(int64_t keep) {
  return store_->Run(
      "DELETE FROM pod_moves WHERE state IN ('done', 'failed') AND id NOT IN (SELECT id FROM "
      "pod_moves WHERE state IN ('done', 'failed') ORDER BY id DESC LIMIT ?)",
      {keep});
}

Status Persistence::SaveCounter(const std::string& key, int64_t value) {
  return store_->Run(
      "INSERT INTO counters (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
      "excluded.value",
      {key, value});
}

Status Persistence::AddEvent(const EventRecord& e) {
  return store_->Run(
      "INSERT INTO events (t, job, node, kind, message, team) VALUES (?, ?, ?, ?, ?, ?)",
      {e.t, e.job, e.node, e.kind, e.message, e.team});
}

Status Persistence::AddUsageSample(const UsageSampleRecord& s) {
  return store_->Run(
      "INSERT INTO usage_samples (job, t, used_bytes, quota_bytes, predicted_bytes) VALUES "
      "(?, ?, ?, ?, ?)",
      {s.job, s.t, s.used, s.quota, s.predicted});
}

Status Persistence::KeepNewestSamples(int64_t job, int64_t keep) {
  return store_->Run(
      "DELETE FROM usage_samples WHERE job = ?1 AND rowid <= (SELECT rowid FROM usage_samples "
      "WHERE job = ?1 ORDER BY rowid DESC LIMIT 1 OFFSET ?2)",
      {job, keep});
}

Status Persistence::AppendLog(int64_t job, const std::string& stream, const std::string& text,
                              size_t keep_bytes) {
  StatusOr<std::string> all = Log(job, stream);
  if (!all.ok()) return all.status();
  *all += text;
  if (all->size() > keep_bytes) *all = all->substr(all->size() - keep_bytes);
  return store_->Run(
      "INSERT INTO logs (job, stream, text) VALUES (?, ?, ?) ON CONFLICT(job, stream) DO "
      "UPDATE SET text = excluded.text",
      {job, stream, *all});
}

Status Persistence::AddCheckpoint(const std::string& job, int64_t seq, const CheckpointRef& ref) {
  return store_->Run("INSERT INTO checkpoints (job, seq, path, at, bytes) VALUES (?, ?, ?, ?, ?)",
                     {job, seq, ref.path, ref.at, ref.bytes});
}

Status Persistence::MarkCheckpointDeleted(const std::string& job, const std::string& path) {
  return store_->Run("UPDATE checkpoints SET deleted = 1 WHERE job = ? AND path = ?", {job, path});
}

StatusOr<int64_t> Persistence::AddToken(const TokenRecord& t) {
  PALADIN_RETURN_IF_ERROR(
      store_->Run("INSERT INTO tokens (digest, scope, name, created_at) VALUES (?, ?, ?, ?)",
                  {t.digest, t.scope, t.name, t.created_at}));
  return store_->LastInsertId();
}

Status Persistence::DeleteToken(int64_t id) {
  return store_->Run("DELETE FROM tokens WHERE id = ?", {id});
}

StatusOr<std::string> Persistence::Log(int64_t job, const std::string& stream) {
  auto rows = store_->Query("SELECT text FROM logs WHERE job = ? AND stream = ?", {job, stream});
  if (!rows.ok()) return rows.status();
  return rows->empty() ? std::string() : DbText((*rows)[0][0]);
}

StatusOr<std::vector<UsageSampleRecord>> Persistence::UsageSamples(int64_t job) {
  auto rows = store_->Query(
      "SELECT t, used_bytes, quota_bytes, predicted_bytes FROM usage_samples WHERE job = ? "
      "ORDER BY rowid",
      {job});
  if (!rows.ok()) return rows.status();
  std::vector<UsageSampleRecord> out;
  for (const DbRow& r : *rows) {
    out.push_back({job, DbReal(r[0]), DbInt(r[1]), DbInt(r[2]), DbInt(r[3])});
  }
  return out;
}

StatusOr<std::vector<std::string>> Persistence::CheckpointsBeyond(const std::string& job,
                                                                  int64_t keep) {
  auto rows = store_->Query(
      "SELECT path FROM checkpoints WHERE job = ? AND deleted = 0 ORDER BY id DESC LIMIT -1 "
      "OFFSET ?",
      {job, keep});
  if (!rows.ok()) return rows.status();
  std::vector<std::string> out;
  for (const DbRow& r : *rows) out.push_back(DbText(r[0]));
  return out;
}

StatusOr<std::vector<EventRecord>> Persistence::Events(const EventQuery& query) {
  std::string sql = "SELECT id, t, job, node, kind, message FROM events WHERE 1 = 1";
  std::vector<DbValue> params;
  if (!query.job.empty()) {
    sql += " AND job = ?";
    params.emplace_back(query.job);
  }
  if (!query.team.empty()) {
    sql += " AND team = ?";
    params.emplace_back(query.team);
  }
  if (query.after_t > 0) {
    sql += " AND t > ?";
    params.emplace_back(query.after_t);
  }
  if (query.after_id > 0) {
    sql += " AND id > ?";
    params.emplace_back(query.after_id);
  }
  sql += " ORDER BY id DESC LIMIT ?";
  params.emplace_back(int64_t{query.limit});
  auto rows = store_->Query(sql, params);
  if (!rows.ok()) return rows.status();
  std::vector<EventRecord> out;
  for (auto it = rows->rbegin(); it != rows->rend(); ++it) {
    const DbRow& r = *it;
    EventRecord e;
    e.id = DbInt(r[0]);
    e.t = DbReal(r[1]);
    e.job = DbText(r[2]);
    e.node = DbText(r[3]);
    e.kind = DbText(r[4]);
    e.message = DbText(r[5]);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace paladin::server
