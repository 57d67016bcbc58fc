# shellcheck shell=bash
# Helpers of the scripts that run llama.cpp's CUDA build on a GPU machine (llamacpp.sh,
# llamacpp_preload.sh); sourced after bench/gpu/deps.sh, with $work set to a scratch folder.

# The path of llama.cpp's tool NAME (llama-bench, llama-completion): unpacked from a carried
# .llamacpp/cuda.tar.xz, or built here from a carried .llamacpp/src (bench/llamacpp/build.sh).
llama_tool() {
    local bin=.llamacpp/build-cuda/bin/$1
    if [[ ! -x $bin && -f .llamacpp/cuda.tar.xz ]]; then
        mkdir -p .llamacpp/build-cuda && tar -xJf .llamacpp/cuda.tar.xz -C .llamacpp/build-cuda
    fi
    if [[ ! -x $bin ]]; then
        JOBS=$(nproc) bash bench/llamacpp/build.sh cuda 90 >&2 || return 1
    fi
    [[ -x $bin ]] && echo "$bin"
}

# Runs "$@" while sampling its GPU memory; prints the command's output, then "VRAM_MIB n".
with_vram() {
    local out=$work/run.out peak=0
    "$@" >"$out" 2>"$work/run.err" &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        local mib
        mib=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
              awk -F', *' -v p="$pid" '$1 == p {print $2}')
        [[ -n $mib && $mib -gt $peak ]] && peak=$mib
        sleep 0.2
    done
    wait "$pid"
    local rc=$?
    cat "$out"
    [[ $rc -ne 0 ]] && { tail -n 3 "$work/run.err" >&2; echo "VRAM_MIB failed"; return 1; }
    echo "VRAM_MIB $peak"
}

# The GPU memory of a with_vram run, from its output on stdin.
vram_of() { sed -n 's/^VRAM_MIB //p'; }

# moevm's MOEVM_LOG=info lines on where decode's host time went (with_vram keeps stderr in
# $work/run.err): printed, and the last host-routed one (engine/forward/forward_cuda_laps.c)
# as "tokens=.. queue_us=.. observe_us=.. device_us=.. policies_us=.. ask_us=.. copies_us=..
# cpu_us=.. cpu_plan_us=.. cpu_scale=.. syncs=.. evict_us=.. remap_us=.. mib=.. accesses=..
# hits=.. in_place=..", for a RESULT decode_host line (observe_us: the step before shown to
# the policies while the device computes; policies_us: the rest of the policies and the
# routing, the device idle; cpu_plan_us: what the cost model planned
# for the CPU's experts, cpu_us what they took, cpu_scale the correction the engine has
# made to the model's CPU times from such measurements; the last three: a token's expert
# accesses, its hits and its reads in place at the homes).
decode_laps() {
    grep -h 'decode: [0-9]* tokens routed' "$1" >&2
    laps_fields "$1" 'decode: [0-9]* tokens routed by the host' tokens $LAP_FIELDS
}

# The same for the prompt batches (pp512 at any budget, routed by the host a layer at a
# time), "batches=.. tokens=.." (the tokens a batch) then decode_laps' fields a batch, for a
# RESULT prefill_host line: what of a batch the device waits for the host.
prefill_laps() {
    laps_fields "$1" 'prompt: [0-9]* batches of [0-9.]* tokens routed by the host' \
        batches tokens $LAP_FIELDS
}

# The prompt batches routed on the device (every expert resident: engine/forward/
# forward_cuda_prompt.c) as "batches=.. tokens=.. queue_us=.. replay_us=.. wait_us=..", for a
# RESULT prefill_device line, in us a batch: queueing its MoE layers' routing and stage,
# replaying them to the policies while the device computes, and waiting for a layer's stage.
prefill_routed() {
    laps_fields "$1" 'prompt: [0-9]* batches of [0-9.]* tokens routed on the device' \
        batches tokens queue_us replay_us wait_us
}

# The host-time split's fields after its count (forward_cuda_laps.c's line, in its order).
LAP_FIELDS="queue_us observe_us device_us policies_us ask_us copies_us cpu_us cpu_plan_us
            cpu_scale syncs evict_us remap_us mib accesses hits in_place"

# laps_fields FILE LINE NAME...: the numbers of FILE's last line that begins as LINE (a grep
# pattern), as "NAME=number" pairs in their order; nothing unless there is one a name.
laps_fields() {
    local file=$1 line=$2
    shift 2
    grep -o "$line.*" "$file" | tail -n 1 | grep -o '[0-9][0-9.]*' | paste -sd' ' |
        awk -v names="$*" 'BEGIN { n = split(names, name, " ") }
                           NF == n { for (i = 1; i <= n; i++)
                                         printf "%s%s=%s", (i > 1 ? " " : ""), name[i], $i }'
}

# A packed space's upload (vmm/upload.c's MOEVM_LOG=info line) in the last run's stderr, as
# "experts=.. mib=.. ms=.. gbps=..": the first request's wait for every expert.
packed_upload() {
    grep -o 'packed space: [0-9]* experts ([0-9.]* MiB) copied up in [0-9.]* ms ([0-9.]* GB/s)' \
        "$1" | tail -n 1 | grep -o '[0-9][0-9.]*' | paste -sd' ' |
        awk 'NF == 4 { printf "experts=%s mib=%s ms=%s gbps=%s", $1, $2, $3, $4 }'
}

