#!/usr/bin/env bash
# Installs what moevm needs to build and test on Debian/Ubuntu, only when something is missing.
# Called by `make run` and `make test`; safe to run again (it is a no-op once everything is there).
set -euo pipefail

need_pkgs=()
have_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/include/x86_64-linux-gnu/$1" ] || [ -f "/usr/include/aarch64-linux-gnu/$1" ]; }

command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v cc >/dev/null    || need_pkgs+=(gcc)
command -v c++ >/dev/null   || need_pkgs+=(g++)       # tests/test_digest_kernel.cc
command -v make >/dev/null  || need_pkgs+=(make)
have_header hwloc.h         || need_pkgs+=(libhwloc-dev)
have_header numa.h          || need_pkgs+=(libnuma-dev)
have_header libunwind.h     || need_pkgs+=(libunwind-dev)
have_header cjson/cJSON.h   || need_pkgs+=(libcjson-dev)   # cost files and traces (policy/, tools/)
have_header microhttpd.h    || need_pkgs+=(libmicrohttpd-dev) # `moevm serve` (tools/serve_http.c)
# Open MPI: the distributed mode (docs/distributed.md) and its tests.
{ command -v mpicc && command -v mpirun; } >/dev/null || need_pkgs+=(libopenmpi-dev openmpi-bin)
command -v python3 >/dev/null || need_pkgs+=(python3)
# tests/ref (the NumPy reference forward pass) needs NumPy in some python3 on the machine.
have_numpy() { for py in python3 /usr/bin/python3; do "$py" -c 'import numpy' 2>/dev/null && return 0; done; return 1; }
have_numpy                  || need_pkgs+=(python3-numpy)
# tests/ref/check_jinja.py renders the chat templates with Python's jinja2 too.
have_jinja2() { for py in python3 /usr/bin/python3; do "$py" -c 'import jinja2' 2>/dev/null && return 0; done; return 1; }
have_jinja2                 || need_pkgs+=(python3-jinja2)
# tests/ref/check_pretok.py (and scripts/gen_unicode_tables.py) read the Han script from Perl.
perl -MUnicode::UCD -e1 2>/dev/null || need_pkgs+=(perl)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "install-deps: installing ${need_pkgs[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# The CUDA toolkit is optional: without it the cuda backend is left out of the build
# and everything else (host backend, engine, policies, tests) still builds and runs.
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: no CUDA toolkit found; building without the cuda backend" >&2
fi
