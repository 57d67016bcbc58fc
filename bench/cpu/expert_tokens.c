/*
 * The experts' share of MoE prefill, by the tokens each expert receives: a prompt of P tokens
 * routed top-k among E experts gives each about P·k/E (OLMoE at pp64: 8, at pp512: 64), so
 * the batch kernels live or die at a handful of tokens, not at the 32 a dense matmul has.
 *
 *   bench_cpu_expert_tokens [reps [format [counts [MiB [stride]]]]]
 *       reps    best of reps (default 3)
 *       format  q4_K (gate/up Q4_K, down Q6_K: llama.cpp's Q4_K_M), q4_K/q4_K, q5_K (down
 *               Q6_K: Q5_K_M), q6_K, q8_0, q3_K, q2_K, iq4_xs, iq3_xxs, iq2_xxs, iq2_xs,
 *               iq2_s, iq3_s, iq1_s, iq1_m (default q4_K); a K format +
 *               "+tiles" (q4_K+tiles)
 *               in the tiled layout a CPU-only run gets (kernels/cpu/kernels.h)
 *       counts  comma list of tokens per expert (default 1,2,4,6,8,12,16,24,32,64)
 *       MiB     the experts' bytes (default 256: the weights stream from memory, as in
 *               prefill; 1 keeps them in L2, which measures the arithmetic alone)
 *       stride  floats from one token's output row to the next (default the engine's,
 *               mvm_k_row_floats(n_embd); 2048, rows 8 KiB apart, shows what that avoids)
 *
 * One thread runs mvm_k_expert_ffn_batch over experts of OLMoE-1B-7B's shape (n_embd 2048,
 * n_ff 1024) that fill MiB (at least one expert), each with `count` tokens of distinct
 * random activations, enough passes over them for a tenth of a second, at the SIMD level
 * MOEVM_CPU_SIMD names (default the best). Prints GMAC/s (three
 * n_embd x n_ff products per token) and the weight bytes read per second; times are the
 * thread's CPU time. docs/perf/cpu.md records runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cpu/bench_util.h"
#include "kernels/cpu/kernels.h"

#define N_EMBD 2048
#define N_FF 1024
#define MAX_TOK 256

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Whether `s` names a format, with "+tiles" for the CPU's tiled layout; *f set. */
static int parse_format(const char *s, mvm_k_expert_fmt *f)
{
    char name[32];
    const char *plus = strchr(s, '+');
    const int tiles = plus && strcmp(plus, "+tiles") == 0;
    if (plus && !tiles)
        return 0;
    snprintf(name, sizeof name, "%.*s", plus ? (int)(plus - s) : (int)strlen(s), s);
    static const struct {
        const char *name;
        enum mvm_wtype gate_up, down;
    } known[] = {{"q4_K", MVM_W_Q4_K, MVM_W_Q6_K},
                 {"q4_K/q4_K", MVM_W_Q4_K, MVM_W_Q4_K},
                 {"q5_K", MVM_W_Q5_K, MVM_W_Q6_K},
                 {"q6_K", MVM_W_Q6_K, MVM_W_Q6_K},
                 {"q8_0", MVM_W_Q8_0, MVM_W_Q8_0},
                 {"q3_K", MVM_W_Q3_K, MVM_W_Q3_K},
                 {"q2_K", MVM_W_Q2_K, MVM_W_Q2_K},
                 {"iq4_xs", MVM_W_IQ4_XS, MVM_W_IQ4_XS},
                 {"iq3_xxs", MVM_W_IQ3_XXS, MVM_W_IQ3_XXS},
                 {"iq2_xxs", MVM_W_IQ2_XXS, MVM_W_IQ2_XXS},
                 {"iq2_xs", MVM_W_IQ2_XS, MVM_W_IQ2_XS},
                 {"iq2_s", MVM_W_IQ2_S, MVM_W_IQ2_S},
                 {"iq3_s", MVM_W_IQ3_S, MVM_W_IQ3_S},
                 {"iq1_s", MVM_W_IQ1_S, MVM_W_IQ1_S},
                 {"iq1_m", MVM_W_IQ1_M, MVM_W_IQ1_M}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(name, known[i].name) == 0) {
            *f = (mvm_k_expert_fmt){known[i].gate_up, known[i].down, MVM_GLU_SILU, tiles};
            return !tiles || mvm_k_expert_tiles_ok(*f);
        }
    return 0;
}

static volatile float sink;

