#!/usr/bin/env bash
# The GPU scripts' build (build-gpu/), made here and carried, so that a device call spends
# its minutes measuring rather than compiling (the build takes ~105 s of a 15-minute lease):
#
#   bash bench/gpu/prebuilt.sh pack [TARGET...]
#       here (nvcc is enough, no GPU needed): build-gpu/ and .gpubin/build-gpu.tar.xz
#       (git-ignored; name .gpubin in the device call's carry) with the targets named (default:
#       every one the GPU scripts build, deps.sh's MOEVM_GPU_TARGETS), stripped: each program
#       holds its kernels' PTX, ~3 MB of xz's default each, but the same PTX in all of them,
#       which xz -9e's 64 MiB window packs once: every target in 3.4 MB (8.7 for three at
#       the default), so the whole pack fits beside llama.cpp's 42 MB in a call's 64 MiB
#   bash bench/gpu/prebuilt.sh base REV
#       moevm built from commit REV (a worktree in a temporary folder, the same flags),
#       stripped, as .gpubin/moevm-base.xz: lease.sh unpacks it to /tmp/moevm-base, and a
#       variant BIN=/tmp/moevm-base of llamacpp.sh runs it beside the tree's own build in the
#       same call, so that a change's ratio is measured on one machine
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

# build SRC TARGET...: SRC's build-gpu/ with the flags above, the targets built.
build() {
    local src=$1
    shift
    cmake -S "$src" -B "$src/build-gpu" -DCMAKE_BUILD_TYPE=Release -DMOEVM_WERROR=OFF \
        -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
    cmake --build "$src/build-gpu" -j"$(nproc)" --target "$@"
}

case "${1:-}" in
pack)
    shift
    targets=("$@")
    ((${#targets[@]})) || targets=("${MOEVM_GPU_TARGETS[@]}")
    build . "${targets[@]}"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/build-gpu"
    moevm_src_hash >"$stage/build-gpu/SOURCES"
    echo "${targets[*]}" >"$stage/build-gpu/TARGETS"
    for t in "${targets[@]}"; do # each target's file: moevm_cli makes build-gpu/moevm
        name=$t
        [[ $t == moevm_cli ]] && name=moevm
        file=$(find build-gpu \( -name "$name" -o -name "lib$name.so" \) -type f \
               ! -path '*/CMakeFiles/*' | head -n 1)
        [[ -n $file ]] || { echo "prebuilt.sh: no file of target $t under build-gpu/" >&2; exit 1; }
        mkdir -p "$stage/$(dirname "$file")"
        strip --strip-unneeded -o "$stage/$file" "$file"
        # and the build's shared libraries it loads (vmm_costs: libmoevm.so.0), by the name
        # the loader asks for ($ORIGIN-relative, so the same place under build-gpu/)
        ldd "$file" | awk -v d="$PWD/build-gpu/" 'index($3, d) == 1 { print $3 }' |
            while read -r lib; do
                rel=build-gpu/${lib#"$PWD"/build-gpu/}
                [[ -f $stage/$rel ]] || strip --strip-unneeded -o "$stage/$rel" "$(readlink -f "$lib")"
            done
    done
    mkdir -p .gpubin
    # xz's strongest: the three programs' PTX is most of the bytes, and a call carries 64 MiB
    XZ_OPT=-9e tar -C "$stage" -cJf .gpubin/build-gpu.tar.xz build-gpu
    echo "prebuilt.sh: .gpubin/build-gpu.tar.xz ($(du -h .gpubin/build-gpu.tar.xz | cut -f1))" \
         "from sources $(cat "$stage/build-gpu/SOURCES"): carry .gpubin"
    ;;
base)
    rev=${2:?"usage: prebuilt.sh base REV"}
    git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "prebuilt.sh: no commit $rev" >&2; exit 2; }
    tree=$(mktemp -d)
    trap 'git worktree remove --force "$tree" >/dev/null 2>&1; rm -rf "$tree"' EXIT
    git worktree add -q --detach "$tree" "$rev"
    build "$tree" moevm_cli
    mkdir -p .gpubin
    strip --strip-unneeded -o "$tree/moevm" "$tree/build-gpu/moevm"
    xz -9e -T0 -c "$tree/moevm" >.gpubin/moevm-base.xz
    echo "prebuilt.sh: .gpubin/moevm-base.xz ($(du -h .gpubin/moevm-base.xz | cut -f1)), moevm" \
         "at $(git rev-parse --short "$rev"): carry .gpubin, variant BIN=/tmp/moevm-base"
    ;;
*) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
