#!/usr/bin/env bash
# Installs dependencies and builds Paladin (release) into build/release.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
echo "setup: built $(pwd)/build/release/paladin"