int main(int argc, char **argv)
{
    if (mvm_bench_simd_from_env("bench_cpu_expert_tokens") != 0)
        return 1;
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    mvm_k_expert_fmt f;
    if (reps < 1 || !parse_format(argc > 2 ? argv[2] : "q4_K", &f)) {
        fprintf(stderr, "usage: bench_cpu_expert_tokens [reps >= 1 "
                        "[q4_K|q4_K/q4_K|q5_K|q6_K|q8_0|q3_K|q2_K|iq4_xs|"
                        "iq3_xxs|iq2_xxs|iq2_xs|iq2_s|iq3_s|iq1_s|iq1_m"
                        "[+tiles] "
                        "[counts, e.g. 1,8,32]]]\n");
        return 1;
    }
    const char *counts = argc > 3 ? argv[3] : "1,2,4,6,8,12,16,24,32,64";
    const size_t G = mvm_k_expert_group_channels(f), groups = N_FF / G;
    const size_t group = mvm_k_expert_group_bytes(f, N_EMBD), eb = group * groups;
    const long mib = argc > 4 ? strtol(argv[4], NULL, 10) : 256;
    if (mib < 1 || mib > 65536) {
        fprintf(stderr, "bench_cpu_expert_tokens: MiB '%s' outside 1..65536\n", argv[4]);
        return 1;
    }
    const size_t experts = ((size_t)mib << 20) / eb ? ((size_t)mib << 20) / eb : 1;
    const size_t passes = (256ull << 20) / (experts * eb) ? (256ull << 20) / (experts * eb) : 1;
    const size_t as = mvm_k_act_bytes(f.gate_up, N_EMBD);
    uint8_t *w = aligned_alloc(64, experts * eb);
    uint8_t *acts = aligned_alloc(64, MAX_TOK * as);
    const long stride = argc > 5 ? strtol(argv[5], NULL, 10) : (long)mvm_k_row_floats(N_EMBD);
    if (stride < N_EMBD || stride > 1 << 20) {
        fprintf(stderr, "bench_cpu_expert_tokens: stride '%s' outside %d..%d\n", argv[5], N_EMBD,
                1 << 20);
        return 1;
    }
    float *out = malloc(MAX_TOK * (size_t)stride * sizeof *out), weights[MAX_TOK], x[N_EMBD];
    if (!w || !acts || !out) {
        fprintf(stderr, "bench_cpu_expert_tokens: out of memory\n");
        return 1;
    }
    /* llama.cpp's row-major slices, packed as the engine packs them (tiled or not): random
     * bytes in the tiled layout's place would give its scales garbage (inf, NaN) */
    const size_t gb = N_FF * mvm_k_row_bytes(f.gate_up, N_EMBD);
    uint8_t *slices = malloc(2 * gb + N_EMBD * mvm_k_row_bytes(f.down, N_FF));
    if (!slices) {
        fprintf(stderr, "bench_cpu_expert_tokens: out of memory\n");
        return 1;
    }
    for (size_t e = 0; e < experts; e++) {
        mvm_bench_fill_rows(f.gate_up, slices, 2 * N_FF, N_EMBD, &rng);
        mvm_bench_fill_rows(f.down, slices + 2 * gb, N_EMBD, N_FF, &rng);
        mvm_k_expert_pack(f, slices, slices + gb, slices + 2 * gb, N_EMBD, N_FF, w + e * eb);
    }
    free(slices);
    for (size_t i = 0; i < MAX_TOK; i++) {
        for (size_t j = 0; j < N_EMBD; j++)
            x[j] = mvm_bench_frand(&rng);
        mvm_k_prepare_act(f.gate_up, x, acts + i * as, N_EMBD);
        weights[i] = 0.125f;
    }
    printf("expert %s/%s, n_embd %d, n_ff %d, %zu experts (%.0f MiB), 1 thread, level %s\n\n",
           mvm_k_wtype_name(f.gate_up), mvm_k_wtype_name(f.down), N_EMBD, N_FF, experts,
           (double)(experts * eb) / (1 << 20), mvm_k_simd_name(mvm_k_simd_current()));
    printf("| tokens per expert | GMAC/s | weight GB/s |\n|---|---|---|\n");
    for (const char *p = counts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        const long n = strtol(p, NULL, 10);
        if (n < 1 || n > MAX_TOK) {
            fprintf(stderr, "bench_cpu_expert_tokens: tokens per expert '%ld' outside 1..%d\n", n,
                    MAX_TOK);
            return 1;
        }
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            memset(out, 0, (size_t)n * (size_t)stride * sizeof *out);
            double s = mvm_bench_thread_s();
            for (size_t e = 0; e < experts * passes; e++)
                mvm_k_expert_ffn_batch(f, w + e % experts * eb, N_EMBD, acts, as, weights, (size_t)n, out,
                                       (size_t)stride, 0, groups);
            s = mvm_bench_thread_s() - s;
            best = s < best ? s : best;
        }
        sink = out[N_EMBD / 2];
        printf("| %ld | %.1f | %.2f |\n", n,
               3.0 * N_EMBD * N_FF * (double)n * (double)(experts * passes) / best / 1e9,
               (double)(experts * passes * eb) / best / 1e9);
        fflush(stdout);
    }
    free(w), free(acts), free(out);
    return 0;
}
