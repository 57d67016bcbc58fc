#!/usr/bin/env bash
# `make test`: a plain build, then AddressSanitizer+UBSan and ThreadSanitizer builds, each
# running the whole suite (tests/CMakeLists.txt says which tests a sanitizer build leaves
# out). The sanitizer builds take the plain build's PTX from build/ptx-cache (it does not
# depend on sanitizers).
#
# Each sanitizer build compiles while the configuration before it runs its tests, on what
# the tests leave idle (SCHED_IDLE: a test's thread that wakes takes its core at once). The
# tests keep the two cores of a CI machine busy but for their waits and the last long test
# of each run, and the builds filled none of that when they ran one after the other: on 2
# cores that was about a minute of the suite's 17 (docs/perf/tests.md). A build's output is
# printed when its turn comes, whole.
#
# Environment: JOBS (make's -j, default: the cores), CMAKE_FLAGS (added to every configure).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
read -r -a extra <<<"${CMAKE_FLAGS:-}"
configs=("build:" "build-asan:address,undefined" "build-tsan:thread")

configure() { # dir sanitizers
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEVM_SANITIZE="$2" \
        -DMOEVM_PTX_CACHE="$PWD/build/ptx-cache" ${extra[@]+"${extra[@]}"} >/dev/null
}

# Where the kernel has no SCHED_IDLE for us (a container may refuse it), the lowest nice.
idle() {
    if chrt --idle 0 true 2>/dev/null; then
        chrt --idle 0 "$@"
    else
        nice -n 19 "$@"
    fi
}

bg=""
trap '[ -z "$bg" ] || kill -- "-$bg" 2>/dev/null || true' EXIT

for i in "${!configs[@]}"; do
    dir=${configs[$i]%%:*} san=${configs[$i]#*:}
    echo "== $dir ${san:+(sanitizers: $san)}"
    if [ -z "$bg" ]; then
        configure "$dir" "$san"
        cmake --build "$dir" -j"$jobs"
    else # started in the background during the last tests
        rc=0
        wait "$bg" || rc=$?
        bg=""
        cat "$dir/build.log"
        [ "$rc" -eq 0 ] || { echo "make test: building $dir failed" >&2; exit "$rc"; }
    fi
    next=$((i + 1))
    if [ "$next" -lt "${#configs[@]}" ]; then
        ndir=${configs[$next]%%:*} nsan=${configs[$next]#*:}
        configure "$ndir" "$nsan"
        # its own process group (setsid), so that a failed run stops the whole build
        setsid bash -c "$(declare -f idle); idle cmake --build '$ndir' -j'$jobs'" \
            >"$ndir/build.log" 2>&1 &
        bg=$!
    fi
    ctest --test-dir "$dir" --output-on-failure -j"$jobs"
    scripts/skip_summary.sh "$dir/Testing/Temporary/LastTest.log"
done
