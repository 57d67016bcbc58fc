#!/usr/bin/env bash
# The tests that the AddressSanitizer+UBSan build runs too, as one ctest -E pattern, for
# `make test`'s plain run to leave to it: the same test with the same checks, plus memory and
# undefined behaviour. The plain run keeps what only it can do (the reference comparisons,
# ptxas, the fuzz smoke run, what the sanitizers' builds do not register), the kernels'
# bit-for-bit tests, whose code the optimiser shapes differently uninstrumented (and
# cuda_kernels is built at -O1 under ASan), and the tests the ASan build runs smaller or
# elsewise: serve (one architecture there, every one here) and topo (hwloc without its PCI
# plugin there: tests/CMakeLists.txt). Done twice, the duplicates were 770 of the plain
# run's 1,421 test-seconds on a 2-core VM (docs/perf/tests.md, 2026-12-02).
# Usage: scripts/asan_covered.sh ASAN_BUILD_DIR (configured); prints nothing without it.
set -euo pipefail
dir=${1:?usage: $0 ASAN_BUILD_DIR}
[ -f "$dir/CTestTestfile.cmake" ] || exit 0
keep='^(kernels|cuda_kernels|serve|topo)$'
names=$(ctest --test-dir "$dir" -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p' |
        grep -Ev "$keep" || true)
[ -n "$names" ] || exit 0
printf '^(%s)$' "$(printf '%s\n' "$names" | sed 's/[][\.*^$+?(){}|]/\\&/g' | paste -sd '|')"
