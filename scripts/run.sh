#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs what it needs, builds the examples, encodes
# the bundled public-domain corpus with GPT-2's tokenizer, trains a small GPT on it for a few
# minutes on all cores (progress bar on a terminal), shows validation perplexity against the
# unigram baseline, saves checkpoints, plots the curves and prints a generated sample.
#
#   ./scripts/run.sh                    # runs/gpt-mini: config.json, metrics.jsonl, checkpoints/, curves.png
#   STEPS=100 ./scripts/run.sh          # shorter
#   ./scripts/run.sh                    # again: resumes (or just reports) the run in runs/gpt-mini
#
# Environment: BUILD_DIR (build), OUT (runs/gpt-mini), STEPS (the config's 600), THREADS (all cores),
# EVAL_BATCHES (the whole validation split).
# After the set-up and the build it runs scripts/main_job.sh, which does the rest (and is what the
# examples.main_job ctest runs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${BUILD_DIR:-build}
# the build directory test.sh also uses, configured the same way; only the main job's programs are built
BUILD_DIR="$build" ./scripts/configure.sh > /dev/null
cmake --build "$build" -j "$(nproc)" --target encode_dataset gpt_train generate

exec env BUILD_DIR="$build" ./scripts/main_job.sh
