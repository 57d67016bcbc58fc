#!/usr/bin/env bash
# The interposer under LD_PRELOAD against tests/fakecuda (a 32 MiB "GPU"):
#   test_preload.sh PRELOAD_SO TEST_BINARY FAKE_LIB_DIR [DRIVER_LIBRARY [CUDART_LIBRARY]]
# First what the library exports: the hooks, under names the real driver library (or the
# toolkit's stub of it, DRIVER_LIBRARY) defines, NVML's and dlsym, nothing else. Then every
# scenario of tests/test_preload.c with each way of reaching the driver, the CUDA runtime's
# own cuGetProcAddress requests (CUDART_LIBRARY, the toolkit's libcudart), and the bad-value,
# report and log checks.
set -u
so=$1 bin=$2 fakedir=$3 driver=${4:-} cudart=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# The managed setting: 8 MiB of device budget, 56 MiB more on the host.
managed=(MOEVM_GPU_BUDGET=8M MOEVM_OVERSUBSCRIBE=56M)
run() { # run NAME EXPECT_RC ENV... -- ARGS...: output in $tmp/out, $tmp/err
    local name=$1 want=$2
    shift 2
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env LD_LIBRARY_PATH="$fakedir" MOEVM_CUDA_LIBRARY="$fakedir/libcuda.so.1" \
        FAKECUDA_MEM=32M "${envs[@]}" LD_PRELOAD="$so" "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL $name: exit $rc, expected $want"
        sed 's/^/    /' "$tmp/err" | head -20
        fails=$((fails + 1))
        return 1
    fi
    echo "ok   $name"
}

exports=$(nm -D --defined-only "$so" | awk '$2 == "T" || $2 == "W" {print $3}' | sort)
others=$(grep -v -E '^(cu|nvml)[A-Za-z0-9_]+$|^dlsym$' <<<"$exports")
if [ -n "$others" ]; then
    echo "FAIL exports: not a hook: $others"; fails=$((fails + 1))
else
    echo "ok   exports: $(grep -c '^cu' <<<"$exports") cu* hooks, NVML's and dlsym only"
fi
if [ -n "$driver" ] && [ -f "$driver" ]; then
    unknown=$(comm -23 <(grep '^cu' <<<"$exports") \
                       <(nm -D --defined-only "$driver" | awk '{print $3}' | sort))
    if [ -n "$unknown" ]; then
        echo "FAIL exports: not in $driver: $unknown"; fails=$((fails + 1))
    else
        echo "ok   exports: every cu* hook is a name $driver defines"
    fi
fi

# PRELOAD_WAYS narrows the ways (the ThreadSanitizer build's: the hooks' routing is the same
# code in every build, and checked in full by the others).
for how in ${PRELOAD_WAYS:-link dlsym getproc}; do
    for sc in oversub overbudget unified guarded routing query ipc ranges loop experts fork \
              graph graphcopy kernels; do
        run "$sc.$how" 0 "${managed[@]}" -- "$sc.$how"
    done
done

# llama.cpp's fused expert tensors (scenario routed): at 12 MiB, so that each routed launch's
# experts fit while each tensor does not.
routed_budget=(MOEVM_GPU_BUDGET=12M MOEVM_OVERSUBSCRIBE=56M)
for how in ${PRELOAD_WAYS:-link dlsym getproc}; do
    run "routed.$how" 0 "${routed_budget[@]}" -- "routed.$how"
done

# The driver failing mid-run (each call in turn): one way of reaching it is enough. Its calls
# include a page-in fence's cuEventSynchronize, the wait of a worker that sleeps at once
# (one that spins polls cuEventQuery: MOEVM_MOVE_SPIN's auto from 4 CPUs up).
sleeps=MOEVM_MOVE_SPIN=0
run "faults.link" 0 "${managed[@]}" "$sleeps" -- faults.link

if [ -n "$cudart" ]; then
    run "runtime.getproc" 0 "${managed[@]}" CUDART_LIBRARY="$cudart" -- runtime.getproc &&
        sed -n 's/^runtime:/     runtime:/p' "$tmp/out"
fi

