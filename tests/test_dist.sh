#!/usr/bin/env bash
# The distributed mode (engine/dist/dist.h) under mpirun on this machine: experts spread over the
# ranks, placements changed and carried out while a request runs, and bad input stopping
# every rank with one message instead of a hang. Its numbers are checked against the NumPy
# reference by ref_forward_dist (tests/ref/check_forward.py --launcher).
# usage: test_dist.sh path/to/moevm path/to/mpirun
set -u
moevm=$1
mpirun=$2
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# root may run mpirun here (CI runs as root); more ranks than cores; idle ranks yield.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export MOEVM_BACKEND=host
mpi=(timeout 120 "$mpirun" --oversubscribe -n)

# expect <exit code or "fail"> <regex the output must match> -- command...
expect() {
    local code=$1 pattern=$2
    shift 3
    "$@" >"$tmp/out" 2>&1
    local rc=$?
    local ok=0
    if [ "$code" = fail ]; then [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok=1
    elif [ "$rc" -eq "$code" ]; then ok=1; fi
    if [ "$ok" = 1 ] && grep -Eq -- "$pattern" "$tmp/out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $* (exit $rc, wanted $code; output must match /$pattern/):" >&2
        sed 's/^/    /' "$tmp/out" >&2
    fi
}

model=$tmp/tiny.gguf # 2 layers x 8 experts of 48 KiB
"$moevm" mkmodel --preset tiny --arch qwen3moe --seed 3 -o "$model" >/dev/null 2>&1 ||
    { echo "FAIL: mkmodel" >&2; exit 1; }
run=("$moevm" run -m "$model" -p "Once upon a time" -n 12 --temp 0 -t 1)

# Spread over three ranks; 1.5x an even share each by default.
expect 0 'distributed: 3 ranks holding [0-9]+/[0-9]+/[0-9]+ experts \| remote [1-9][0-9]* of' \
    -- "${mpi[@]}" 3 "${run[@]}"
# Exactly room for every expert: each on one rank only, 6 + 5 + 5 = 16.
expect 0 'holding 6/5/5 experts' -- "${mpi[@]}" 3 "${run[@]}" --server-mem 300K,240K,240K --period 0
# A placement after every token: the leader's traffic pulls its experts home, so fewer
# rows go out, and the moves are carried out between steps.
expect 0 '[1-9][0-9]* placements, [1-9][0-9]* migrations moving [0-9.]+ MiB' \
    -- "${mpi[@]}" 3 "${run[@]}" --period 1
expect 0 'distributed: 2 ranks .* remote [1-9]' -- "${mpi[@]}" 2 "${run[@]}" --place uniform
# The same text as one process (greedy; F32 weights: the sums' order differs only in the
# last bits, far from a tie on this prompt).
"${run[@]}" >"$tmp/one.txt" 2>/dev/null
"${mpi[@]}" 3 "${run[@]}" --period 1 >"$tmp/three.txt" 2>/dev/null
if cmp -s "$tmp/one.txt" "$tmp/three.txt"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL: the distributed text differs from one process's" >&2
    diff "$tmp/one.txt" "$tmp/three.txt" | sed 's/^/    /' >&2; fi
# mpirun -n 1 is a single process.
expect 0 'prefill' -- "${mpi[@]}" 1 "${run[@]}"

# Bad input: every rank stops, the leader says why in one line.
expect fail 'room for 15 experts of 0\.05 MiB, the model has 16: every expert must be' \
    -- "${mpi[@]}" 3 "${run[@]}" --server-mem 34%
expect fail "no place policy 'nosuch' \(available: " -- "${mpi[@]}" 3 "${run[@]}" --place nosuch
expect fail "place prism: unknown parameter 'bogus'" -- "${mpi[@]}" 3 "${run[@]}" --place 'prism{bogus=1}'
expect fail 'server-mem: 2 values for 3 servers' -- "${mpi[@]}" 3 "${run[@]}" --server-mem 1M,1M
expect fail 'distributed mode: its ranks compute on the CPU: MOEVM_BACKEND=cuda' -- env MOEVM_BACKEND=cuda "${mpi[@]}" 2 "${run[@]}"
expect 2 'apply to a run started by mpirun' -- "${run[@]}" --place prism
expect 2 '--period x: ' -- "${mpi[@]}" 2 "${run[@]}" --period x
# One rank without the model file: the others do not wait for it.
cat >"$tmp/rank2.sh" <<EOF
#!/bin/sh
m="$model"
[ "\$OMPI_COMM_WORLD_RANK" = 2 ] && m="$tmp/missing.gguf"
exec "$moevm" run -m "\$m" -p hi -n 2 -t 1
EOF
chmod +x "$tmp/rank2.sh"
expect fail 'rank 2: .*missing\.gguf' -- "${mpi[@]}" 3 "$tmp/rank2.sh"

echo "test_dist: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
