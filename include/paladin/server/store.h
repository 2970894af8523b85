// The server's durable state: one SQLite file (DATA/paladin.db) in WAL mode with a versioned
// schema. Opening a database upgrades it in place, one step at a time (v1 -> v2 -> ... current),
// each step in its own transaction, keeping every row. The tables and what each step adds are
// listed in docs/server.md.
//
// Thread safety: none. A Store is owned by the control plane, which serialises every call under
// its own lock. Calls block on the disk (and on other processes' locks for up to busy_timeout).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::server {

// A value bound to or read from a statement: NULL, an integer, a real or a text.
using DbValue = std::variant<std::nullptr_t, int64_t, double, std::string>;
using DbRow = std::vector<DbValue>;

int64_t DbInt(const DbValue& v);  // 0 for NULL; reals are truncated; texts parsed
double DbReal(const DbValue& v);
std::string DbText(const DbValue& v);  // "" for NULL
bool DbIsNull(const DbValue& v);

class Store {
 public:
  // The schema version this build writes. Older files are upgraded on Open.
  static constexpr int kSchemaVersion = 4;

  // Opens (creating when absent) and upgrades the database at `path`. Fails when the file is
  // not a database or was written by a newer Paladin.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int schema_version() const { return version_; }

  // Runs one statement with `params` bound to its ?s.
  Status Run(const std::string& sql, const std::vector<DbValue>& params = {});
  // Runs a query and returns its rows.
  StatusOr<std::vector<DbRow>> Query(const std::string& sql,
                                     const std::vector<DbValue>& params = {});
  // Runs several statements with no parameters (schema steps).
  Status ExecScript(const std::string& sql);
  int64_t LastInsertId() const;

  // A transaction: commits on Commit(), rolls back when destroyed uncommitted. Not nestable.
  class Transaction {
   public:
    explicit Transaction(Store* store);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    Status Commit();

   private:
    Store* store_;
    bool open_ = false;
  };

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Upgrade();
  StatusOr<sqlite3_stmt*> Prepare(const std::string& sql);

  sqlite3* db_;
  int version_ = 0;
  std::map<std::string, sqlite3_stmt*> statements_;
};

// The schema of each version, for tests that build an old database by hand: the statements that
// create version `version` from an empty file (1 <= version <= kSchemaVersion).
std::string SchemaStepSql(int version);

}  // namespace paladin::server
