#!/usr/bin/env bash
# The libraries moevm builds against (hwloc, libnuma, libunwind, cJSON, and pkg-config to find
# them) for a GPU machine that has no package registry: the lent device machines reach nothing
# outside, and their image is a CUDA/PyTorch one that need not hold these -dev packages.
#
#   bash bench/gpu/deps.sh fetch   here, where apt works: the .debs into .gpudeps/ (git-ignored;
#                                  name .gpudeps in the device call's carry)
#   bash bench/gpu/deps.sh fetch runtime
#                                  only the shared libraries the programs load (4 MB of 8): for a
#                                  call that runs a carried build (.gpubin) and builds nothing
#                                  there, and carries 4 MB less
#   source bench/gpu/deps.sh       there (bench/gpu/*.sh do it): nothing when the machine has
#                                  them all; else the .debs are unpacked under $MOEVM_DEPS_DIR
#                                  (/tmp/moevm-deps) and pkg-config, CMake and the dynamic
#                                  loader are pointed at them
#
# Unpacked, not installed: the machine's own packages are left alone (its dpkg database and /
# stay as they were), and only the shared libraries it lacks are put on LD_LIBRARY_PATH, so a
# library the machine has is never shadowed by an older Debian build of it in the processes
# under test (PyTorch's among them).

MOEVM_DEPS_PKGS=(libhwloc-dev libhwloc15 libnuma-dev libnuma1 libunwind-dev libunwind8
                 libcjson-dev libcjson1 libudev1 pkgconf pkgconf-bin libpkgconf3
                 libmicrohttpd-dev libmicrohttpd12
                 # pkg-config's check of libmicrohttpd reads gnutls.pc (Requires.private),
                 # and that one reads nettle's, libtasn1's, libidn2's and p11-kit's
                 libgnutls28-dev nettle-dev libtasn1-6-dev libidn2-dev libp11-kit-dev
                 libgnutls30 libgmp10 libhogweed6 libnettle8 libidn2-0 libp11-kit0
                 libtasn1-6 libunistring2 libffi8)

moevm_deps_fetch() {
    local dir=.gpudeps pkgs=("${MOEVM_DEPS_PKGS[@]}")
    [[ ${1:-} == runtime ]] && mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" |
        grep -v -E -- '-dev$|pkgconf')
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$dir" && apt-get download -q "${pkgs[@]}") || {
        echo "deps.sh: apt-get download failed (run apt-get update first?)" >&2
        return 1
    }
    echo "deps.sh: $(ls "$dir" | wc -l) packages, $(du -sh "$dir" | cut -f1), in $dir/;" \
         "name .gpudeps in the device call's carry"
}

# Where a GPU script's output also goes (it tees into the path printed): $OUT/NAME, emptied,
# when the device call set $OUT; else /dev/null.
moevm_out_log() {
    if [[ -z "${OUT:-}" ]]; then
        echo /dev/null
        return
    fi
    mkdir -p "$OUT" && : >"$OUT/$1" && echo "$OUT/$1"
}

# What the build needs, asked the way the build asks: pkg-config for hwloc, libunwind and
# cJSON (CMakeLists.txt's pkg_check_modules), the compiler and linker for numa.h and -lnuma.
moevm_deps_present() {
    command -v pkg-config >/dev/null &&
        pkg-config --exists hwloc libunwind libcjson libmicrohttpd &&
        printf '#include <numa.h>\nint main(void) { return numa_available(); }\n' |
            ${CC:-cc} -x c - -lnuma -o /dev/null 2>/dev/null
}

# The GPU scripts' one build folder, build-gpu/ (tests on: their GPU programs are tests), so
# that scripts run one after another in a lease compile each file once.
moevm_gpu_build() {
    moevm_prebuilt_use "$@" && return 0
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMOEVM_WERROR=OFF &&
        cmake --build build-gpu -j"$(nproc)" --target "$@"
}

# Every target the GPU scripts build: what bench/gpu/prebuilt.sh packs.
MOEVM_GPU_TARGETS=(moevm_cli test_gpu bench_gpu_experts bench_gpu_prompt_experts
                   bench_gpu_attention vmm_costs moevm_ktrace moevm_preload)

