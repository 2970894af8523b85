// Where a restore may write (RestorePlacement), without CRIU: an image made by hand whose
// manifest names places; RestoreJob must refuse every place that is not this node's for the job
// before anything runs, and write nothing outside. The CRIU it is given is /bin/false, so a
// placement that is accepted ends in "criu restore ... failed", never in a refusal.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "paladin/ckpt/checkpoint.h"
#include "paladin/ckpt/image.h"

namespace paladin::ckpt {
namespace {

namespace fs = std::filesystem;

int g_tried = 0;
int g_refused = 0;

class ImagePlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/paladin-sec-placement.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    work_ = dir;
    base_ = work_ + "/workloads";
    fs::create_directories(base_);
    chmod(base_.c_str(), 0755);
    fs::create_directories(work_ + "/outside");
    std::ofstream(work_ + "/outside/sentinel") << "sentinel\n";
  }
  void TearDown() override { fs::remove_all(work_); }

  // An image whose job lived in `run_dir`.
  std::string MakeImage(const std::string& name, const std::string& run_dir) {
    const std::string image = work_ + "/" + name;
    fs::create_directories(image + "/logs");
    std::ofstream(image + "/logs/stdout.log") << "line 1\n";
    std::ofstream(image + "/logs/stderr.log") << "";
    std::ofstream(image + "/core-1.img") << "not really CRIU's";
    Manifest m;
    m.name = "j1";
    m.arch = "x86_64";
    m.run_dir = run_dir;
    m.logs = {"logs/stdout.log", "logs/stderr.log"};
    m.log_targets = {run_dir + "/stdout.log", run_dir + "/stderr.log"};
    EXPECT_TRUE(WriteManifest(image, m).ok());
    return image;
  }

  Status Restore(const std::string& image, const std::string& prefix) {
    Criu criu;
    criu.path = "/bin/false";
    RestoreOptions2 options;
    options.placement.run_base = base_;
    options.placement.name_prefix = prefix;
    options.timeout_s = 10;
    PhaseTimes times;
    StatusOr<JobRecord> job = RestoreJob(
        criu, image, options, [](const std::string&) {}, &times);
    return job.ok() ? Status::Ok() : job.status();
  }

  // The attack is refused with `pattern` and the sentinel and the outside folder are unchanged.
  void ExpectRefused(const std::string& image, const std::string& prefix,
                     const std::string& pattern) {
    ++g_tried;
    const Status s = Restore(image, prefix);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("refusing to restore"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(pattern), std::string::npos) << s.message();
    std::ifstream in(work_ + "/outside/sentinel");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "sentinel\n");
    int entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(work_ + "/outside")) ++entries;
    EXPECT_EQ(entries, 1) << "something was written outside";
    if (!s.ok() && s.message().find(pattern) != std::string::npos) ++g_refused;
  }

  std::string work_;
  std::string base_;
};

TEST_F(ImagePlacementTest, AnotherJobsRunDirectoryIsRefused) {
  ExpectRefused(MakeImage("other", base_ + "/j2-3"), "j1-", "is not this job's run directory");
  ExpectRefused(MakeImage("noepoch", base_ + "/j1-x"), "j1-", "is not this job's run directory");
  ExpectRefused(MakeImage("prefixonly", base_ + "/j1-"), "j1-", "is not this job's run directory");
}

TEST_F(ImagePlacementTest, RunDirectoryOutsideTheRunBaseIsRefused) {
  ExpectRefused(MakeImage("img-outside", work_ + "/outside"), "",
                "is not a run directory of this node");
  ExpectRefused(MakeImage("img-nested", base_ + "/j1-3/deeper"), "",
                "is not a run directory of this node");
}

TEST_F(ImagePlacementTest, SymlinkedRunDirectoryIsRefused) {
  fs::create_directory_symlink(work_ + "/outside", base_ + "/j1-4");
  ExpectRefused(MakeImage("symlinked", base_ + "/j1-4"), "j1-", "not a directory");
}

TEST_F(ImagePlacementTest, RunBaseWritableByOthersIsRefused) {
  chmod(base_.c_str(), 0777);
  ExpectRefused(MakeImage("writable", base_ + "/j1-5"), "j1-", "the run base");
}

TEST_F(ImagePlacementTest, ThisJobsPlaceIsAccepted) {
  const Status s = Restore(MakeImage("good", base_ + "/j1-6"), "j1-");
  EXPECT_EQ(s.message().find("refusing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("criu restore"), std::string::npos) << s.message();
  std::ifstream in(base_ + "/j1-6/stdout.log");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "line 1\n");
}

// A move within one host finds the source's logs in the run directory, open in its stopped copy,
// with the image's bytes: they are kept as they are (never emptied under that copy), while a log
// that differs is replaced by the image's.
TEST_F(ImagePlacementTest, ALogHoldingTheImagesBytesIsKeptAsItIs) {
  const std::string run = base_ + "/j1-7";
  const std::string image = MakeImage("same", run);
  fs::create_directories(run);
  chmod(run.c_str(), 0755);
  std::ofstream(run + "/stdout.log") << "line 1\n";
  std::ofstream(run + "/stderr.log") << "stale\n";
  const struct timespec long_ago[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (run + "/stdout.log").c_str(), long_ago, 0), 0);
  struct stat before {};
  ASSERT_EQ(stat((run + "/stdout.log").c_str(), &before), 0);

  const Status s = Restore(image, "j1-");
  EXPECT_NE(s.message().find("criu restore"), std::string::npos) << s.message();
  struct stat after {};
  ASSERT_EQ(stat((run + "/stdout.log").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mtim.tv_sec, 1000000000) << "the log was written again";
  EXPECT_EQ(after.st_size, 7);
  EXPECT_EQ(fs::file_size(run + "/stderr.log"), 0U) << "a log that differs is the image's";
}

// A changed image is refused even where the run directory's log holds its bytes, and the log is
// left as it was.
TEST_F(ImagePlacementTest, ALogKeptAsItIsStillHasItsImageChecked) {
  const std::string run = base_ + "/j1-8";
  const std::string image = MakeImage("changed", run);
  std::ofstream(image + "/logs/stdout.log") << "line 2\n";  // after the manifest was written
  fs::create_directories(run);
  chmod(run.c_str(), 0755);
  std::ofstream(run + "/stdout.log") << "line 2\n";

  const Status s = Restore(image, "j1-");
  EXPECT_NE(s.message().find("refusing to restore: logs/stdout.log"), std::string::npos)
      << s.message();
  std::ifstream in(run + "/stdout.log");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "line 2\n");
}

class Count : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("security: image placement: tried %d, refused %d\n", g_tried, g_refused);
  }
};

const auto* const g_count = ::testing::AddGlobalTestEnvironment(new Count);

}  // namespace
}  // namespace paladin::ckpt
