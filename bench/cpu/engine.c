/*
 * bench_cpu_engine: decode and prefill speed of the CPU engine on a GGUF model, beside the
 * memory-bandwidth bound. Decoding one token reads every active weight once — attention,
 * router, the top-k experts, the shared expert, the output matrix — so tokens/s can be at
 * most DRAM read bandwidth / active bytes per token. The bandwidth is measured here, in the
 * same run, with the same threads (the widest-vector, software-prefetched read of membw.h
 * over a buffer much larger than the caches), because these machines are noisy and only
 * ratios within one run mean anything.
 *
 * usage: bench_cpu_engine MODEL.gguf [threads (0: the topology's cores)] [decode tokens]
 *                         [prompt tokens] [SIMD levels, e.g. avx512,avx512vnni]
 * With a list of levels they take turns on the same loaded model, three rounds, and each
 * level's best prefill and decode are printed (with every round's figures), so that the
 * ratio of two levels comes from one run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cpu/bench_util.h"
#include "bench/cpu/membw.h"
#include "engine/compute/pool.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "vmm/topo.h"

struct bw_job {
    const float *buf;
    size_t n;
    float sums[64];
};

static void bw_run(void *p, int t, int nth)
{
    struct bw_job *j = p;
    size_t b, e;
    mvm_pool_split(j->n / 64, t, nth, &b, &e);
    j->sums[t % 64] = mvm_bench_sum_floats(j->buf + b * 64, (e - b) * 64, 1);
}

/* Best of 5 passes over 2 GiB, in bytes/s. */
static double read_bandwidth(mvm_pool *pool)
{
    size_t bytes = (size_t)2 << 30;
    float *buf = malloc(bytes);
    if (!buf)
        return 0;
    memset(buf, 1, bytes);
    struct bw_job j = {buf, bytes / sizeof *buf, {0}};
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = mvm_bench_wall_s();
        mvm_pool_run(pool, bw_run, &j);
        double bw = (double)bytes / (mvm_bench_wall_s() - t0);
        best = bw > best ? bw : best;
    }
    free(buf);
    return best;
}

/* Prefill of n_prompt tokens, then n_decode tokens one at a time, from an empty cache:
 * tokens/s of each. */
static mvm_status timed_run(mvm_ctx *c, const int32_t *tok, uint32_t n_prompt, uint32_t n_decode,
                            float *logits, double *prefill_tps, double *decode_tps)
{
    mvm_ctx_reset(c);
    double t0 = mvm_bench_wall_s();
    mvm_status st = mvm_ctx_eval(c, tok, n_prompt, logits, 0);
    *prefill_tps = n_prompt / (mvm_bench_wall_s() - t0);
    t0 = mvm_bench_wall_s();
    for (uint32_t i = 0; i < n_decode && st == MVM_OK; i++)
        st = mvm_ctx_eval(c, tok + n_prompt + i, 1, logits, 0);
    *decode_tps = n_decode / (mvm_bench_wall_s() - t0);
    return st;
}

/* The levels named in the comma list (NULL: the current one) into lv; their count, or 0
 * after printing which name is unknown or unsupported here. */
static int parse_levels(const char *list, enum mvm_simd lv[MVM_SIMD_COUNT])
{
    if (!list) {
        lv[0] = mvm_k_simd_current();
        return 1;
    }
    int n = 0;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        const int found = mvm_bench_simd_named(p, len);
        int repeated = 0;
        for (int i = 0; i < n; i++)
            repeated |= (int)lv[i] == found;
        if (found < 0 || !mvm_k_simd_has((enum mvm_simd)found) || repeated) {
            fprintf(stderr, "bench_cpu_engine: SIMD level '%.*s': unknown, repeated or not on "
                    "this CPU (best: %s)\n", (int)len, p, mvm_k_simd_name(mvm_k_simd_detect()));
            return 0;
        }
        lv[n++] = (enum mvm_simd)found;
        p += len + (p[len] == ',');
    }
    return n;
}

static uint64_t mat_bytes(const mvm_weight *w)
{
    return w->data ? (uint64_t)w->rows * w->row_bytes : 0;
}

/* Weight bytes one decoded token reads. */
static uint64_t active_bytes(const mvm_model *m)
{
    uint64_t b = mat_bytes(&m->output) + m->tok_embd.row_bytes;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const mvm_layer *L = &m->layers[l];
        b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
             mat_bytes(&L->router) + mat_bytes(&L->shexp_w1) + mat_bytes(&L->shexp_w2) +
             mat_bytes(&L->shexp_w3) +
             (uint64_t)m->hp.n_expert_used * mvm_layer_expert_bytes(L, m->hp.n_embd);
    }
    return b;
}

