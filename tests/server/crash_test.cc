// The server killed in the middle of a migration (PALADIN_SERVER_FAULT=crash-at:<step>, here
// through ServerOptions::fault in a forked child) and started again on the same data: a
// migration that had not committed has failed and the job runs on its source; a committed one
// is finished and the job is on its destination. Never both, never neither.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::FakeAgent;
using testing::Json;
using testing::kGiB;
using testing::WaitFor;

// A harness whose server runs in a child process that dies at the fault.
struct Child {
  pid_t pid = -1;
  std::string url;
  std::string admin;
  std::string agent;
};

Child StartChild(const std::string& dir, const std::string& fault) {
  Child c;
  std::filesystem::remove(dir + "/server.url");
  c.pid = fork();
  if (c.pid == 0) {
    ServerOptions o;
    o.data_dir = dir;
    o.listen = "127.0.0.1:0";
    o.fault = fault;
    o.schedule_interval_s = 0.1;
    StatusOr<std::unique_ptr<Server>> s = Server::Start(o);
    if (!s.ok()) _exit(3);
    for (;;) pause();
  }
  WaitFor([&] { return std::filesystem::exists(dir + "/server.url"); });
  std::ifstream(dir + "/server.url") >> c.url;
  std::ifstream(dir + "/admin.token") >> c.admin;
  std::ifstream(dir + "/agent.token") >> c.agent;
  return c;
}

api::Client ClientOf(const std::string& url, const std::string& token) {
  StatusOr<api::Endpoint> e = api::ParseUrl(url);
  EXPECT_TRUE(e.ok());
  return api::Client(*e, token, 5);
}

void CrashDuringMigration(const std::string& step, bool expect_moved) {
  const std::string dir = testing::TempDir("crash-" + step);
  Child child = StartChild(dir, "crash-at:" + step);
  ASSERT_GT(child.pid, 0);
  api::Client admin = ClientOf(child.url, child.admin);
  api::Client agent = ClientOf(child.url, child.agent);
  FakeAgent a(agent, "node-a", 1, 16 * kGiB, 7100);
  FakeAgent b(agent, "node-b", 1, 16 * kGiB, 7200);
  ASSERT_TRUE(a.Register().ok());
  ASSERT_TRUE(b.Register().ok());
  StatusOr<Json> job = admin.Post("/v1/jobs", Json{{"command", {"w"}}, {"gpu_mem", "2GiB"}});
  ASSERT_TRUE(job.ok());
  const std::string id = (*job)["id"];
  // Start it on whichever node the packer chose.
  std::string source;
  ASSERT_TRUE(WaitFor([&] {
    for (FakeAgent* x : {&a, &b}) {
      EXPECT_TRUE(x->Heartbeat().ok());
      for (const Json& c : x->commands()) {
        if (c["kind"] == "start" && source.empty()) {
          x->Obey(c);
          source = x->name();
        }
      }
    }
    return !source.empty();
  }));
  FakeAgent& src = source == "node-a" ? a : b;
  FakeAgent& dst = source == "node-a" ? b : a;
  ASSERT_TRUE(src.Heartbeat().ok());
  const int64_t epoch = src.jobs()[id].epoch;
  // The server may die while answering this one (crash at reserved, migrate_in_sent).
  (void)admin.Post("/v1/jobs/" + id + "/migrate", Json{{"to", dst.name()}});
  // Drive the transaction until the server dies.
  int status = 0;
  std::optional<int64_t> migration;
  ASSERT_TRUE(WaitFor([&] {
    if (waitpid(child.pid, &status, WNOHANG) == child.pid) return true;
    (void)dst.Heartbeat();
    (void)src.Heartbeat();
    for (const Json& c : src.commands()) {
      if (c["kind"] == "migrate_out") migration = c["migration"].get<int64_t>();
    }
    if (migration) {
      (void)agent.Post("/v1/migrations/" + std::to_string(*migration) + "/commit", Json::object());
    }
    return false;
  }));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 137);

  // Started again without the fault, in this process.
  ServerOptions o;
  o.data_dir = dir;
  testing::ServerHarness h("crash-restart-" + step, o);
  StatusOr<Json> after = h.Admin().Get("/v1/jobs/" + id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["state"], "running");
  EXPECT_EQ((*after)["node"], expect_moved ? dst.name() : source);
  EXPECT_EQ((*after)["epoch"], expect_moved ? epoch + 1 : epoch);
  EXPECT_TRUE((*after)["migration"].is_null());
  if (migration) {
    StatusOr<Json> answer =
        h.Agent().Post("/v1/migrations/" + std::to_string(*migration) + "/commit", Json::object());
    ASSERT_TRUE(answer.ok());
    EXPECT_EQ((*answer)["commit"], expect_moved);
  }
  StatusOr<Json> summary = h.Admin().Get("/v1/summary");
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ((*summary)["jobs_lost"], 0);
}

TEST(CrashTest, AtReserved) { CrashDuringMigration("reserved", false); }
TEST(CrashTest, AfterMigrateInSent) { CrashDuringMigration("migrate_in_sent", false); }
TEST(CrashTest, AfterMigrateOutSent) { CrashDuringMigration("migrate_out_sent", false); }
TEST(CrashTest, BeforeCommit) { CrashDuringMigration("before_commit", false); }
TEST(CrashTest, AfterCommit) { CrashDuringMigration("after_commit", true); }

}  // namespace
}  // namespace paladin::server
