// Tenants on one node (label security): one job's user against another's job, and the pool of
// per-job uids.
#include <dirent.h>
#include <grp.h>
#include <sys/ptrace.h>

#include "agent_fixture.h"

namespace paladin::agent_test {
namespace {

// One attack by job A's user on job B: what it tried and the errno it got (0: it succeeded).
struct Attempt {
  std::string what;
  int error = 0;
};

// Runs `attacks` in a child process as uid/gid (no groups, no PID namespace: the host's pids, as a
// process of that job escaping its namespace would see them); returns one Attempt per attack.
std::vector<Attempt> AttackAs(
    int64_t uid, int64_t gid,
    const std::vector<std::pair<std::string, std::function<int()>>>& attacks) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(100);
    }
    for (const auto& [what, attack] : attacks) {
      errno = 0;
      const int result = attack();
      const std::string line = what + "\t" + std::to_string(result == 0 ? 0 : errno) + "\n";
      if (write(fds[1], line.data(), line.size()) < 0) _exit(101);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<Attempt> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    out.push_back({line.substr(0, tab), std::atoi(line.c_str() + tab + 1)});
  }
  return out;
}

// 0 when `path` opens with `flags` (the file is closed again), else -1 with errno.
int TryOpen(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two teams' jobs on one node, each as its own uid. Job A's user tries to read and write job B's
// logs, run directory, job record, quota region and emulated GPU control file, to signal and
// ptrace B's processes and read their memory: each is refused with EACCES or EPERM, B runs on
// unchanged and the API still serves B's own log. A job that raises its own quota in its region is
// set back. Prints "security: tenants: tried N, refused N".
TEST_F(AgentTest, TenantsIsolated) {
  StartAgent("a", {"--kill-on-exit"});
  const Json b = StartGpuJob("a", "jb", 1, 0);
  ASSERT_TRUE(b.value("ok", false)) << b.dump() << AgentLog("a");
  const Json a = StartGpuJob("a", "ja", 1, 0);
  ASSERT_TRUE(a.value("ok", false)) << a.dump() << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "jb", 1, 3)) << AgentLog("a");
  ASSERT_TRUE(WaitGen("a", "ja", 1, 1)) << AgentLog("a");
  const int64_t b_root = b["detail"]["pid"];
  const int64_t b_cmd = ChildOf(b_root);
  const int64_t a_cmd = ChildOf(a["detail"]["pid"].get<int64_t>());
  ASSERT_GT(b_cmd, 0);
  ASSERT_GT(a_cmd, 0);
  const int64_t a_uid = UidOf(a_cmd);
  const int64_t b_uid = UidOf(b_cmd);
  ASSERT_TRUE(JobUid(a_uid) && JobUid(b_uid)) << a_uid << " " << b_uid;
  ASSERT_NE(a_uid, b_uid);

  const std::string b_dir = Data("a") + "/workloads/jb-1";
  const std::string b_log = b_dir + "/stdout.log";
  const std::string b_region = b_dir + "/quota.region";
  const std::string b_job = b_dir + "/job.json";
  const std::string b_ctl = "/dev/shm/paladin-emu-ctl/" + std::to_string(b_cmd) + ".state";
  struct stat st {};
  ASSERT_EQ(stat(b_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), b_uid);
  const std::string region_before = ReadAll(b_region);
  ASSERT_FALSE(region_before.empty());
  // The control file appears once the agent or a checkpoint has asked the process something: ask.
  const bool has_ctl = fs::exists(b_ctl);

  using Attack = std::pair<std::string, std::function<int()>>;
  std::vector<Attack> attacks = {
      {"read B's log", [&] { return TryOpen(b_log, O_RDONLY); }},
      {"append to B's log", [&] { return TryOpen(b_log, O_WRONLY | O_APPEND); }},
      {"truncate B's log", [&] { return truncate(b_log.c_str(), 0); }},
      {"replace B's log", [&] { return rename(b_log.c_str(), (b_log + ".x").c_str()); }},
      {"list B's run directory",
       [&] {
         DIR* d = opendir(b_dir.c_str());
         if (d == nullptr) return -1;
         closedir(d);
         return 0;
       }},
      {"create a file in B's run directory",
       [&] { return TryOpen(b_dir + "/planted", O_WRONLY | O_CREAT | O_EXCL); }},
      {"remove B's run directory", [&] { return rmdir(b_dir.c_str()); }},
      {"read B's job record", [&] { return TryOpen(b_job, O_RDONLY); }},
      {"read B's quota region", [&] { return TryOpen(b_region, O_RDONLY); }},
      {"write B's quota region", [&] { return TryOpen(b_region, O_RDWR); }},
      {"stop B's command", [&] { return kill(static_cast<pid_t>(b_cmd), SIGSTOP); }},
      {"kill B's command", [&] { return kill(static_cast<pid_t>(b_cmd), SIGKILL); }},
      {"kill B's root", [&] { return kill(static_cast<pid_t>(b_root), SIGKILL); }},
      {"signal B's emulated driver", [&] { return kill(static_cast<pid_t>(b_cmd), SIGRTMAX - 3); }},
      {"ptrace B's command",
       [&] { return static_cast<int>(ptrace(PTRACE_ATTACH, static_cast<pid_t>(b_cmd), 0, 0)); }},
      {"ptrace-seize B's command",
       [&] { return static_cast<int>(ptrace(PTRACE_SEIZE, static_cast<pid_t>(b_cmd), 0, 0)); }},
      {"read B's memory",
       [&] { return TryOpen("/proc/" + std::to_string(b_cmd) + "/mem", O_RDONLY); }},
      {"read B's environment",
       [&] {
         // Opening may succeed; reading is what the kernel checks.
         const int fd = open(("/proc/" + std::to_string(b_cmd) + "/environ").c_str(), O_RDONLY);
         if (fd < 0) return -1;
         char c;
         const ssize_t n = read(fd, &c, 1);
         const int saved = errno;
         close(fd);
         errno = saved;
         return n < 0 ? -1 : 0;
       }},
  };
  // The emulated GPUs: the device file is the agent's, each CUDA process's usage file its user's.
  const std::string emu_state = Data("a") + "/emu.state";
  std::string b_usage;
  for (const fs::directory_entry& e : fs::directory_iterator(emu_state + ".usage")) {
    if (e.path().filename().string().rfind(std::to_string(b_uid) + ".", 0) == 0) {
      b_usage = e.path().string();
    }
  }
  ASSERT_FALSE(b_usage.empty()) << "no usage file of B's in " << emu_state << ".usage";
  attacks.push_back(
      {"write B's emulated GPU usage file", [&] { return TryOpen(b_usage, O_WRONLY); }});
  attacks.push_back(
      {"remove B's emulated GPU usage file", [&] { return unlink(b_usage.c_str()); }});
  attacks.push_back(
      {"write the emulated GPUs' device file", [&] { return TryOpen(emu_state, O_RDWR); }});
  if (has_ctl) {
    attacks.push_back(
        {"write B's emulated GPU control file", [&] { return TryOpen(b_ctl, O_WRONLY); }});
    attacks.push_back({"replace B's emulated GPU control file",
                       [&] { return rename(b_ctl.c_str(), (b_ctl + ".x").c_str()); }});
  }
  const std::vector<Attempt> results = AttackAs(a_uid, a_uid, attacks);
  ASSERT_EQ(results.size(), attacks.size());
  int refused = 0;
  for (const Attempt& r : results) {
    const bool ok = r.error == EACCES || r.error == EPERM;
    refused += ok ? 1 : 0;
    EXPECT_TRUE(ok) << r.what << ": " << (r.error == 0 ? "allowed" : strerror(r.error));
  }

  // B is unchanged: running (not stopped), as its uid, its files where they were, its region
  // the same bytes apart from its own counters, and its log still served as its own.
  EXPECT_EQ(ProcState(b_cmd) == 'T', false);
  EXPECT_TRUE(Alive(b_cmd));
  EXPECT_EQ(UidOf(b_cmd), b_uid);
  EXPECT_TRUE(fs::exists(b_log));
  EXPECT_FALSE(fs::exists(b_dir + "/planted"));
  const std::string region_after = ReadAll(b_region);
  ASSERT_EQ(region_after.size(), region_before.size());
  EXPECT_EQ(region_after.substr(0, 32), region_before.substr(0, 32));  // magic .. ceiling
  const int gen = Generations(server_.Stdout(Node("a"), "jb", 1)).back();
  ASSERT_TRUE(WaitGen("a", "jb", 1, gen + 3)) << "job B stopped running";
  const std::string out = server_.Stdout(Node("a"), "jb", 1);
  EXPECT_EQ(out.find("MISMATCH"), std::string::npos) << out;
  EXPECT_NE(out.find("dev 0 " + GpuUuid("a", 0)), std::string::npos) << out;

  // A job that raises its own quota in its region (it can write its own): the agent puts the
  // server's quota back and never reports the raised one.
  const std::string a_region = Data("a") + "/workloads/ja-1/quota.region";
  const std::vector<Attempt> raised =
      AttackAs(a_uid, a_uid, {{"raise own quota", [&] {
                                 const int fd = open(a_region.c_str(), O_RDWR);
                                 if (fd < 0) return -1;
                                 const uint64_t huge = 1ull << 40;
                                 const ssize_t n = pwrite(fd, &huge, sizeof huge, 16);  // quota
                                 const ssize_t m = pwrite(fd, &huge, sizeof huge, 24);  // ceiling
                                 close(fd);
                                 return n == 8 && m == 8 ? 0 : -1;
                               }}});
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].error, 0) << "a job can write its own region";
  bool set_back = WaitFor(10, [&] {
    const std::string r = ReadAll(a_region);
    uint64_t quota = 0;
    uint64_t ceiling = 0;
    if (r.size() < 32) return false;
    std::memcpy(&quota, r.data() + 16, 8);
    std::memcpy(&ceiling, r.data() + 24, 8);
    return quota == 512 * kMiB && ceiling == 0;
  });
  EXPECT_TRUE(set_back) << AgentLog("a");
  std::optional<Json> report = server_.Job(Node("a"), "ja");
  ASSERT_TRUE(report.has_value());
  EXPECT_LE((*report)["quota_bytes"].get<uint64_t>(), 512 * kMiB);
  const int tried = static_cast<int>(attacks.size()) + 1;
  refused += set_back ? 1 : 0;
  std::printf("security: tenants: tried %d, refused %d\n", tried, refused);
  EXPECT_EQ(tried, refused);
}

