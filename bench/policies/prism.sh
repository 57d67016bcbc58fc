#!/usr/bin/env bash
# Prism's migrations, bounded to land (issue 53 item 4), in one call from the repository root:
#   bash bench/policies/prism.sh [OUTDIR] [MOEVM]  (defaults docs/perf/policies, ./build/moevm)
# A DeepSeek-V2-Lite-shaped trace of 4,096 tokens in 3 requests (one per server), a new task
# every 1,024 tokens (seed 3); 3 servers with 40% of the experts' bytes each, a placement
# every 128 tokens, cost rtx3090, links of 0.1, 1 and 10 GB/s. Uniform; prism with its
# migrations bounded to one period's time (land=1, the default); prism moving to each
# candidate at once (land=0, the paper's).
# Writes OUTDIR/prism.txt and prints `RESULT bench=prism_land ...` lines.
. "$(dirname "$0")/common.sh" "$@"
"$moevm" trace gen --shape deepseek-v2-lite --tokens 4096 --requests 3 --shift-every 1024 \
    --seed 3 -o "$tmp/trace.jsonl" >/dev/null
{
echo "== $(date -u +%Y-%m-%d), $(nproc) cores; $moevm sim --servers 3 --server-mem 40% --period 128 --cost rtx3090"
for bw in 0.1 1 10; do
    echo "== links $bw GB/s"
    "$moevm" sim --trace "$tmp/trace.jsonl" --servers 3 --server-mem 40% --period 128 \
        --cost rtx3090 --link-bw $bw --place 'uniform;prism;prism{land=0}' | tee "$tmp/table"
    awk -v bw=$bw '
        /^(uniform|prism)/ {
            printf "RESULT bench=prism_land link_gbps=%s place=%s local_pct=%s ms_per_token=%s migrations=%s migrated_gb=%s\n", bw, $1, $2, $3, $4, $5
        }' "$tmp/table"
done
} | tee "$out/prism.txt"