# The same for the last decode routed on the device (engine/forward/forward_cuda_route.c),
# as "tokens=.. queue_us=.. policies_us=.. wait_us=.. between_us=..", and at a budget
# (MOEVM_BUDGET_ROUTING=in-place or read-through) the context's "accesses=.. hits=..
# in_place=.. cpu=.. admitted=.. prefetched=.. kept=.. slab_reads=.. before_us=.. replay_us=..
# pool_us=..", for a RESULT decode_device line (cpu: misses MOEVM_DEVICE_CPU gave the CPU;
# kept: misses read-through kept as read;
# slab_reads: hits read at those slabs before their map; before_us: of policies_us, what
# comes before a token is queued, the rest while the device computes; of it, replay_us the
# token before's replay or read-through's early landing, pool_us read-through's pool, the
# rest the table).
decode_routed() {
    local host split
    host=$(grep -o 'decode: [0-9]* tokens routed on the device.*' "$1" | tail -n 1 |
        sed 's/CUDA graphs: [0-9]* built ([0-9]* programmatic edges), [0-9]* kernel nodes updated; //' |
        grep -o '[0-9][0-9.]*' | paste -sd' ' |
        awk 'NF == 5 { printf "tokens=%s queue_us=%s policies_us=%s wait_us=%s between_us=%s",
                       $1, $2, $3, $4, $5 }')
    split=$(grep -o 'decode at a budget routed on the device: .*' "$1" | tail -n 1 |
        grep -o '[0-9][0-9.]*' | paste -sd' ' |
        awk 'NF == 11 { printf " accesses=%s hits=%s in_place=%s cpu=%s admitted=%s" \
                               " prefetched=%s kept=%s slab_reads=%s before_us=%s replay_us=%s" \
                               " pool_us=%s", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }')
    if [[ -n $host ]]; then echo "$host$split"; fi
}

# llama-bench's markdown rows -> "pp512=.. tg128=..".
llama_speeds() {
    awk -F'|' 'NF > 3 && $(NF-2) ~ /(pp|tg)[0-9]+/ { t = $(NF-2); gsub(/ /, "", t); split($(NF-1), v, " ");
               printf "%s=%s ", t, v[1] }'
}

# The model file $work/NAME-TYPE[-LAYERSL].gguf for "NAME:TYPE[:LAYERS]" (mkmodel's preset,
# type and, when given, its first LAYERS blocks), made once.
llama_model() {
    local name type layers model
    IFS=: read -r name type layers <<<"$1"
    model=$work/$name-$type${layers:+-${layers}L}.gguf
    [[ -f $model ]] || build-gpu/moevm mkmodel --preset "$name" --type "$type" \
        ${layers:+--layers "$layers"} -o "$model" >"$work/mkmodel.txt" 2>&1 ||
        { tail -n 3 "$work/mkmodel.txt" >&2; return 1; }
    echo "$model"
}

# The MoE layer count of mkmodel's preset NAME, cut to LAYERS blocks when given ($2), from
# moevm trace gen's summary line.
model_layers() {
    local n
    n=$(build-gpu/moevm trace gen --shape "$1" ${2:+--layers "$2"} --tokens 16 \
        -o "$work/layers.jsonl" | sed -n 's/.*(\([0-9]*\) layers.*/\1/p')
    [[ -n $n ]] && echo "$n"
}

# The GPU's measured read rate of its own memory, GB/s: vmm_costs section 3, a kernel reading
# 256 MiB of device memory (the bound of bw_frac). Nothing where it could not be measured.
hbm_read_gbs() {
    local bin out gbs
    bin=$(find build-gpu -type f -name vmm_costs -perm -u+x | head -n 1)
    [[ -n $bin ]] || { echo "llamacpp_lib.sh: no vmm_costs under build-gpu/" >&2; return 0; }
    out=$("$bin" --only 3 --reps 20 2>&1)
    gbs=$(awk '$1 == "RESULT" && $2 == "kernel_read_device_256MiB" { print $3 }' <<<"$out")
    # runs K and L of session 79 measured nothing here, silently: say why next time
    [[ -n $gbs ]] || { echo "vmm_costs --only 3 gave no read rate:"; tail -n 5 <<<"$out"; } >&2
    echo "$gbs"
}

# "bw_frac=F " for a result's speeds ("pp512=.. tg128=.."): the decode's share of the
# bandwidth bound, tg x the bytes a token reads ($2) / the read rate in GB/s ($3); nothing
# when either is unknown.
bw_frac() {
    [[ -n $2 && -n $3 ]] || return 0
    sed -n 's/.*tg[0-9]*=\([0-9.]*\).*/\1/p' <<<"$1" |
        awk -v a="$2" -v h="$3" '$1 > 0 { printf "bw_frac=%.3f ", $1 * a / (h * 1e9) }'
}

# moevm bench's experts budget of its first table row, in MiB (its "budget GiB" column).
moevm_budget_mib() {
    awk -F'|' '$7 ~ /^ *[0-9.]+ *$/ { printf "%d\n", $7 * 1024 + 0.5; exit }'
}

# The experts' budget (MiB) that gives moevm llama.cpp's GPU memory: its budget less what
# it took beyond llama.cpp's; fails when either figure is missing or nothing is left.
matched_budget_mib() {
    local budget=$1 mine=$2 theirs=$3
    [[ $budget =~ ^[0-9]+$ && $mine =~ ^[0-9]+$ && $theirs =~ ^[0-9]+$ ]] || return 1
    local m=$((budget - (mine - theirs)))
    ((m > 0)) || return 1
    echo "$m"
}