# Prefetch from the launch sequence (MOEVM_PRELOAD_PREFETCH): its writes-under-way walk and
# the threads of `guarded`, here so that the ThreadSanitizer build runs them too.
for sc in prefetch guarded; do
    run "$sc.link prefetch" 0 "${managed[@]}" MOEVM_PRELOAD_PREFETCH=on -- "$sc.link"
done

finish() {
    [ "$fails" = 0 ] && echo "all preload checks passed" || echo "$fails preload check(s) failed"
    exit $((fails != 0))
}
# PRELOAD_REPORTS=off (the ThreadSanitizer build's) stops here: what follows checks values,
# reports and logs, which the other builds check with the same code; the scenarios above
# are the ones whose threads matter.
[ "${PRELOAD_REPORTS:-on}" = off ] && finish

# Bad values: one line naming the variable, and the program runs un-managed.
for bad in MOEVM_PRELOAD_MIN=lots MOEVM_GPU_BUDGET=-3 MOEVM_OVERSUBSCRIBE=1Q MOEVM_EVICT=fifo \
           MOEVM_LOG=loud MOEVM_CLEAN_EVICT=maybe MOEVM_PRELOAD_SLICES=2 \
           MOEVM_PRELOAD_ROUTING=yes; do
    var=${bad%%=*}
    if run "bad $bad" 0 "${managed[@]}" "$bad" -- unmanaged.link; then
        if ! grep -q "$var" "$tmp/err" || ! grep -q "unmanaged" "$tmp/err"; then
            echo "FAIL bad $bad: stderr does not name $var and say the program runs unmanaged:"
            sed 's/^/    /' "$tmp/err"
            fails=$((fails + 1))
        fi
    fi
done

# The report and the summary line.
if run "report" 0 "${managed[@]}" MOEVM_REPORT="$tmp/report.json" MOEVM_LOG=info \
       -- oversub.link; then
    grep -q "preload: .*managed allocations" "$tmp/err" ||
        { echo "FAIL report: no summary line with MOEVM_LOG=info"; fails=$((fails + 1)); }
    python3 - "$tmp/report.json" <<'EOF' || fails=$((fails + 1))
import json, sys
r = json.load(open(sys.argv[1]))
def check(cond, what):
    if not cond:
        print("FAIL report:", what, json.dumps(r, indent=1)[:2000]); sys.exit(1)
check(r["managed"]["count"] == 6 and r["managed"]["bytes"] == 6 * 8 << 20, "6 managed allocations")
check(r["managed"]["live_bytes"] == 0, "all freed")
check(r["native"]["count"] == 1, "one native allocation")
check(r["space"]["device_budget_bytes"] == 8 << 20, "device budget 8 MiB")
# 18 sums (6 of them repeats: hits), a fill, 6 more sums, one after a free; the budget
# holds one buffer (four 2 MiB pages)
check(r["launches"]["managed"] == 26 and r["launches"]["hits"] == 6, "launches and hits")
check(r["moves"]["misses"] == 20 and r["moves"]["bytes_in"] == 20 * 8 << 20, "moves in")
# Only the buffer the fill kernel wrote goes home; the sums left the other 17 evicted
# buffers as they were loaded (MOEVM_CLEAN_EVICT, on by default).
check(r["options"]["clean_evict"] is True and r["space"]["clean_evict"] is True,
      "clean_evict on by default, and the space does it")
check(r["moves"]["bytes_written_back"] == 8 << 20 and r["moves"]["pages_clean"] == 17 * 4,
      "the written buffer went home, the 17 unchanged ones did not, nothing freed was")
check(r["moves"]["pages_discarded"] == 8, "the two buffers freed while resident were dropped")
site = r["allocations"][0]["site"]
check(any("scenario_oversub" in f for f in site), "call site names the caller: %s" % site)
check(any("!alloc_from_static_helper" in f for f in site),
      "call site names a static function: %s" % site)
check(r["allocations"][0]["managed_bytes"] == 6 * 8 << 20, "site bytes")
print("ok   report contents")
EOF
fi