int main(int argc, char **argv)
{
    enum mvm_simd levels[MVM_SIMD_COUNT];
    const int n_levels = argc > 1 ? parse_levels(argc > 5 ? argv[5] : NULL, levels) : 0;
    if (argc < 2 || n_levels == 0) {
        fprintf(stderr, "usage: %s MODEL.gguf [threads] [decode tokens] [prompt tokens] "
                "[SIMD levels]\n", argv[0]);
        return 2;
    }
    mvm_topo topo;
    mvm_topo_probe(NULL, &topo);
    int threads = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : topo.n_cores;
    uint32_t n_decode = argc > 3 ? (uint32_t)atoi(argv[3]) : 32;
    uint32_t n_prompt = argc > 4 ? (uint32_t)atoi(argv[4]) : 128;
    mvm_pool *pool;
    mvm_model *m;
    mvm_ctx *c;
    mvm_space_desc d;
    if (mvm_pool_create(threads, &topo, &pool) != MVM_OK || mvm_space_desc_init(&d) != MVM_OK ||
        mvm_model_load(argv[1], &(mvm_load_args){.desc = &d, .pool = pool}, &m) != MVM_OK ||
        mvm_ctx_create(m, pool, n_prompt + n_decode + 1, 32, NULL, &c) != MVM_OK) {
        fprintf(stderr, "bench_cpu_engine: %s\n", mvm_last_error());
        return 1;
    }
    int32_t *tok = malloc((n_prompt + n_decode) * sizeof *tok);
    float *logits = malloc(m->hp.n_vocab * sizeof *logits);
    uint64_t rng = 12345;
    for (uint32_t i = 0; i < n_prompt + n_decode; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((rng >> 33) % m->hp.n_vocab);
    }
    double bw = read_bandwidth(pool);
    /* Steady state: with a budget (MOEVM_GPU_BUDGET), every expert resident before timing
     * (a first use would otherwise copy it into the space's device pages — host memory
     * here — behind the reader); without one the CPU reads the homes, already in place. */
    for (uint32_t l = 0; !m->experts_at_home && l < m->hp.n_layer; l++)
        for (uint32_t e = 0; e < m->hp.n_expert; e++)
            if (mvm_make_resident(m->space, l, e, MVM_ALL_PAGES) != MVM_OK) {
                fprintf(stderr, "bench_cpu_engine: %s\n", mvm_last_error());
                return 1;
            }
    mvm_ctx_eval(c, tok, 4, logits, 0); /* warm-up */
    char types[64];
    printf("model        %s (%s, %s experts), %u layers, top-%u of %u\n", m->name, m->arch->name,
           mvm_model_expert_types(m, types, sizeof types), m->hp.n_layer, m->hp.n_expert_used,
           m->hp.n_expert);
    const uint64_t active = active_bytes(m);
    const double bound = bw / (double)active;
    printf("read bw      %.2f GB/s\n", bw / 1e9);
    printf("active/token %.1f MB; decode bound %.2f tok/s\n", (double)active / 1e6, bound);
    const int rounds = n_levels > 1 ? 3 : 1;
    double prefill[MVM_SIMD_COUNT][3], decode[MVM_SIMD_COUNT][3];
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n_levels; i++) {
            mvm_k_simd_use(levels[i]); /* the pool's threads are idle between evals */
            if (timed_run(c, tok, n_prompt, n_decode, logits, &prefill[i][r], &decode[i][r]) !=
                MVM_OK) {
                fprintf(stderr, "bench_cpu_engine: %s\n", mvm_last_error());
                return 1;
            }
        }
    for (int i = 0; i < n_levels; i++) {
        double best_p = 0, best_d = 0;
        char all_p[64] = "", all_d[64] = "";
        for (int r = 0; r < rounds; r++) {
            best_p = prefill[i][r] > best_p ? prefill[i][r] : best_p;
            best_d = decode[i][r] > best_d ? decode[i][r] : best_d;
            snprintf(all_p + strlen(all_p), sizeof all_p - strlen(all_p), "%s%.1f", r ? ", " : "",
                     prefill[i][r]);
            snprintf(all_d + strlen(all_d), sizeof all_d - strlen(all_d), "%s%.1f", r ? ", " : "",
                     decode[i][r]);
        }
        printf("threads      %d (%s kernels)\n", threads, mvm_k_simd_name(levels[i]));
        printf("prefill      %.2f tok/s (%u tokens; rounds %s)\n", best_p, n_prompt, all_p);
        printf("decode       %.2f tok/s (%u tokens; rounds %s), %.0f%% of the bound, "
               "%.2f GB/s effective\n", best_d, n_decode, all_d, 100.0 * best_d / bound,
               best_d * (double)active / 1e9);
    }
    mvm_ctx_free(c);
    mvm_model_free(m);
    mvm_pool_destroy(pool);
    free(tok);
    free(logits);
    return 0;
}
