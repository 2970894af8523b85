// A direct move's state file (docs/formats/migrate.md, "State files"): every step's name reads
// back as the step, and a file the job could have written near the move is refused naming the
// file, the key and the value.
#include "state.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace paladin::migrate {
namespace {

namespace fs = std::filesystem;

const std::vector<MoveStep> kAllSteps = {
    MoveStep::kCheckpointing, MoveStep::kSending,  MoveStep::kRestoring,   MoveStep::kServing,
    MoveStep::kResumeSent,    MoveStep::kDone,     MoveStep::kResumed,     MoveStep::kInDoubt,
    MoveStep::kReceived,      MoveStep::kRestored, MoveStep::kProvisional, MoveStep::kCommitted,
    MoveStep::kAborted,
};

TEST(MoveStepTest, EveryNameRoundTrips) {
  for (MoveStep step : kAllSteps) {
    const std::string name = MoveStepName(step);
    EXPECT_EQ(MoveStepNamed(name), step) << name;
  }
  for (MoveRole role : {MoveRole::kSource, MoveRole::kDestination}) {
    EXPECT_EQ(MoveRoleNamed(MoveRoleName(role)), role);
  }
  EXPECT_EQ(MoveStepNamed("unknown"), std::nullopt);  // OUTCOME's answer for no such move
  EXPECT_EQ(MoveStepNamed("Committed"), std::nullopt);
  EXPECT_EQ(MoveRoleNamed(""), std::nullopt);
}

// The names are the file's (and the OUTCOME answer's): they never change.
TEST(MoveStepTest, NamesAreTheFormats) {
  EXPECT_STREQ(MoveStepName(MoveStep::kCheckpointing), "checkpointing");
  EXPECT_STREQ(MoveStepName(MoveStep::kResumeSent), "resume_sent");
  EXPECT_STREQ(MoveStepName(MoveStep::kInDoubt), "in_doubt");
  EXPECT_STREQ(MoveStepName(MoveStep::kCommitted), "committed");
  EXPECT_STREQ(MoveStepName(MoveStep::kAborted), "aborted");
}

TEST(MoveStepTest, EachSideHasItsSteps) {
  EXPECT_TRUE(StepOfRole(MoveRole::kSource, MoveStep::kResumeSent));
  EXPECT_FALSE(StepOfRole(MoveRole::kSource, MoveStep::kCommitted));
  EXPECT_TRUE(StepOfRole(MoveRole::kDestination, MoveStep::kCommitted));
  EXPECT_FALSE(StepOfRole(MoveRole::kDestination, MoveStep::kDone));
  EXPECT_TRUE(StepOfRole(MoveRole::kSource, MoveStep::kRestoring));
  EXPECT_TRUE(StepOfRole(MoveRole::kDestination, MoveStep::kRestoring));
  for (MoveStep step : kAllSteps) {
    EXPECT_TRUE(StepOfRole(MoveRole::kSource, step) || StepOfRole(MoveRole::kDestination, step))
        << MoveStepName(step);
  }
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "paladin-state-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/migration.state";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& text) {
    std::ofstream out(path_);
    out << text;
  }
  std::string dir_;
  std::string path_;
};

TEST_F(StateFileTest, EveryStepOfItsSideSavesAndLoads) {
  for (MoveRole role : {MoveRole::kSource, MoveRole::kDestination}) {
    for (MoveStep step : kAllSteps) {
      if (!StepOfRole(role, step)) continue;
      MoveState st;
      st.role = role;
      st.id = "m1";
      st.pid = 42;
      st.released = true;
      ASSERT_TRUE(SaveStep(path_, &st, step).ok());
      EXPECT_EQ(st.step, step);
      StatusOr<MoveState> back = LoadState(path_);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->role, role);
      EXPECT_EQ(back->step, step) << MoveStepName(step);
      EXPECT_EQ(back->id, "m1");
      EXPECT_EQ(back->pid, 42);
      EXPECT_TRUE(back->released);
    }
  }
}

// The file keeps today's words: a file written before the steps were typed still loads.
TEST_F(StateFileTest, ReadsTheFormatsWords) {
  Write("role destination\nid m7\nstep provisional\nacked 1\npid 9\n");
  StatusOr<MoveState> st = LoadState(path_);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->role, MoveRole::kDestination);
  EXPECT_EQ(st->step, MoveStep::kProvisional);
  EXPECT_TRUE(st->acked);
  MoveState source;
  source.id = "m8";
  ASSERT_TRUE(SaveStep(path_, &source, MoveStep::kResumeSent).ok());
  std::ifstream in(path_);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("role source\nid m8\nstep resume_sent\n", 0), 0u) << text;
}

TEST_F(StateFileTest, RefusesAnUnknownStepNamingIt) {
  Write("role source\nid m1\nstep finished\n");
  StatusOr<MoveState> st = LoadState(path_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = st.status().message();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("step 'finished'"), std::string::npos) << message;
  EXPECT_NE(message.find("resume_sent"), std::string::npos) << message;  // what it could be
}

TEST_F(StateFileTest, RefusesTheOtherSidesStep) {
  Write("role source\nid m1\nstep committed\n");
  StatusOr<MoveState> st = LoadState(path_);
  ASSERT_FALSE(st.ok());
  const std::string& message = st.status().message();
  EXPECT_NE(message.find(path_), std::string::npos) << message;
  EXPECT_NE(message.find("step 'committed'"), std::string::npos) << message;
  EXPECT_NE(message.find("source"), std::string::npos) << message;
}

TEST_F(StateFileTest, RefusesAnUnknownRoleOrNoStep) {
  Write("role keeper\nid m1\nstep done\n");
  StatusOr<MoveState> st = LoadState(path_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("role 'keeper'"), std::string::npos)
      << st.status().message();
  Write("role source\nid m1\n");
  st = LoadState(path_);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("no id or step"), std::string::npos)
      << st.status().message();
  Write("role source\nid m1\nstep done \n");  // a trailing space is another word
  EXPECT_FALSE(LoadState(path_).ok());
}

}  // namespace
}  // namespace paladin::migrate
