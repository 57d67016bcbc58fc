#!/usr/bin/env bash
# One call, from the repository root on a machine with an NVIDIA GPU:
#   bash tests/gpu/forward.sh [preset for the speed run (default olmoe-1b-7b)]
# The engine's forward pass on the GPU (engine/forward/forward_cuda.c) for real:
#   1. tests/ref/check_forward.py with MOEVM_BACKEND=cuda: every architecture and weight type
#      against the NumPy reference, as CI checks it over the fake driver;
#   2. the same greedy text on the CPU and the GPU for a prompt, and on the GPU with decode
#      routed on the device (a CUDA graph, launch by launch) and by the host; 2b, the same
#      with a long prompt on the tensor cores (cuBLAS), on the kernels, and with the
#      experts on the int8 tensor cores (MOEVM_MMQ=on, which must give the kernels' text),
#      and its batches routed on the device (MOEVM_PROMPT_ROUTING, the host's text);
#      2c, attention on the F16 tensor cores (MOEVM_ATTN_MMA=on, kernels/cuda/attention_mma.cu)
#      against the CUDA cores' kernel: grouped queries and DeepSeek-V2-Lite's latent rows
#      (its shape cut to 2 blocks), a long prompt (several splits) and its decode;
#   3. speed: `moevm run` of a real-shaped model (random weights, made here by mkmodel) on the
#      CPU, on the GPU with every expert resident (decode routed on the device as a graph,
#      launch by launch, and by the host), and on the GPU with half the experts'
#      bytes as its budget (homes unmapped, the default: every step waits for its copies,
#      in rounds where they do not fit), then with the homes mapped (MOEVM_HOME_MAP=on:
#      reads in place, each page of a move its own remap), with the assign modules greedy
#      (experts also on the CPU threads) and gpu's zero-copy (homes mapped), and at a tenth
#      of the bytes with and without the homes mapped, and with greedy; and the same model
#      as Q4_K_M on the CPU and the GPU (full and half budget);
#      then DeepSeek-V2-Lite's shape (8 blocks), GLM-4.5-Air's (3), MiniMax-M2's (3) and
#      gpt-oss-20b's (3, MXFP4 experts) on the CPU and the GPU;
#      Then the defaults (backend and budget automatic) on a device another process fills but
#      for 6 GiB: the GPU must be chosen, and the context must fit beside the budget;
#   4. `moevm calibrate` of that model on the GPU, and greedy at half the budget again with
#      the measured costs (--cost) instead of the h100 preset's.
# FORWARD_STEPS picks steps (default "1 2 2b 2c 3 3b 3c 3d 4"). All of them took more than the
# 10 minutes of one device call on an H100 (2026-11-23: the big models' mkmodel), so run
# them in two calls there, "1 2 3 3b" then "3c 3d 4" (a warm machine keeps the build and
# the models in between). With $OUT set, the output is also written to
# $OUT/gpu_forward.txt. Results go into docs/perf/engine.md.
set -euo pipefail

cd "$(dirname "$0")/../.."

