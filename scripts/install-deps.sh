#!/usr/bin/env bash
# Installs what moevm needs on Debian/Ubuntu, only when something is missing; safe to run
# again (a no-op once everything is there).
#   scripts/install-deps.sh         everything to build and test (`make test`, `make build`)
#   scripts/install-deps.sh --run   only what building moevm and running its demo need
#                                   (`make run`): no Open MPI, NumPy, jinja2, Perl or C++,
#                                   which only the tests and the distributed mode use
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --run) mode=run ;;
  *) echo "usage: scripts/install-deps.sh [--run]" >&2; exit 2 ;;
esac

need_pkgs=()
have_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/include/x86_64-linux-gnu/$1" ] || [ -f "/usr/include/aarch64-linux-gnu/$1" ]; }
have_cuda() { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }

# The build (CMakeLists.txt's REQUIRED packages).
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v cc >/dev/null    || need_pkgs+=(gcc)
command -v make >/dev/null  || need_pkgs+=(make)
# Ninja schedules the build's jobs across targets (a clean build on the 2-core CI VM: 167 s
# against 181 with make's generator; the Makefile takes it when it is there).
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v pkg-config >/dev/null || need_pkgs+=(pkg-config)
have_header hwloc.h         || need_pkgs+=(libhwloc-dev)
have_header numa.h          || need_pkgs+=(libnuma-dev)
have_header cjson/cJSON.h   || need_pkgs+=(libcjson-dev)   # cost files and traces (policy/, tools/)
have_header microhttpd.h    || need_pkgs+=(libmicrohttpd-dev) # `moevm serve` (tools/serve_http.c)
# The interposer, built only with the CUDA toolkit, unwinds stacks for its reports.
if [ "$mode" = all ] || have_cuda; then
  have_header libunwind.h   || need_pkgs+=(libunwind-dev)
fi
# CMake configures the tests with every build (MOEVM_TESTS), and they find Python there.
command -v python3 >/dev/null || need_pkgs+=(python3)

if [ "$mode" = all ]; then
  command -v c++ >/dev/null   || need_pkgs+=(g++)       # tests/test_digest_kernel.cc
  # Open MPI: the distributed mode (docs/distributed.md) and its tests.
  { command -v mpicc && command -v mpirun; } >/dev/null || need_pkgs+=(libopenmpi-dev openmpi-bin)
  # tests/ref (the NumPy reference forward pass) needs NumPy in some python3 on the machine.
  have_numpy() { for py in python3 /usr/bin/python3; do "$py" -c 'import numpy' 2>/dev/null && return 0; done; return 1; }
  have_numpy                  || need_pkgs+=(python3-numpy)
  # tests/ref/check_jinja.py renders the chat templates with Python's jinja2 too.
  have_jinja2() { for py in python3 /usr/bin/python3; do "$py" -c 'import jinja2' 2>/dev/null && return 0; done; return 1; }
  have_jinja2                 || need_pkgs+=(python3-jinja2)
  # tests/ref/check_pretok.py (and scripts/gen_unicode_tables.py) read the Han script from Perl.
  perl -MUnicode::UCD -e1 2>/dev/null || need_pkgs+=(perl)
fi

if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "install-deps: installing ${need_pkgs[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# The CUDA toolkit is optional: without it the cuda backend is left out of the build
# and everything else (host backend, engine, policies, tests) still builds and runs.
if ! have_cuda; then
  echo "install-deps: no CUDA toolkit found; building without the cuda backend" >&2
fi