# MOEVM_REPORT_SKIP drops the named libraries' frames from a call site (by default the CUDA
# runtime's and PyTorch's allocator's). Naming the test program itself leaves libc's frames
# under main; naming libc too skips every frame, and the site keeps them all rather than
# none; "none" skips nothing.
for skip in test_preload test_preload,libc none; do
    if run "report skip '$skip'" 0 "${managed[@]}" MOEVM_REPORT="$tmp/skip.json" \
           MOEVM_REPORT_SKIP="$skip" -- oversub.link; then
        python3 - "$tmp/skip.json" "$skip" <<'EOF' || fails=$((fails + 1))
import json, sys
site = json.load(open(sys.argv[1]))["allocations"][0]["site"]
caller = any("scenario_oversub" in f for f in site)
if sys.argv[2] == "test_preload":
    ok = not caller and all(f.startswith("libc") for f in site)
else:
    ok = caller
print(("ok  " if ok else "FAIL") + " report skip %r: %s" % (sys.argv[2], site))
sys.exit(0 if ok else 1)
EOF
    fi
done

# MOEVM_HOME_MAP=off is the engine's to use: the interposer keeps its homes mapped (a
# program reads any pointer in place) and manages as ever; oversub fails unmanaged.
run "home map off" 0 "${managed[@]}" MOEVM_HOME_MAP=off -- oversub.link

# MOEVM_CLEAN_EVICT=off: every eviction writes its buffer back.
if run "report clean off" 0 "${managed[@]}" MOEVM_REPORT="$tmp/off.json" MOEVM_CLEAN_EVICT=off \
       -- oversub.link; then
    python3 - "$tmp/off.json" <<'EOF' || fails=$((fails + 1))
import json, sys
m = json.load(open(sys.argv[1]))["moves"]
if m["bytes_written_back"] != 18 * 8 << 20 or m["pages_clean"] != 0:
    print("FAIL report clean off: every eviction should write back:", m); sys.exit(1)
print("ok   report with MOEVM_CLEAN_EVICT=off")
EOF
fi

# Graphs in the report: what was deferred during captures, what was scanned.
if run "report graph" 0 "${managed[@]}" MOEVM_REPORT="$tmp/graph.json" -- graph.getproc; then
    python3 - "$tmp/graph.json" <<'EOF' || fails=$((fails + 1))
import json, sys
l = json.load(open(sys.argv[1]))["launches"]
def check(cond, what):
    if not cond:
        print("FAIL report graph:", what, json.dumps(l, indent=1)); sys.exit(1)
check(l["graphs"] == 5, "five graph launches")
# instantiated twice, updated once; 2 + 2 (one in a child graph) + 2 nodes, and 1 changed
check(l["graphs_scanned"] == 3 and l["graph_kernel_nodes"] == 7, "graphs and nodes scanned")
# captured while missing: both sums of the first capture, one of the second (small[3] was
# left resident by the graph launch before it)
check(l["deferred"] == 3, "misses deferred during captures")
print("ok   report graph contents")
EOF
fi

# A loop larger than the budget (scenario loop: 12 one-page buffers in order, 4 fit, 10
# passes). LRU evicts the page needed next and never hits; the default policy must come
# within 10% of Belady's hits on the same sequence (the best any policy can do).
if run "report loop lru" 0 "${managed[@]}" MOEVM_EVICT=lru MOEVM_REPORT="$tmp/loop_lru.json" \
       -- loop.link &&
   run "report loop default" 0 "${managed[@]}" MOEVM_REPORT="$tmp/loop.json" -- loop.link; then
    python3 - "$tmp/loop_lru.json" "$tmp/loop.json" <<'EOF' || fails=$((fails + 1))
import json, sys
lru, dflt = (json.load(open(p)) for p in sys.argv[1:3])
seq, cap, res, belady = [t % 12 for t in range(120)], 4, set(), 0
for t, page in enumerate(seq):
    if page in res:
        belady += 1
        continue
    if len(res) == cap:
        later = lambda q: next((u for u in range(t + 1, len(seq)) if seq[u] == q), len(seq))
        res.remove(max(res, key=later))
    res.add(page)
got = dflt["launches"]["hits"]
ok = (lru["launches"]["hits"] == 0 and lru["moves"]["misses"] == 120 and
      dflt["options"]["evict"] == "reuse" and dflt["launches"]["managed"] == 120 and
      got * 10 >= belady * 9 and dflt["moves"]["misses"] == 120 - got)