// The pool of per-job uids: held across an agent restart (the adopted job keeps its uid and no
// new job gets it), given back when a job ends, and an exhausted range refuses a start clearly.
TEST_F(AgentTest, UidPoolPersistsAndExhausts) {
  const std::string uids = work_ + "/uids";
  // Two uids at the top of the default range, far from what other tests' jobs hash to.
  const std::vector<std::string> flags = {"--uid-range", "1879113726-1879113727", "--uid-dir",
                                          uids};
  StartAgent("a", flags);
  auto start = [&](const std::string& job) {
    return Run("a", {{"kind", "start"},
                     {"job", job},
                     {"epoch", 1},
                     {"command", {"sleep", "600"}},
                     {"gpu_index", 0},
                     {"quota_bytes", 0}});
  };
  const Json one = start("u1");
  ASSERT_TRUE(one.value("ok", false)) << one.dump() << AgentLog("a");
  const int64_t uid1 = UidOf(ChildOf(one["detail"]["pid"].get<int64_t>()));
  EXPECT_TRUE(uid1 == 1879113726 || uid1 == 1879113727) << uid1;
  EXPECT_TRUE(fs::exists(uids + "/" + std::to_string(uid1)));

  // A restarted agent adopts u1 and does not hand its uid out again.
  StopAgent("a", SIGTERM);
  StartAgent("a", flags);
  const Json two = start("u2");
  ASSERT_TRUE(two.value("ok", false)) << two.dump() << AgentLog("a");
  const int64_t uid2 = UidOf(ChildOf(two["detail"]["pid"].get<int64_t>()));
  EXPECT_NE(uid2, uid1);
  EXPECT_TRUE(uid2 == 1879113726 || uid2 == 1879113727) << uid2;

  // Both are held: a third job is refused, saying why.
  const Json three = start("u3");
  EXPECT_FALSE(three.value("ok", true)) << three.dump();
  EXPECT_NE(three.value("error", "").find("no free uid"), std::string::npos) << three.dump();
  EXPECT_NE(three.value("error", "").find("--uid-range"), std::string::npos) << three.dump();

  // u1 ends: its uid is free again and goes to the next job.
  ASSERT_TRUE(Run("a", {{"kind", "kill"}, {"job", "u1"}, {"epoch", 1}}).value("ok", false));
  EXPECT_FALSE(fs::exists(uids + "/" + std::to_string(uid1)));
  const Json four = start("u4");
  ASSERT_TRUE(four.value("ok", false)) << four.dump() << AgentLog("a");
  EXPECT_EQ(UidOf(ChildOf(four["detail"]["pid"].get<int64_t>())), uid1);
  for (const char* job : {"u2", "u4"}) {
    EXPECT_TRUE(Run("a", {{"kind", "kill"}, {"job", job}, {"epoch", 1}}).value("ok", false));
  }
  std::printf("security: tenants: uid pool: tried 2, refused %d\n",
              (three.value("ok", true) ? 0 : 1) + (uid2 != uid1 ? 1 : 0));
}

}  // namespace
}  // namespace paladin::agent_test
