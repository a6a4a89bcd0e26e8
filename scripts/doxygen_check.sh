#!/usr/bin/env bash
# Builds the API reference (docs/Doxyfile over include/sparselm/) into OUT and fails on any Doxygen
# warning: the docs.doxygen ctest. Exit 77 (a skipped test) when doxygen is not installed
# (scripts/setup.sh --test installs it).
#
#   scripts/doxygen_check.sh [OUT=build/doxygen]      # then open OUT/html/index.html
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/doxygen}
command -v doxygen > /dev/null || { echo "doxygen_check: doxygen not found (scripts/setup.sh --test installs it)"; exit 77; }
mkdir -p "$out"
log=$out/warnings.log
rm -f "$log"
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "WARN_LOGFILE = $log"; } | doxygen -
if [ -s "$log" ]; then
  cat "$log"
  echo "doxygen_check: $(grep -c . "$log") warning lines (above); fix the comment they name"
  exit 1
fi
echo "doxygen_check: no warnings; the reference is $out/html/index.html"
