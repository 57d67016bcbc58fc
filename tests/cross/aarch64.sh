#!/usr/bin/env bash
# The project on 64-bit ARM (Grace, Graviton, Ampere), from an x86-64 Debian machine: installs
# the cross compilers, qemu-user and the arm64 libraries (multiarch), cross-builds everything
# but the CUDA parts (cmake/aarch64-linux-gnu.cmake) into build-aarch64/, and runs the
# tests under qemu-user, whose default CPU has SDOT: the dotprod kernel level runs by default,
# and test_kernels and cli run the neon and portable levels too.
#
#   bash tests/cross/aarch64.sh [ctest args...]
#
# Everything runs but fuzz, whose libFuzzer builds are the host's (x86-64) anyway: the unit
# tests, and the script tests (cli, ref_*: the NumPy forward pass for every architecture and
# type) through tests/CMakeLists.txt's emulator wrappers. The emulator reads the multiarch
# root's C library (the toolchain file says why).
# Not part of .ci/run: it changes the machine's package architecture list and takes minutes.
# Open MPI's arm64 package is not installed: it is not co-installable with the host's and
# would replace it (the cross build leaves the distributed mode out).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v aarch64-linux-gnu-g++ >/dev/null ||
   ! command -v qemu-aarch64 >/dev/null ||
   [ ! -e /usr/lib/aarch64-linux-gnu/libhwloc.so ] ||
   [ ! -e /usr/lib/aarch64-linux-gnu/libmicrohttpd.so ]; then
  dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc-aarch64-linux-gnu \
    g++-aarch64-linux-gnu qemu-user libhwloc-dev:arm64 libnuma-dev:arm64 libcjson-dev:arm64 \
    libunwind-dev:arm64 libmicrohttpd-dev:arm64 >/dev/null
fi
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEVM_SANITIZE= >/dev/null
cmake --build build-aarch64 -j"$(nproc)"
cd build-aarch64
ctest --output-on-failure --timeout 900 -E '^fuzz$' "$@"
# A CPU without SDOT (Cortex-A72, the Raspberry Pi 4's) detects the neon level and runs the
# kernels' checks at it.
a72=(qemu-aarch64 -L / -cpu cortex-a72)
info=$("${a72[@]}" ./moevm info 2>&1)
if ! grep -q 'cpu: *neon kernels' <<<"$info"; then
  echo "aarch64.sh: on a Cortex-A72, moevm info names another level: $info" >&2
  exit 1
fi
"${a72[@]}" ./tests/test_kernels
