// ckpt::GpuCheckpointer's calls through paladin-gpu-call (src/ckpt/gpu_call.cc): the program's
// answer read back, its failures and a call that never returns turned into errors naming the
// call, and paladin-gpu-call itself on the emulated driver.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "paladin/ckpt/gpu_checkpoint.h"

namespace paladin::ckpt {
namespace {

namespace fs = std::filesystem;

// A stand-in for paladin-gpu-call: a shell script with BODY, named by $PALADIN_GPU_CALL.
class FakeCall {
 public:
  explicit FakeCall(const std::string& body) {
    char dir[] = "/tmp/paladin-gpu-call-test.XXXXXX";
    dir_ = mkdtemp(dir);
    const std::string path = dir_ + "/fake-gpu-call";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
    setenv("PALADIN_GPU_CALL", path.c_str(), 1);
  }
  ~FakeCall() {
    unsetenv("PALADIN_GPU_CALL");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  FakeCall(const FakeCall&) = delete;
  FakeCall& operator=(const FakeCall&) = delete;

 private:
  std::string dir_;
};

std::unique_ptr<GpuCheckpointer> Load() {
  StatusOr<std::unique_ptr<GpuCheckpointer>> g = GpuCheckpointer::Load(PALADIN_EMUCUDA_LIB);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : nullptr;
}

TEST(GpuCallTest, TheProgramsAnswerIsTheCallsResult) {
  FakeCall fake("echo 'result 0'; echo 'state 2'");
  std::unique_ptr<GpuCheckpointer> g = Load();
  ASSERT_NE(g, nullptr);
  StatusOr<CUprocessState> state = g->State(12345);
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(*state, CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_TRUE(g->Checkpoint(12345).ok());
}

TEST(GpuCallTest, ADriverErrorIsNamedWithTheCallAndThePid) {
  FakeCall fake("echo 'result 1'");  // CUDA_ERROR_INVALID_VALUE
  std::unique_ptr<GpuCheckpointer> g = Load();
  ASSERT_NE(g, nullptr);
  Status s = g->Unlock(4321);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuCheckpointProcessUnlock(pid 4321)"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << s.message();
}

TEST(GpuCallTest, AProgramThatFailsOrSaysNothingIsAnError) {
  for (const char* body : {"exit 2", "echo 'no answer'", "kill -9 $$"}) {
    FakeCall fake(body);
    std::unique_ptr<GpuCheckpointer> g = Load();
    ASSERT_NE(g, nullptr);
    Status s = g->Checkpoint(1);
    EXPECT_FALSE(s.ok()) << body;
    EXPECT_NE(s.message().find("CUDA_ERROR_UNKNOWN"), std::string::npos) << s.message();
  }
}

TEST(GpuCallTest, ACallThatNeverReturnsIsKilledAtItsLimit) {
  FakeCall fake("echo $$ > \"$(dirname \"$0\")/pid\"; exec sleep 600");
  std::unique_ptr<GpuCheckpointer> g = Load();
  ASSERT_NE(g, nullptr);
  Status s = g->Lock(1, 10);  // its limit: the lock's 10 ms and 5 s for the call
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CUDA_ERROR_TIMEOUT"), std::string::npos) << s.message();
  std::ifstream pid_file(fs::path(getenv("PALADIN_GPU_CALL")).parent_path() / "pid");
  pid_t pid = 0;
  ASSERT_TRUE(pid_file >> pid);
  EXPECT_NE(kill(pid, 0), 0) << "the hung program " << pid << " is still there";
}

TEST(GpuCallTest, NoProgramIsAClearErrorAtLoad) {
  setenv("PALADIN_GPU_CALL", "/nonexistent/paladin-gpu-call", 1);
  StatusOr<std::unique_ptr<GpuCheckpointer>> g = GpuCheckpointer::Load(PALADIN_EMUCUDA_LIB);
  unsetenv("PALADIN_GPU_CALL");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("PALADIN_GPU_CALL=/nonexistent/paladin-gpu-call"),
            std::string::npos)
      << g.status().message();
}

// The real program on the emulated driver: a process with no CUDA state is no CUDA process, and
// wrong arguments are refused with a usage line.
TEST(GpuCallTest, TheProgramOnTheEmulatedDriver) {
  const std::string program = PALADIN_GPU_CALL_BIN;
  setenv("PALADIN_GPU_CALL", program.c_str(), 1);
  std::unique_ptr<GpuCheckpointer> g = Load();
  unsetenv("PALADIN_GPU_CALL");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(g->State(getpid()).ok());
  for (const std::string& args : {std::string(""), std::string(" lib.so state notapid"),
                                  " " + std::string(PALADIN_EMUCUDA_LIB) + " resize 1"}) {
    const std::string command = program + args + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << command;
  }
}

}  // namespace
}  // namespace paladin::ckpt