print("%s report loop: hits lru %d, default (%s) %d, Belady %d" %
      ("ok  " if ok else "FAIL", lru["launches"]["hits"], dflt["options"]["evict"], got, belady))
sys.exit(0 if ok else 1)
EOF
fi

# Fused expert tensors: the first cut into its eight experts, the second made whole again by
# a pointer inside an expert; with MOEVM_PRELOAD_SLICES=off both stay whole (the scenario
# itself checks where the kernels read).
if run "report experts" 0 "${managed[@]}" MOEVM_REPORT="$tmp/experts.json" -- experts.link &&
   run "experts slices off" 0 "${managed[@]}" MOEVM_PRELOAD_SLICES=off \
       MOEVM_REPORT="$tmp/experts_off.json" -- experts.link; then
    python3 - "$tmp/experts.json" "$tmp/experts_off.json" <<'EOF' || fails=$((fails + 1))
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
want_on = {"extents": 4, "sliced": 3, "slices": 20, "routed": 0, "flat": 1}
want_off = {"extents": 4, "sliced": 0, "slices": 0, "routed": 0, "flat": 0}
if not (on["objects"] == want_on and on["options"]["slices"] is True and
        off["objects"] == want_off and off["options"]["slices"] is False):
    print("FAIL report experts: objects", on["objects"], "and with slices off", off["objects"])
    sys.exit(1)
print("ok   report experts: objects", on["objects"], "(none cut with slices off)")
EOF
fi

# Routed experts: the two fused tensors uploaded from the GGUF mapping are cut into their 16
# experts (the attention weight and the copy from ordinary memory are not); every one of the
# 60 routed launches reads its two ids (the first two of a row that lists all 16 experts)
# from the first pointer that holds ids (not the output, whose bytes hold stale ids) and
# loads only those experts, and the two whose reads fail name the tensor whole; a batch's
# launch names both its tokens' two (4, from two rows); a third
# tensor, from a file that gives no top-k (freed before exit), is cut too, and its 4 launches
# read two ids each from a leading run. Off, nothing is cut and each launch moves as much of
# the whole tensor as fits.
if run "report routed" 0 "${routed_budget[@]}" MOEVM_REPORT="$tmp/routed.json" -- routed.link &&
   run "routed routing off" 0 "${routed_budget[@]}" MOEVM_PRELOAD_ROUTING=off \
       MOEVM_REPORT="$tmp/routed_off.json" -- routed.link; then
    python3 - "$tmp/routed.json" "$tmp/routed_off.json" <<'EOF' || fails=$((fails + 1))
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
ok = (on["options"]["routing"] is True and off["options"]["routing"] is False and
      on["objects"] == {"extents": 6, "sliced": 2, "slices": 32, "routed": 2, "flat": 1} and
      on["routing"]["declared"] == 3 and on["routing"]["reads"] == 67 and
      on["routing"]["experts"] == 132 and on["routing"]["whole"] == 2 and
      off["objects"]["routed"] == 0 and off["routing"]["reads"] == 0 and
      on["moves"]["pages_in"] * 2 < off["moves"]["pages_in"])
print(("ok  " if ok else "FAIL") + " report routed: objects %s, routing %s, pages in %d (off: %d)" %
      (on["objects"], {k: v for k, v in on["routing"].items() if k != "ns"},
       on["moves"]["pages_in"], off["moves"]["pages_in"]))
sys.exit(0 if ok else 1)
EOF
fi

# A graph's memcpy and memset nodes are scanned at instantiation and at each change.
if run "report graphcopy" 0 "${managed[@]}" MOEVM_REPORT="$tmp/gcopy.json" -- graphcopy.link
then
    python3 - "$tmp/gcopy.json" <<'EOF' || fails=$((fails + 1))
import json, sys
l = json.load(open(sys.argv[1]))["launches"]
# instantiated: one memset, one memcpy, one kernel node; then each of the three changed
if not (l["graph_copy_nodes"] == 4 and l["graph_kernel_nodes"] == 2 and l["graphs"] == 2):
    print("FAIL report graphcopy: 4 copy nodes, 2 kernel nodes, 2 graphs:", json.dumps(l))
    sys.exit(1)
print("ok   report graphcopy contents")
EOF
fi

