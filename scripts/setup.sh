#!/usr/bin/env bash
# Installs the Debian packages sparselm needs. Works as root or through sudo.
#
#   scripts/setup.sh           build + main job (compiler, cmake, header deps, benchmark peers)
#   scripts/setup.sh --test    also the test-only tools (PyTorch reference, MPI runtime, clang with
#                              libFuzzer for tests/fuzz, doxygen for the API reference)
#
# Nothing else is installed by hand: every later script relies only on these packages.
set -euo pipefail

want_test=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

pkgs=(
  g++ make cmake ninja-build pkg-config git ca-certificates
  libxtensor-dev libxsimd-dev xtl-dev
  doctest-dev nlohmann-json3-dev libcli11-dev
  libbenchmark-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  gnuplot-nox python3
)
# npm is only needed to refresh the vendored assets (scripts/fetch_assets.sh); install it
# only when no node/npm is present, so an existing Node.js is never replaced.
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
if [ "$want_test" = 1 ]; then
  pkgs+=(python3 python3-torch python3-numpy)
  # the API reference's check (docs.doxygen: docs/Doxyfile)
  pkgs+=(doxygen)
  # clang and its compiler-rt (libFuzzer, ASan, UBSan) for the fuzz harnesses (tests/fuzz)
  pkgs+=(clang libclang-rt-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#pkgs[@]} packages present"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