# A hash of every file the build reads, the same here and on a device machine (whose copy of
# the tree has no .git to ask).
moevm_src_hash() {
    find CMakeLists.txt cmake engine vmm kernels include interpose policy tools tests bench \
        -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cmake' \
        -o -name CMakeLists.txt -o -name '*.in' \) -print0 2>/dev/null |
        LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

# The build carried in .gpubin/build-gpu.tar.xz (bench/gpu/prebuilt.sh) in place of building,
# when it was made from these sources and holds the targets asked for ($@).
moevm_prebuilt_use() {
    local pack=.gpubin/build-gpu.tar.xz made want t
    [[ -f $pack ]] || return 1
    made=$(tar -xJf "$pack" -O build-gpu/SOURCES 2>/dev/null) || return 1
    if [[ $made != "$(moevm_src_hash)" ]]; then
        echo "deps.sh: $pack was made from other sources: building here" >&2
        return 1
    fi
    want=" $(tar -xJf "$pack" -O build-gpu/TARGETS) "
    for t in "$@"; do
        [[ $want == *" $t "* ]] || { echo "deps.sh: $pack lacks $t: building here" >&2; return 1; }
    done
    [[ -f build-gpu/SOURCES && $(cat build-gpu/SOURCES) == "$made" ]] && return 0
    rm -rf build-gpu && tar -xJf "$pack" || { echo "deps.sh: cannot unpack $pack" >&2; return 1; }
    echo "deps.sh: the build made elsewhere from these sources ($pack), not built here" >&2
}

moevm_deps_use() {
    if [[ -z "${MOEVM_DEPS_FORCE:-}" ]] && moevm_deps_present; then
        return 0
    fi
    local debs=(.gpudeps/*.deb)
    if [[ ! -f "${debs[0]}" ]]; then
        echo "deps.sh: this machine lacks hwloc/libnuma/libunwind/cJSON/pkg-config and" \
             ".gpudeps/ holds no .debs: run 'bash bench/gpu/deps.sh fetch' where apt works" \
             "and carry .gpudeps" >&2
        return 1
    fi
    local root=${MOEVM_DEPS_DIR:-/tmp/moevm-deps}
    local lib=$root/usr/lib/x86_64-linux-gnu
    rm -rf "$root" && mkdir -p "$root/bin" "$root/rt"
    local deb
    for deb in "${debs[@]}"; do
        dpkg-deb -x "$deb" "$root" || { echo "deps.sh: cannot unpack $deb" >&2; return 1; }
    done
    # Debian's .pc files name /usr (as prefix=, or libdir=/includedir= outright). None when
    # only the runtime libraries were carried (the -dev .debs left out to fit a call).
    local pcs=("$lib"/pkgconfig/*.pc)
    [[ -f ${pcs[0]} ]] && sed -i "s|=/usr|=$root/usr|" "${pcs[@]}"
    [[ -x $root/usr/bin/pkgconf ]] && ln -sf "$root/usr/bin/pkgconf" "$root/bin/pkg-config"
    # The shared libraries the machine lacks, by soname, for the loader. (The cache is read
    # once: `ldconfig -p | grep -q` would fail under pipefail when grep stops reading early.)
    local so name known
    known=$(ldconfig -p)
    for so in "$lib"/*.so.*; do
        name=$(basename "$so")
        [[ $name =~ \.so\.[0-9]+$ ]] || continue
        grep -qF " $name " <<<"$known" || ln -sf "$so" "$root/rt/$name"
    done
    export LD_LIBRARY_PATH=$root/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$root/bin:$PATH
    export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    # Debian's multiarch headers (hwloc's autogen/config.h) sit where gcc looks only under /.
    export CPATH=$root/usr/include/x86_64-linux-gnu:$root/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    if ! moevm_deps_present; then
        if [[ ! -f .gpubin/build-gpu.tar.xz ]]; then
            echo "deps.sh: unpacked $root, but the build's libraries are still not found" >&2
            return 1
        fi
        echo "deps.sh: unpacked $root, without what a build needs: only the carried build" \
             "(.gpubin) can run" >&2
    fi
    echo "deps.sh: using the carried libraries under $root ($(ls "$root/rt" | wc -l)" \
         "shared libraries the machine lacks on LD_LIBRARY_PATH)" >&2
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    cd "$(dirname "$0")/../.."
    case "${1:-}" in
        fetch) moevm_deps_fetch "${2:-}" ;;
        *) echo "usage: bash bench/gpu/deps.sh fetch [runtime]  (or source it to use .gpudeps/)" >&2
           exit 2 ;;
    esac
else
    moevm_deps_use
fi
