#!/usr/bin/env bash
# Runs the whole test suite: installs dependencies (and CRIU 4.2 into its private prefix, and a
# CRIU 4.2 patched for post-copy moves into another: docs/lazy_migration.md), builds
# the debug preset (ASan + UBSan) and runs ctest. Extra arguments go to ctest (e.g. -L core).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --tests
bash scripts/criu.sh  # CRIU 4.2 for the checkpoint tests (label ckpt)
bash scripts/criu_lazy.sh  # CRIU 4.2 with Paladin's lazy-pages patches (ckpt_lazy_faults)
cmake --preset debug >/dev/null
cmake --build --preset debug
# Two more tests than cores: the root drills spend most of their time waiting (2-core CI machine:
# scripts/ctest_replay.py over a fresh-clone run at -j3 replays its 1081 s and gives 961 s at -j4
# if no test ran slower for the company). The preset names tests/resources.json, which keeps the Kubernetes clusters and CRIU's
# suite apart from the tests that run jobs (tests/CMakeLists.txt, "Host mounts").
# /run/netns becomes a mount point on the first `ip netns add` (the fleet drills' hosts and gangs
# make network namespaces): made one now, before any test starts, so that no test's hosts see it
# appear while they run (a job dumped in a host made before it and restored in one made after
# failed CRIU's mount check: "Can't stat mountpoint .../run/netns"). Root only, as those tests.
if [[ $(id -u) == 0 ]] && command -v ip >/dev/null; then
  { ip netns add paladin-test-probe && ip netns del paladin-test-probe; } 2>/dev/null || true
fi
ctest --preset debug -j "$(($(nproc) + 2))" "$@"
