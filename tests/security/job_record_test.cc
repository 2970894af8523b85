// A job's record (job.json) lies in the job's own run directory, which the job can rewrite. The
// agent reads it as root (when it forgets a job, when a move's keeper settles it): a record
// replaced by a FIFO, a link or an endless file must be refused at once, never block the
// reader or lead it out of the directory; a state its writer never wrote is refused by name.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <set>
#include <string>
#include <string_view>

#include "paladin/ckpt/workload.h"

namespace paladin::ckpt {
namespace {

namespace fs = std::filesystem;

class JobRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/paladin-sec-record.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    JobRecord job;
    job.name = "victim";
    job.run_dir = dir_ + "/outside";
    job.pid = 4242;
    fs::create_directories(job.run_dir);
    ASSERT_TRUE(WriteJob(job).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // ReadJob of `run_dir`, or a failure when it has not answered within 5 s.
  static StatusOr<JobRecord> ReadWithin5s(const std::string& run_dir) {
    auto read = std::async(std::launch::async, [run_dir] { return ReadJob(run_dir); });
    if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ADD_FAILURE() << "ReadJob(" << run_dir << ") still blocked after 5 s";
      std::abort();  // the reader is stuck for good: nothing else can be checked
    }
    return read.get();
  }

  std::string dir_;
};

TEST_F(JobRecordTest, AHostileRecordIsRefusedAtOnce) {
  int tried = 0;
  int refused = 0;
  auto expect_refused = [&](const std::string& what, const std::string& run_dir) {
    ++tried;
    StatusOr<JobRecord> got = ReadWithin5s(run_dir);
    EXPECT_FALSE(got.ok()) << what << " was read as a record (pid " << got->pid << ")";
    if (!got.ok()) ++refused;
  };
  const std::string run = dir_ + "/job";
  fs::create_directories(run);

  ASSERT_EQ(mkfifo((run + "/job.json").c_str(), 0644), 0);
  expect_refused("a FIFO", run);
  fs::remove(run + "/job.json");

  fs::create_symlink(dir_ + "/outside/job.json", run + "/job.json");
  expect_refused("a symlink to another job's record", run);
  fs::remove(run + "/job.json");

  fs::create_directory(run + "/job.json");
  expect_refused("a directory", run);
  fs::remove(run + "/job.json");

  {
    std::ofstream big(run + "/job.json");
    big << "{\"name\": \"" << std::string(2 << 20, 'x') << "\"}";
  }
  expect_refused("a 2 MiB record", run);
  fs::remove(run + "/job.json");

  fs::create_symlink("/dev/zero", run + "/job.json");
  expect_refused("a link to /dev/zero", run);

  // The real record still reads.
  StatusOr<JobRecord> real = ReadJob(dir_ + "/outside");
  ASSERT_TRUE(real.ok()) << real.status().message();
  EXPECT_EQ(real->pid, 4242);
  EXPECT_EQ(tried, refused);
  std::printf("security: hostile job records: tried %d, refused %d\n", tried, refused);
}

// Every state reads back as written; a state the record's writer never wrote (the job rewrote its
// record) is refused with the value named, not taken as some other state.
TEST_F(JobRecordTest, EveryStateReadsBackAndAnUnknownOneIsRefused) {
  StatusOr<JobRecord> job = ReadJob(dir_ + "/outside");
  ASSERT_TRUE(job.ok()) << job.status().message();
  std::set<std::string_view> names;
  for (RunState state : kAllRunStates) {
    EXPECT_TRUE(names.insert(RunStateName(state)).second) << RunStateName(state);
    job->state = state;
    ASSERT_TRUE(WriteJob(*job).ok());
    StatusOr<JobRecord> back = ReadJob(job->run_dir);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->state, state) << RunStateName(state);
    EXPECT_EQ(ParseRunState(RunStateName(state)), state);
  }
  const std::string path = job->run_dir + "/job.json";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string written = "\"state\": \"stopped\"";
  ASSERT_NE(text.find(written), std::string::npos) << text;
  text.replace(text.find(written), written.size(), "\"state\": \"exited-ish\"");
  std::ofstream(path, std::ios::trunc) << text;
  StatusOr<JobRecord> refused = ReadJob(job->run_dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("state 'exited-ish' is not a job's state"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace paladin::ckpt
