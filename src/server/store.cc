#include "paladin/server/store.h"

#include <cstdlib>

namespace paladin::server {

int64_t DbInt(const DbValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  if (const auto* s = std::get_if<std::string>(&v)) return std::strtoll(s->c_str(), nullptr, 10);
  return 0;
}

double DbReal(const DbValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* s = std::get_if<std::string>(&v)) return std::strtod(s->c_str(), nullptr);
  return 0;
}

std::string DbText(const DbValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) return std::to_string(*d);
  return "";
}

bool DbIsNull(const DbValue& v) { return std::holds_alternative<std::nullptr_t>(v); }

std::string SchemaStepSql(int version) {
  switch (version) {
    case 1:  // the first release: teams, tokens, agents and their GPUs, jobs, commands, events
      return R"sql(
CREATE TABLE teams (name TEXT PRIMARY KEY, max_gpus INTEGER NOT NULL DEFAULT 0,
                    max_gpu_mem INTEGER NOT NULL DEFAULT 0);
CREATE TABLE tokens (id INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE,
                     scope TEXT NOT NULL, name TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
CREATE TABLE nodes (name TEXT PRIMARY KEY, address TEXT NOT NULL DEFAULT '',
                    migrate_port INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL DEFAULT 'alive',
                    last_heartbeat REAL NOT NULL DEFAULT 0, doc TEXT NOT NULL DEFAULT '{}');
CREATE TABLE gpus (node TEXT NOT NULL, idx INTEGER NOT NULL, uuid TEXT NOT NULL DEFAULT '',
                   model TEXT NOT NULL DEFAULT '', memory_bytes INTEGER NOT NULL DEFAULT 0,
                   emulated INTEGER NOT NULL DEFAULT 0, healthy INTEGER NOT NULL DEFAULT 1,
                   PRIMARY KEY (node, idx));
CREATE TABLE jobs (id INTEGER PRIMARY KEY, team TEXT NOT NULL, state TEXT NOT NULL,
                   doc TEXT NOT NULL);
CREATE INDEX jobs_team ON jobs (team);
CREATE TABLE commands (id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL,
                       job TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL, body TEXT NOT NULL,
                       created_at REAL NOT NULL, delivered_at REAL, acked INTEGER NOT NULL DEFAULT 0);
CREATE INDEX commands_node ON commands (node, acked);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL,
                     job TEXT NOT NULL DEFAULT '', node TEXT NOT NULL DEFAULT '',
                     kind TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');
)sql";
    case 2:  // team priorities and usage, events by team, usage samples, logs
      return R"sql(
ALTER TABLE teams ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN usage TEXT NOT NULL DEFAULT '{}';
ALTER TABLE events ADD COLUMN team TEXT NOT NULL DEFAULT '';
CREATE INDEX events_job ON events (job);
CREATE TABLE usage_samples (job INTEGER NOT NULL, t REAL NOT NULL, used_bytes INTEGER NOT NULL,
                            quota_bytes INTEGER NOT NULL, predicted_bytes INTEGER NOT NULL);
CREATE INDEX usage_samples_job ON usage_samples (job, t);
CREATE TABLE logs (job INTEGER NOT NULL, stream TEXT NOT NULL, text BLOB NOT NULL,
                   PRIMARY KEY (job, stream));
)sql";
    case 3:  // migrations, checkpoints, command results, GPU faults, counters
      return R"sql(
ALTER TABLE commands ADD COLUMN ok INTEGER;
ALTER TABLE commands ADD COLUMN result TEXT NOT NULL DEFAULT '';
ALTER TABLE gpus ADD COLUMN fault TEXT NOT NULL DEFAULT '';
CREATE TABLE migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,
                         from_node TEXT NOT NULL, from_gpu INTEGER NOT NULL,
                         to_node TEXT NOT NULL, to_gpu INTEGER NOT NULL, step TEXT NOT NULL,
                         commit_answer INTEGER, created_at REAL NOT NULL, ended_at REAL,
                         doc TEXT NOT NULL DEFAULT '{}');
CREATE TABLE checkpoints (id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,
                          seq INTEGER NOT NULL, path TEXT NOT NULL, at REAL NOT NULL,
                          bytes INTEGER NOT NULL DEFAULT 0, deleted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);
)sql";
    case 4:  // the ledger of Kubernetes pod moves asked through the server
      return R"sql(
CREATE TABLE pod_moves (id INTEGER PRIMARY KEY, cluster TEXT NOT NULL, namespace TEXT NOT NULL,
                        name TEXT NOT NULL, state TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX pod_moves_state ON pod_moves (state);
)sql";
    default:
      return "";
  }
}

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string why = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return IoError("cannot open the database " + path + ": " + why);
  }
  std::unique_ptr<Store> store(new Store(db));
  PALADIN_RETURN_IF_ERROR(store->ExecScript(
      "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
      "PRAGMA foreign_keys = ON;"));
  Status upgraded = store->Upgrade();
  if (!upgraded.ok()) return Status(upgraded.code(), path + ": " + upgraded.message());
  return store;
}

