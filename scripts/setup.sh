#!/usr/bin/env bash
# Installs dependencies (and CRIU 4.2 into its private prefix) and builds what the main job needs
# (the `paladin-main` target: the paladin program, its preloaded libraries, paladin-workload-init,
# paladin-gpu-call and the demo's workload; no tests, no benchmarks) in release into build/release.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/criu.sh  # CRIU 4.2 in a private prefix, for paladin checkpoint/restore
cmake --preset release >/dev/null
cmake --build --preset release --target paladin-main
echo "setup: built $(pwd)/build/release/paladin"
