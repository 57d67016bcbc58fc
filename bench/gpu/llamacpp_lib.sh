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

# llama-bench's markdown rows -> "pp512=.. tg128=..".
llama_speeds() {
    awk -F'|' 'NF > 3 && $(NF-2) ~ /(pp|tg)[0-9]+/ { t = $(NF-2); gsub(/ /, "", t); split($(NF-1), v, " ");
               printf "%s=%s ", t, v[1] }'
}

# The model file $work/NAME-TYPE.gguf for "NAME:TYPE" (mkmodel's preset and type), made once.
llama_model() {
    local name=${1%%:*} type=${1##*:} model
    model=$work/$name-$type.gguf
    [[ -f $model ]] || build-gpu/moevm mkmodel --preset "$name" --type "$type" -o "$model" \
        >"$work/mkmodel.txt" 2>&1 || { tail -n 3 "$work/mkmodel.txt" >&2; return 1; }
    echo "$model"
}

# The layer count of mkmodel's preset NAME (from moevm trace gen's summary line).
model_layers() {
    local n
    n=$(build-gpu/moevm trace gen --shape "$1" --tokens 16 -o "$work/layers.jsonl" |
        sed -n 's/.*(\([0-9]*\) layers.*/\1/p')
    [[ -n $n ]] && echo "$n"
}