Store::~Store() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

Status Store::ExecScript(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string why = error != nullptr ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    return IoError("database: " + why);
  }
  return Status::Ok();
}

Status Store::Upgrade() {
  PALADIN_RETURN_IF_ERROR(
      ExecScript("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);"));
  StatusOr<std::vector<DbRow>> rows = Query("SELECT MAX(version) FROM schema_version");
  if (!rows.ok()) return rows.status();
  version_ = rows->empty() ? 0 : static_cast<int>(DbInt((*rows)[0][0]));
  if (version_ > kSchemaVersion) {
    return FailedPrecondition("the database has schema version " + std::to_string(version_) +
                              "; this Paladin knows up to " + std::to_string(kSchemaVersion));
  }
  while (version_ < kSchemaVersion) {
    const int next = version_ + 1;
    Transaction txn(this);
    PALADIN_RETURN_IF_ERROR(ExecScript(SchemaStepSql(next)));
    PALADIN_RETURN_IF_ERROR(Run("DELETE FROM schema_version"));
    PALADIN_RETURN_IF_ERROR(
        Run("INSERT INTO schema_version (version) VALUES (?)", {int64_t{next}}));
    Status committed = txn.Commit();
    if (!committed.ok()) {
      return Status(committed.code(), "upgrading the schema to version " + std::to_string(next) +
                                          ": " + committed.message());
    }
    version_ = next;
  }
  return Status::Ok();
}

StatusOr<sqlite3_stmt*> Store::Prepare(const std::string& sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) {
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return IoError(std::string("database: ") + sqlite3_errmsg(db_) + " in: " + sql);
  }
  statements_[sql] = stmt;
  return stmt;
}

namespace {

Status Bind(sqlite3* db, sqlite3_stmt* stmt, const std::vector<DbValue>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const int at = static_cast<int>(i) + 1;
    int rc = SQLITE_OK;
    if (const auto* n = std::get_if<int64_t>(&params[i])) {
      rc = sqlite3_bind_int64(stmt, at, *n);
    } else if (const auto* d = std::get_if<double>(&params[i])) {
      rc = sqlite3_bind_double(stmt, at, *d);
    } else if (const auto* s = std::get_if<std::string>(&params[i])) {
      rc = sqlite3_bind_text(stmt, at, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    } else {
      rc = sqlite3_bind_null(stmt, at);
    }
    if (rc != SQLITE_OK) return IoError(std::string("database: bind: ") + sqlite3_errmsg(db));
  }
  return Status::Ok();
}

DbValue Column(sqlite3_stmt* stmt, int i) {
  switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER:
      return static_cast<int64_t>(sqlite3_column_int64(stmt, i));
    case SQLITE_FLOAT:
      return sqlite3_column_double(stmt, i);
    case SQLITE_NULL:
      return nullptr;
    default: {
      const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt, i));
      const int n = sqlite3_column_bytes(stmt, i);
      return std::string(p != nullptr ? p : "", static_cast<size_t>(n));
    }
  }
}

}  // namespace

Status Store::Run(const std::string& sql, const std::vector<DbValue>& params) {
  StatusOr<std::vector<DbRow>> rows = Query(sql, params);
  return rows.ok() ? Status::Ok() : rows.status();
}

StatusOr<std::vector<DbRow>> Store::Query(const std::string& sql,
                                          const std::vector<DbValue>& params) {
  StatusOr<sqlite3_stmt*> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  PALADIN_RETURN_IF_ERROR(Bind(db_, *stmt, params));
  std::vector<DbRow> rows;
  for (;;) {
    const int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      std::string why = "database: ";
      why += sqlite3_errmsg(db_);
      why += " in: ";
      why += sql;
      sqlite3_reset(*stmt);
      return IoError(why);
    }
    const int n = sqlite3_column_count(*stmt);
    DbRow row;
    row.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) row.push_back(Column(*stmt, i));
    rows.push_back(std::move(row));
  }
  sqlite3_reset(*stmt);
  return rows;
}

int64_t Store::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }

Store::Transaction::Transaction(Store* store) : store_(store) {
  open_ = store_->ExecScript("BEGIN IMMEDIATE").ok();
}

Store::Transaction::~Transaction() {
  if (open_) (void)store_->ExecScript("ROLLBACK");
}

Status Store::Transaction::Commit() {
  if (!open_) return IoError("database: the transaction could not begin");
  open_ = false;
  Status s = store_->ExecScript("COMMIT");
  if (!s.ok()) (void)store_->ExecScript("ROLLBACK");
  return s;
}

}  // namespace paladin::server