preset=${1:-olmoe-1b-7b}
steps=" ${FORWARD_STEPS:-1 2 2b 2c 3 3b 3c 3d 4} "
want() { [[ $steps == *" $1 "* ]]; }
source bench/gpu/deps.sh || exit 1
log=$(moevm_out_log gpu_forward.txt)
work=${TMPDIR:-/tmp}/moevm-gpu-forward
mkdir -p "$work"
{
    moevm_gpu_build moevm_cli
    moevm=build-gpu/moevm
    nvidia-smi -L
    model="$work/$preset.gguf"
    if want 3 || want 3d || want 4; then
        [[ -f "$model" ]] || "$moevm" mkmodel --preset "$preset" --type q8_0 -o "$model"
    fi
    run() { echo "-- $*"; env "$@" "$moevm" run -m "$model" -p "The history of the" -n 64 \
        --temp 0 --batch 32 2>&1 >/dev/null | tail -n 3; }
    # a model on the CPU, then on the GPU with all its experts' bytes and with half
    cpu_gpu_half() { for env in MOEVM_BACKEND=host "MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=100%" \
        "MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50%"; do
        echo "-- $2 $env"
        env $env "$moevm" run -m "$1" -p "The history of the" -n 64 --temp 0 --batch 32 \
            2>&1 >/dev/null | tail -n 3
    done; }
    if want 1; then
        echo "== 1. check_forward.py on the GPU"
        MOEVM_BACKEND=cuda python3 tests/ref/check_forward.py --moevm "$moevm" \
            --workdir "$work/ref" || echo "check_forward on the GPU FAILED"
    fi
    if want 2; then
        echo "== 2. greedy text, CPU and GPU"
        "$moevm" mkmodel --preset tiny --arch qwen2moe --type q8_0 -o "$work/tiny.gguf"
        for b in host cuda; do
            MOEVM_BACKEND=$b "$moevm" run -m "$work/tiny.gguf" -p "It was the best of times" \
                -n 24 --temp 0 >"$work/text.$b"
        done
        if cmp -s "$work/text.host" "$work/text.cuda"; then echo "same text"; else
            echo "TEXT DIFFERS"; diff "$work/text.host" "$work/text.cuda" || true; fi
        # decode routed on the device (forward_cuda_route.c), as a CUDA graph and launch by
        # launch, against the host's routing: the same text
        for mode in graph launches off; do
            MOEVM_BACKEND=cuda MOEVM_DEVICE_ROUTING=$mode "$moevm" run -m "$work/tiny.gguf" \
                -p "It was the best of times" -n 24 --temp 0 >"$work/text.$mode"
        done
        # and the graph's kernels by programmatic edges (MOEVM_PDL=on: ptx_pdl.c), whose
        # every kernel must still wait for the one before: a missed wait shows as other text
        MOEVM_BACKEND=cuda MOEVM_PDL=on MOEVM_LOG=info "$moevm" run -m "$work/tiny.gguf" \
            -p "It was the best of times" -n 24 --temp 0 >"$work/text.pdl" 2>"$work/pdl.err"
        grep -o 'CUDA graphs: [0-9]* built ([0-9]* programmatic edges)' "$work/pdl.err" || true
        for mode in graph launches pdl; do
            if cmp -s "$work/text.off" "$work/text.$mode"; then echo "same text ($mode)"; else
                echo "TEXT DIFFERS ($mode)"; diff "$work/text.off" "$work/text.$mode" || true; fi
        done
        # at a quarter of the experts' bytes, the offloaded decode's paths (misses copied
        # with the device waiting for them, or the host, or read where their copies land
        # before their maps; DALI's CPU/GPU split; routed on the device, misses read in
        # place, and kept as read; and with the CPU's share of them, by a cost model whose
        # CPU wins, forward_cuda_cpu.c; every expert read in its slot, host-routed and
        # routed on the device: MOEVM_SLOTS, on a model whose quarter fills whole 2 MiB
        # granules, as a slot space's budget must: the tiny one's is 256 KiB): the CPU's text
        cost=$work/cpu-wins.json
        echo '{"cpu_mem_bw": 1000, "cpu_flops": 100000, "cpu_setup": 1, "zerocopy_bw": 0.01}' \
            >"$cost"
        cpu_wins=MOEVM_BUDGET_ROUTING=read-through,MOEVM_DEVICE_CPU=on,MOEVM_COST=$cost
        "$moevm" mkmodel --preset tiny --arch qwen2moe --type q8_0 --experts 16 \
            --expert-ff 512 --embd 512 -o "$work/small.gguf" >/dev/null
        MOEVM_BACKEND=host "$moevm" run -m "$work/small.gguf" -p "It was the best of times" \
            -n 24 --temp 0 >"$work/small.host"
        for v in default MOEVM_LOAD_WAIT=host MOEVM_LOAD_WAIT=device-view MOEVM_ASSIGN=greedy \
            MOEVM_BUDGET_ROUTING=in-place MOEVM_BUDGET_ROUTING=read-through "$cpu_wins" \
            MOEVM_SLOTS=on MOEVM_SLOTS=on,MOEVM_BUDGET_ROUTING=read-through; do
            vars=${v/#default/} m=tiny
            [[ $v == MOEVM_SLOTS=* ]] && m=small
            env MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=25% ${vars//,/ } \
                "$moevm" run -m "$work/$m.gguf" -p "It was the best of times" -n 24 \
                --temp 0 >"$work/text.b25"
            ref=$work/text.host
            [[ $m == small ]] && ref=$work/small.host
            if cmp -s "$ref" "$work/text.b25"; then echo "same text (25%, $v, $m)"; else
                echo "TEXT DIFFERS (25%, $v, $m)"; diff "$ref" "$work/text.b25" || true; fi
        done
    fi
    if want 2b; then
        # real cuBLAS under the tensor-core path (forward_cuda_gemm.c): a 100-token prompt
        # in one batch, with every product of 2+ rows on it and with none (MOEVM_MMQ=off:
        # its Q8_0 experts would take the int8 tensor cores by default); F16 rounding
        # may move a near tie, so it says where the greedy texts part, if they do
        echo "== 2b. tensor-core prefill (MOEVM_GEMM_ROWS), greedy text against the kernels'"
        [[ -f "$work/tiny.gguf" ]] ||
            "$moevm" mkmodel --preset tiny --arch qwen2moe --type q8_0 -o "$work/tiny.gguf"
        long=$(printf 'It was the best of times, it was the worst of times, %.0s' {1..9})
        for rows in 0 2; do
            MOEVM_BACKEND=cuda MOEVM_GEMM_ROWS=$rows MOEVM_MMQ=off "$moevm" run \
                -m "$work/tiny.gguf" -p "$long" -n 24 --temp 0 --batch 128 \
                >"$work/gemm.$rows" 2>"$work/gemm.$rows.err"
            tail -n 1 "$work/gemm.$rows.err"
        done
        cmp "$work/gemm.0" "$work/gemm.2" && echo "same text" || echo "texts part there"
        # the int8 tensor cores' experts (MOEVM_MMQ, kernels/cuda/mmq.cu): each block's
        # float is the kernels', so the text must be the kernels' own
        MOEVM_BACKEND=cuda MOEVM_GEMM_ROWS=0 MOEVM_MMQ=on "$moevm" run -m "$work/tiny.gguf" \
            -p "$long" -n 24 --temp 0 --batch 128 >"$work/gemm.mmq" 2>"$work/gemm.mmq.err"
        tail -n 1 "$work/gemm.mmq.err"
        if cmp -s "$work/gemm.0" "$work/gemm.mmq"; then echo "same text (mmq)"; else
            echo "TEXT DIFFERS (mmq)"; diff "$work/gemm.0" "$work/gemm.mmq" || true; fi
        # the prompt's batches of 32 routed on the device (engine/forward/forward_cuda_prompt.c:
        # the first asks every expert resident, the others route there), by default, against
        # the host's routing: the same choices, so the same text
        for r in host device; do
            MOEVM_BACKEND=cuda MOEVM_PROMPT_ROUTING=$r MOEVM_LOG=info "$moevm" run \
                -m "$work/tiny.gguf" -p "$long" -n 24 --temp 0 --batch 32 \
                >"$work/prompt.$r" 2>"$work/prompt.$r.err"
        done
        grep -h 'prompt: .* routed on the device' "$work/prompt.device.err" || true
        if cmp -s "$work/prompt.host" "$work/prompt.device"; then
            echo "same text (prompt routed on the device)"; else
            echo "TEXT DIFFERS (prompt routed on the device)"
            diff "$work/prompt.host" "$work/prompt.device" || true; fi
    fi
    if want 2c; then
        # the tensor cores' attention keeps the CUDA cores' precision (hi and lo halves), so
        # its greedy text must be theirs; a long prompt has several splits a query
        echo "== 2c. attention on the tensor cores (MOEVM_ATTN_MMA=on), text against off"
        [[ -f "$work/tiny.gguf" ]] ||
            "$moevm" mkmodel --preset tiny --arch qwen2moe --type q8_0 -o "$work/tiny.gguf"
        "$moevm" mkmodel --preset deepseek-v2-lite --layers 2 --experts 8 --top-k 2 \
            --embd 256 --expert-ff 64 --vocab 600 --type f16 -o "$work/v2l.gguf" >/dev/null
        long=$(printf 'It was the best of times, it was the worst of times, %.0s' {1..30})
        for m in tiny v2l; do
            for mma in off on; do
                MOEVM_BACKEND=cuda MOEVM_ATTN_MMA=$mma "$moevm" run -m "$work/$m.gguf" \
                    -p "$long" -n 48 --temp 0 --batch 32 >"$work/attn.$m.$mma"
            done
            if cmp -s "$work/attn.$m.off" "$work/attn.$m.on"; then echo "same text ($m)"; else
                echo "TEXT DIFFERS ($m)"; diff "$work/attn.$m.off" "$work/attn.$m.on" || true; fi
        done
    fi
    if want 3; then
        echo "== 3. speed, $preset q8_0"
        run MOEVM_BACKEND=host
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=100%
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=100% MOEVM_DEVICE_ROUTING=launches
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=100% MOEVM_DEVICE_ROUTING=off
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50%
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50% MOEVM_HOME_MAP=on
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50% MOEVM_PREDICT=gate
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50% MOEVM_ASSIGN=greedy
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50% MOEVM_HOME_MAP=on MOEVM_ASSIGN=gpu \
            MOEVM_ASSIGN_ARGS=zerocopy=1
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=10%
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=10% MOEVM_HOME_MAP=on
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=10% MOEVM_ASSIGN=greedy
    fi
    if want 3b; then
        echo "== 3b. speed, $preset q4_K_M (the K-quant kernels)"
        kmodel="$work/$preset-q4_K_M.gguf"
        [[ -f "$kmodel" ]] || "$moevm" mkmodel --preset "$preset" --type q4_K_M -o "$kmodel"
        cpu_gpu_half "$kmodel" q4_K_M
    fi
    if want 3c; then
        echo "== 3c. speed, deepseek2, glm4moe, minimax-m2 and gpt-oss shapes (latent attention,"
        echo "   dense blocks first, QK norm over the whole q and k, sinks and windows, MXFP4)"
        for spec in deepseek-v2-lite:8:q8_0 glm-4.5-air:3:q8_0 minimax-m2:3:q8_0 \
            gpt-oss-20b:3:mxfp4; do
            IFS=: read -r name layers type <<<"$spec"
            lmodel="$work/$name-$layers-$type.gguf"
            [[ -f "$lmodel" ]] || "$moevm" mkmodel --preset "$name" --layers "$layers" \
                --type "$type" -o "$lmodel"
            cpu_gpu_half "$lmodel" "$spec"
        done
    fi
    if want 3d; then
        echo "== 3d. the defaults on a GPU the model overfills: another process (torch) holds"
        echo "   all but 6 GiB of the device; moevm must choose the GPU, and its budget must"
        echo "   leave the context room (it took 90% of the free memory before, and the context"
        echo "   could not be had)"
        if python3 -c "import torch" 2>/dev/null; then
            rm -f "$work/held"
            python3 - "$work/held" <<'PY' &
import sys, time, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(max(free - (6 << 30), 1), dtype=torch.uint8, device="cuda")
open(sys.argv[1], "w").write(f"{hold.numel() >> 20} MiB held\n")
time.sleep(600)
PY
            holder=$!
            for _ in $(seq 60); do [[ -s "$work/held" ]] && break; sleep 1; done
            cat "$work/held" 2>/dev/null || echo "the holder did not start"
            run
            kill "$holder" 2>/dev/null || true
            wait "$holder" 2>/dev/null || true
        else
            echo "no torch here: skipped"
        fi
    fi
    if want 4; then
        echo "== 4. calibrate, then greedy with the measured costs"
        MOEVM_BACKEND=cuda "$moevm" calibrate -m "$model" -o "$work/cost.json"
        cat "$work/cost.json"
        if [[ -n "${OUT:-}" ]]; then cp "$work/cost.json" "$OUT/gpu_cost.json"; fi
        run MOEVM_BACKEND=cuda MOEVM_GPU_BUDGET=50% MOEVM_ASSIGN=greedy MOEVM_COST="$work/cost.json"
    fi
} 2>&1 | tee -a "$log"