# Prefetch from the launch sequence: the pages of the next launch copied while the current
# one runs (most of what the walk loads), writes into pages under way landing them first
# (a host copy, a memset, a device copy, a free), nothing refused or lost.
if run "report prefetch" 0 "${managed[@]}" MOEVM_PRELOAD_PREFETCH=on \
       MOEVM_REPORT="$tmp/prefetch.json" -- prefetch.link; then
    python3 - "$tmp/prefetch.json" <<'EOF' || fails=$((fails + 1))
import json, sys
r = json.load(open(sys.argv[1]))
m = r["moves"]
# Passes 2 to 4 walk 36 launches in the learned order: the misses among them (all but the
# buffers the policy keeps) find their page under way, at least two rounds' worth; the four
# writes and the free land what was pending.
ok = (r["options"]["prefetch"] is True and m["prefetch_failed"] == 0 and
      m["prefetch_useful"] >= 24 and m["prefetch_settles"] >= 4 and
      m["prefetch_pages"] >= m["prefetch_useful"] + m["prefetch_settles"])
print(("ok  " if ok else "FAIL") + " report prefetch: %s" %
      {k: v for k, v in m.items() if k.startswith("prefetch") or k in ("misses", "pages_in")})
sys.exit(0 if ok else 1)
EOF
fi
# The other scenarios with prefetch on: loops, graphs, fused experts, the driver failing.
for sc in loop graph experts faults; do
    run "$sc.link prefetch" 0 "${managed[@]}" "$sleeps" MOEVM_PRELOAD_PREFETCH=on -- "$sc.link"
done

# A buffer larger than the budget: misses that could move nothing are counted apart.
if run "report overbudget" 0 "${managed[@]}" MOEVM_REPORT="$tmp/over.json" -- overbudget.link
then
    python3 - "$tmp/over.json" <<'EOF' || fails=$((fails + 1))
import json, sys
m = json.load(open(sys.argv[1]))["moves"]
if not (m["overflows"] == 3 and m["misses"] == 3 and m["pages_in"] == 6):
    print("FAIL report overbudget: 3 overflows, 3 misses, 6 pages in:", json.dumps(m)); sys.exit(1)
print("ok   report overbudget contents")
EOF
fi

# A report that cannot be written is said at start (before the program's own output ends),
# and the program still runs managed; the line names the folder.
if run "report unwritable" 0 "${managed[@]}" MOEVM_REPORT="$tmp/none/r.json" -- oversub.link
then
    if ! head -n 1 "$tmp/err" | grep -q "MOEVM_REPORT=$tmp/none/r.json: $tmp/none: .*no report"
    then
        echo "FAIL report unwritable: the first line does not say it:"; head -3 "$tmp/err"
        fails=$((fails + 1))
    fi
fi

# A process that never initialises CUDA manages nothing and, with MOEVM_LOG=info, says so as
# it ends, with the verdict on its options; a bad value is named there too; by default it
# is silent.
if run "never initialised" 0 MOEVM_LOG=info -- nocuda.link; then
    grep -q "never initialised .*options are valid" "$tmp/err" ||
        { echo "FAIL never initialised: no line with MOEVM_LOG=info"; fails=$((fails + 1)); }
fi
if run "never initialised, bad value" 0 MOEVM_LOG=info MOEVM_GPU_BUDGET=-3 -- nocuda.link; then
    grep -q "MOEVM_GPU_BUDGET" "$tmp/err" ||
        { echo "FAIL never initialised: the bad value is not named"; fails=$((fails + 1)); }
fi
if run "never initialised, quiet" 0 MOEVM_GPU_BUDGET=-3 -- nocuda.link; then
    [ -s "$tmp/err" ] &&
        { echo "FAIL never initialised: output without MOEVM_LOG=info:"; head -3 "$tmp/err";
          fails=$((fails + 1)); }
fi

# Without LD_PRELOAD the same program sees a 32 MiB device: oversubscription is ours.
if env LD_LIBRARY_PATH="$fakedir" FAKECUDA_MEM=32M "$bin" unmanaged.link >/dev/null 2>&1; then
    echo "ok   native baseline"
else
    echo "FAIL native baseline"; fails=$((fails + 1))
fi

finish
