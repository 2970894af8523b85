// The store: a version-1 database written by hand is upgraded to the current schema with its
// rows kept, and a server started on it serves them.
#include "paladin/server/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "harness.h"
#include "paladin/server/auth.h"
#include "server/model.h"

namespace paladin::server {
namespace {

using testing::Json;

void Exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error != nullptr ? error : "") << " in " << sql;
}

TEST(StoreTest, FreshDatabaseIsAtTheCurrentVersion) {
  const std::string dir = testing::TempDir("store-fresh");
  StatusOr<std::unique_ptr<Store>> store = Store::Open(dir + "/paladin.db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->schema_version(), Store::kSchemaVersion);
  auto mode = (*store)->Query("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  EXPECT_EQ(DbText((*mode)[0][0]), "wal");
}

TEST(StoreTest, UpgradesVersionOneKeepingItsRows) {
  const std::string dir = testing::TempDir("store-v1");
  const std::string path = dir + "/paladin.db";
  const std::string secret = "pal_0123456789abcdef";
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    Exec(db,
         "CREATE TABLE schema_version (version INTEGER NOT NULL);"
         "INSERT INTO schema_version VALUES (1);");
    Exec(db, SchemaStepSql(1));
    Exec(db, "INSERT INTO teams (name, max_gpus, max_gpu_mem) VALUES ('vision', 4, 0)");
    Exec(db, "INSERT INTO tokens (digest, scope, name, created_at) VALUES ('" + Sha256Hex(secret) +
                 "', 'team:vision', 'old', 1.0)");
    Exec(db, R"(INSERT INTO jobs (id, team, state, doc) VALUES (7, 'vision', 'succeeded',
             '{"name": "old-job", "command": ["python3", "train.py"], "exit_code": 0,
               "gpus": 1, "quota_bytes": 1073741824}'))");
    Exec(db,
         "INSERT INTO events (t, job, node, kind, message) VALUES "
         "(1.0, 'j-000007', '', 'submitted', 'from v1')");
    sqlite3_close(db);
  }
  {
    StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ((*store)->schema_version(), Store::kSchemaVersion);
    auto teams = (*store)->Query("SELECT name, max_gpus, priority, usage FROM teams");
    ASSERT_TRUE(teams.ok());
    ASSERT_EQ(teams->size(), 1u);
    EXPECT_EQ(DbText((*teams)[0][0]), "vision");
    EXPECT_EQ(DbInt((*teams)[0][1]), 4);
    EXPECT_EQ(DbInt((*teams)[0][2]), 0);  // added by step 2 with its default
    auto version = (*store)->Query("SELECT version FROM schema_version");
    ASSERT_TRUE(version.ok());
    ASSERT_EQ(version->size(), 1u);
    EXPECT_EQ(DbInt((*version)[0][0]), Store::kSchemaVersion);
    // Tables of later steps exist.
    EXPECT_TRUE((*store)->Query("SELECT COUNT(*) FROM migrations").ok());
    EXPECT_TRUE((*store)->Query("SELECT COUNT(*) FROM usage_samples").ok());
  }
  // A server on the upgraded file serves the old rows to the old token.
  ServerOptions options;
  options.data_dir = dir;
  testing::ServerHarness h("store-v1-server", options);
  api::Client team = h.Client(secret);
  StatusOr<Json> job = team.Get("/v1/jobs/j-000007");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["name"], "old-job");
  EXPECT_EQ((*job)["state"], "succeeded");
  StatusOr<Json> events = team.Get("/v1/events?job=j-000007");
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  // The v1 event has no team column value: it stays visible to the admin.
  StatusOr<Json> admin_events = h.Admin().Get("/v1/events?job=j-000007");
  ASSERT_TRUE(admin_events.ok());
  EXPECT_EQ((*admin_events)["events"].size(), 1u);
  // New jobs continue the numbering.
  StatusOr<Json> next = team.Post("/v1/jobs", Json{{"command", {"true"}}, {"gpu_mem", "1GiB"}});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ((*next)["id"], "j-000008");
}

TEST(StoreTest, RefusesANewerSchema) {
  const std::string dir = testing::TempDir("store-newer");
  const std::string path = dir + "/paladin.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  Exec(db,
       "CREATE TABLE schema_version (version INTEGER NOT NULL); "
       "INSERT INTO schema_version VALUES (99);");
  sqlite3_close(db);
  StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("99"), std::string::npos);
}

TEST(StoreTest, TokensAreWrittenPrivateAndStoredAsDigests) {
  testing::ServerHarness h("store-tokens");
  const std::string token = h.server().admin_token();
  EXPECT_EQ(token.rfind("pal_", 0), 0u);
  EXPECT_EQ(token.size(), 4u + 64u);
  struct stat st {};
  ASSERT_EQ(stat(h.server().admin_token_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  StatusOr<std::unique_ptr<Store>> store = Store::Open(h.dir() + "/paladin.db");
  ASSERT_TRUE(store.ok());
  auto rows = (*store)->Query("SELECT digest FROM tokens");
  ASSERT_TRUE(rows.ok());
  for (const DbRow& r : *rows) EXPECT_EQ(DbText(r[0]).find("pal_"), std::string::npos);
  // A restart keeps the same tokens.
  h.Restart();
  EXPECT_EQ(h.server().admin_token(), token);
  EXPECT_FALSE(h.server().created_tokens());
}

// GET /v1/jobs writes its jobs straight to text: byte for byte what JobToApi gives, for a job
// with every optional field set, one with none, and strings that need escaping or are not ASCII.
TEST(JobTextTest, MatchesTheJsonForm) {
  JobRecord full;
  full.id = "j-000042";
  full.name = "train \"big\"\n\ttab\\slash\x01";
  full.team =
      "t\xc3\xa9"
      "am";  // "téam"
  full.command = {"python3", "-c", "print('\xe2\x82\xac')", "bad \xff utf8"};
  full.priority = 7;
  full.gpus = 1;
  full.mem_auto = false;
  full.mem_request = 3 * kGiB;
  full.quota_bytes = 3 * kGiB;
  full.ceiling_bytes = 8 * kGiB;
  full.predicted_bytes = 2 * kGiB + 1;
  full.used_bytes = 123456789;
  full.LoadState(JobState::kMigrating);
  full.reason = "migrating to node-b/1 (GPU 0 unhealthy)";
  full.node = "node-a";
  full.gpu = 0;
  full.gpu_uuid = "GPU-0000";
  full.epoch = 3;
  full.submitted_at = 1764512345.125;
  full.started_at = 1764512346.5;
  full.ended_at = 1764519999.0000002;
  full.exit_code = -9;
  full.restarts = 1;
  full.migrations = 2;
  full.recoveries = 1;
  full.checkpoints = 4;
  full.quota_grows = 5;
  full.last_checkpoint = CheckpointRef{"/ckpt/j-000042/3", 1764512400.25, 987654321};
  const Json migration = {{"id", 9}, {"step", "transfer"}, {"to", "node-b"}, {"to_gpu", 1}};

  JobRecord bare;
  bare.id = "j-000001";
  bare.command = {"w"};
  bare.mem_auto = true;

  for (const auto& [job, move] : {std::pair<const JobRecord&, Json>{full, migration},
                                  std::pair<const JobRecord&, Json>{bare, nullptr}}) {
    Json expected = JobToApi(job);
    expected["migration"] = move;
    std::string text;
    AppendJobApiText(job, move, &text);
    EXPECT_EQ(text, expected.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
}

}  // namespace
}  // namespace paladin::server
