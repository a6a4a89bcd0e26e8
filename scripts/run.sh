#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds the examples and runs the main job.
#   ./scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPARSELM_BUILD_TESTS=OFF -DSPARSELM_BUILD_BENCHMARKS=OFF
cmake --build "$build" -j "$(nproc)"
echo "main job: not yet defined"
