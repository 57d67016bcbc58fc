/*
 * bench_cpu_attention: one decode step's attention over an F32, an F16 and a Q8_0 KV cache
 * (engine/forward/kv_cache.h), one thread, at each SIMD level. A step of one block is every query
 * head attending over the positions so far, keys and values read from rows of kv_dim
 * elements as the engine lays them out: OLMoE's 16 heads of 128 without grouping, a head
 * at a time and 8 side by side (mvm_k_attn_block's n_kv: each row's 8 heads read in one
 * stream, as the engine's decode does when the threads have enough units), and
 * Qwen3-30B-A3B's 32 query heads over 4 KV heads of 128, computed one head at a time and in
 * groups of 8 (mvm_k_attn_heads: each row read once for the group, as the engine does when
 * the threads have enough groups); and a prompt's 32 tokens of OLMoE's shape at the end of
 * the positions (mvm_k_attn_block: each row read once for the 32, as the engine's prefill
 * does). Decode reads the whole cache once per step (or per head),
 * so at long contexts its speed is the bytes read over the memory bandwidth; short contexts
 * stay in cache and show the kernels' arithmetic. Ratios within one run are what mean
 * anything on these machines.
 *
 * usage: bench_cpu_attention [max positions (default 32768)]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/cpu/bench_util.h"
#include "kernels/cpu/kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

struct shape {
    const char *name;
    size_t n_head, n_head_kv, head_dim, n_q; /* n_q: query heads per KV head in a call */
    size_t n_kv;                              /* KV heads per call, side by side */
    size_t n_tok;                             /* tokens per call: the step's last n_tok */
};

/* Seconds of one step over n_pos positions (best of enough repetitions for ~0.2 s). */
static double step_s(const struct shape *s, enum mvm_wtype kv, const void *kc, const void *vc,
                     size_t n_pos, const float *q, float *scratch, float *out)
{
    const size_t kv_dim = s->n_head_kv * s->head_dim, group = s->n_head / s->n_head_kv;
    const float scale = 1.0f / sqrtf((float)s->head_dim);
    double best = INFINITY, spent = 0;
    for (int r = 0; r < 3 || spent < 0.2; r++) {
        const double t0 = mvm_bench_thread_s();
        for (size_t h = 0; h < s->n_head; h += s->n_q * s->n_kv) {
            const size_t off = mvm_k_row_bytes(kv, (h / group) * s->head_dim);
            const size_t qd = s->n_head * s->head_dim;
            uint32_t pos[64];
            for (size_t i = 0; i < s->n_tok; i++)
                pos[i] = (uint32_t)(n_pos - s->n_tok + 1 + i);
            mvm_k_attn_block(q + h * s->head_dim, qd, s->n_tok, s->n_q, s->n_kv, pos, kv,
                             (const uint8_t *)kc + off, (const uint8_t *)vc + off, kv_dim,
                             s->head_dim, scale, NULL, scratch, out + h * s->head_dim, NULL);
        }
        const double t = mvm_bench_thread_s() - t0;
        best = t < best ? t : best;
        spent += t;
    }
    return best;
}

int main(int argc, char **argv)
{
    const size_t max_pos = argc > 1 ? strtoull(argv[1], NULL, 10) : 32768;
    if (max_pos < 512) {
        fprintf(stderr, "usage: bench_cpu_attention [max positions >= 512]\n");
        return 2;
    }
    static const struct shape shapes[] = {
        {"16 x 128 (OLMoE)", 16, 16, 128, 1, 1, 1},
        {"16 x 128 (OLMoE), every head at once", 16, 16, 128, 1, 16, 1},
        {"32 / 4 x 128 (Qwen3-30B-A3B), a head at a time", 32, 4, 128, 1, 1, 1},
        {"32 / 4 x 128 (Qwen3-30B-A3B), groups of 8", 32, 4, 128, 8, 1, 1},
        {"32 / 4 x 128 (Qwen3-30B-A3B), every group at once", 32, 4, 128, 8, 4, 1},
        {"16 x 128 (OLMoE), a prompt's 32 tokens", 16, 16, 128, 1, 1, 32}};
    printf("| level | heads (query / KV x dim) | positions | KV cache MiB f32 | f32 us | "
           "f16 us | f16 / f32 | f16 GB/s | q8_0 us | q8_0 / f16 | q8_0 GB/s |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    /* every level but those whose float kernels are the level below's */
    for (int lv = MVM_SIMD_COUNT - 1; lv >= 0; lv--) {
        if (lv == MVM_SIMD_AVX512VNNI || lv == MVM_SIMD_DOTPROD ||
            mvm_k_simd_use((enum mvm_simd)lv) != 0)
            continue;
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const struct shape *s = &shapes[si];
            const size_t kv_dim = s->n_head_kv * s->head_dim, n = max_pos * kv_dim;
            const size_t nq = s->n_tok * s->n_head * s->head_dim;
            float *x = malloc(n * sizeof *x), *q = malloc(nq * 4);
            float *scratch = malloc(s->n_tok * s->n_q * s->n_kv * max_pos * 4);
            float *out = malloc(nq * 4);
            void *k32 = aligned_alloc(64, n * 4), *v32 = aligned_alloc(64, n * 4);
            void *k16 = aligned_alloc(64, n * 2), *v16 = aligned_alloc(64, n * 2);
            const size_t b8 = (mvm_k_row_bytes(MVM_W_Q8_0, n) + 63) & ~(size_t)63;
            void *k8 = aligned_alloc(64, b8), *v8 = aligned_alloc(64, b8);
            if (!x || !q || !scratch || !out || !k32 || !v32 || !k16 || !v16 || !k8 || !v8) {
                fprintf(stderr, "bench_cpu_attention: out of memory for %zu positions\n",
                        max_pos);
                return 1;
            }
            for (size_t i = 0; i < nq; i++)
                q[i] = mvm_bench_frand(&rng);
            for (int which = 0; which < 2; which++) {
                for (size_t i = 0; i < n; i++)
                    x[i] = mvm_bench_frand(&rng);
                mvm_k_quantize(MVM_W_F32, x, which ? v32 : k32, n);
                mvm_k_quantize(MVM_W_F16, x, which ? v16 : k16, n);
                mvm_k_quantize(MVM_W_Q8_0, x, which ? v8 : k8, n);
            }
            for (size_t n_pos = 512; n_pos <= max_pos; n_pos *= 4) {
                const double t32 = step_s(s, MVM_W_F32, k32, v32, n_pos, q, scratch, out);
                const double t16 = step_s(s, MVM_W_F16, k16, v16, n_pos, q, scratch, out);
                const double t8 = step_s(s, MVM_W_Q8_0, k8, v8, n_pos, q, scratch, out);
                const double mib = 2.0 * (double)n_pos * kv_dim * 4 / 1048576.0;
                printf("| %s | %s | %zu | %.1f | %.0f | %.0f | %.2f | %.1f | %.0f | %.2f | "
                       "%.1f |\n",
                       mvm_k_simd_name((enum mvm_simd)lv), s->name, n_pos, mib, t32 * 1e6,
                       t16 * 1e6, t16 / t32, mib / 2 * 1048576.0 / t16 / 1e9, t8 * 1e6,
                       t8 / t16, mib * 17 / 64 * 1048576.0 / t8 / 1e9);
            }
            free(x), free(q), free(scratch), free(out), free(k32), free(v32), free(k16),
                free(v16), free(k8), free(v8);
        }
    }
    return 0;
}
