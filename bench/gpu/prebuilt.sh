#!/usr/bin/env bash
# The GPU scripts' build (build-gpu/), made here and carried, so that a device call spends
# its minutes measuring rather than compiling (the build takes ~105 s of a 15-minute lease):
#
#   bash bench/gpu/prebuilt.sh pack     here (nvcc is enough, no GPU needed): build-gpu/ and
#                                       .gpubin/build-gpu.tar.xz (git-ignored; name .gpubin
#                                       in the device call's carry)
#
# On the device, bench/gpu/deps.sh's moevm_gpu_build unpacks it in place of building, but only
# when it was made from the same sources (a hash of every file the build reads, taken on both
# sides: the working tree travels without its .git) and holds every target asked for; else it
# says why and builds as before. The build is the device's own (Release, warnings not errors)
# with two differences that a machine of another image needs: library paths relative to the
# binaries ($ORIGIN, as the tree lands at another path there) and no Open MPI (the device
# image has none; the distributed mode is not measured there).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/gpu/deps.sh

case "${1:-}" in
pack)
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMOEVM_WERROR=OFF \
        -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
    cmake --build build-gpu -j"$(nproc)" --target "${MOEVM_GPU_TARGETS[@]}"
    moevm_src_hash >build-gpu/SOURCES
    echo "${MOEVM_GPU_TARGETS[*]}" >build-gpu/TARGETS
    mkdir -p .gpubin
    # The programs and the libraries they load (and their links), not the objects nor the
    # fake driver: some MB, not hundreds.
    find build-gpu \( -type f -o -type l \) \( -perm -u+x -o -name '*.so*' \) \
        ! -path '*/CMakeFiles/*' ! -path 'build-gpu/fakecuda/*' ! -name '*.sh' -print0 |
        tar --null -T - -cJf .gpubin/build-gpu.tar.xz build-gpu/SOURCES build-gpu/TARGETS
    echo "prebuilt.sh: .gpubin/build-gpu.tar.xz ($(du -h .gpubin/build-gpu.tar.xz | cut -f1))" \
         "from sources $(cat build-gpu/SOURCES): carry .gpubin"
    ;;
*) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
