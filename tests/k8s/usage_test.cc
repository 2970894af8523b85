// Each pod's GPU memory, measured (paladin/k8s/usage.h): a process's pod from its cgroup, in
// the kubelet's cgroupfs and systemd layouts, and the sums per pod.
#include "paladin/k8s/usage.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace paladin::k8s {
namespace {

constexpr char kUid[] = "3f6c1a2b-9d4e-4f11-8a7b-0c2d3e4f5a6b";

TEST(PodUidOfCgroup, ReadsTheKubeletsCgroupfsLayout) {
  EXPECT_EQ(
      PodUidOfCgroup(std::string("0::/kubepods/besteffort/pod") + kUid + "/0123456789abcdef\n"),
      kUid);
  // cgroup v1: one line per hierarchy.
  EXPECT_EQ(PodUidOfCgroup(std::string("12:memory:/kubepods/burstable/pod") + kUid +
                           "/abc\n11:cpu:/kubepods/burstable/pod" + kUid + "/abc\n"),
            kUid);
  // A second node's kubelet under its own cgroup root.
  EXPECT_EQ(PodUidOfCgroup(std::string("0::/paladin-node2/kubepods/pod") + kUid + "/c1\n"), kUid);
}

TEST(PodUidOfCgroup, ReadsTheKubeletsSystemdLayout) {
  std::string uid = kUid;
  for (char& c : uid) c = c == '-' ? '_' : c;
  EXPECT_EQ(PodUidOfCgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                           uid + ".slice/cri-containerd-0123.scope\n"),
            kUid);
}

TEST(PodUidOfCgroup, FindsNoPodWhereThereIsNone) {
  EXPECT_EQ(PodUidOfCgroup("0::/user.slice/user-0.slice/session-3.scope\n"), "");
  EXPECT_EQ(PodUidOfCgroup("0::/system.slice/podman.service\n"), "");
  EXPECT_EQ(PodUidOfCgroup("0::/kubepods/podnot-a-uid-at-all/x\n"), "");
  EXPECT_EQ(PodUidOfCgroup(std::string("0::/kubepods/pod") + kUid + "x/c\n"), "");  // longer
  EXPECT_EQ(PodUidOfCgroup(""), "");
}

TEST(UsageByPod, SumsEachPodsProcessesAndLeavesOthersOut) {
  const std::map<uint32_t, std::string> cgroups = {
      {10, std::string("0::/kubepods/pod") + kUid + "/c1\n"},
      {11, std::string("0::/kubepods/pod") + kUid + "/c2\n"},
      {12, "0::/user.slice/x\n"}};
  const std::map<std::string, uint64_t> used =
      UsageByPod({{10, 100}, {11, 50}, {12, 7}, {13, 9}}, [&](uint32_t pid) {
        auto it = cgroups.find(pid);
        return it != cgroups.end() ? it->second : std::string();  // 13: gone
      });
  ASSERT_EQ(used.size(), 1U);
  EXPECT_EQ(used.at(kUid), 150U);
}

}  // namespace
}  // namespace paladin::k8s
