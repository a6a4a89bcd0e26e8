#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds everything and runs the test suite.
#   ./scripts/test.sh            (BUILD_DIR=build by default; JOBS=<n> to limit parallelism)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# the build directory run.sh also uses, configured the same way (nothing is rebuilt for nothing)
BUILD_DIR="$build" ./scripts/configure.sh
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
