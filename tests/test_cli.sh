#!/usr/bin/env bash
# The `moevm` command: it runs, and bad input gets a one-line error naming what was wrong.
# usage: test_cli.sh path/to/moevm
set -u
moevm=$1
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect <exit code> <regex the output must match> -- command...
expect() {
    local code=$1 pattern=$2
    shift 3
    "$@" >"$tmp/out" 2>&1
    local rc=$?
    if [ "$rc" -eq "$code" ] && grep -Eq -- "$pattern" "$tmp/out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $* (exit $rc, wanted $code; output must match /$pattern/):" >&2
        sed 's/^/    /' "$tmp/out" >&2
    fi
}

export MOEVM_BACKEND=host
expect 0 '^moevm [0-9]+\.[0-9]+' -- "$moevm" --version
expect 0 'backend: +host' -- "$moevm" info
expect 0 'page size: +2048 KiB' -- "$moevm" info
expect 0 'budget: +auto = all expert bytes' -- "$moevm" info
expect 0 'budget: +25% of the experts' -- env MOEVM_GPU_BUDGET=25% "$moevm" info
expect 0 'budget: +8192 MiB' -- env MOEVM_GPU_BUDGET=8G "$moevm" info
expect 0 'MOEVM_GPU_BUDGET' -- "$moevm" options
expect 0 '^\| `MOEVM_BACKEND` \|' -- "$moevm" options --markdown
expect 0 'verified [1-9][0-9]* expert reads' -- "$moevm" demo --tokens 16
expect 0 'token +16/16 +hit rate' -- env MOEVM_PAGE_SIZE=64K "$moevm" demo --tokens 16 --layers 2 --experts 8 --expert-size 256K --budget 1M
expect 2 'unknown command' -- "$moevm" frobnicate
expect 2 'usage' -- "$moevm"
expect 2 'not a positive number' -- "$moevm" demo --tokens abc
expect 2 'exceeds --experts' -- "$moevm" demo --topk 9 --experts 8
expect 2 'expected a size' -- "$moevm" demo --budget lots
expect 1 'smaller than one page' -- "$moevm" demo --budget 1K
expect 1 'MOEVM_GPU_BUDGET=12Q: not valid' -- env MOEVM_GPU_BUDGET=12Q "$moevm" info
expect 1 'MOEVM_BACKEND=gpu: not valid \(expected one of auto\|host\|cuda\)' -- env MOEVM_BACKEND=gpu "$moevm" info
expect 0 'MOEVM_GPU_BUGDET is not a moevm option \(did you mean MOEVM_GPU_BUDGET\?\)' -- env MOEVM_GPU_BUGDET=1G "$moevm" info
expect 1 'no CUDA driver' -- env MOEVM_BACKEND=cuda MOEVM_CUDA_LIBRARY=/nonexistent/libcuda.so.1 "$moevm" info

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
