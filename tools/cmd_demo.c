/*
 * `moevm demo`: a short MoE-shaped workload on an expert space, without a model. Tokens are
 * routed to top-k experts per layer with a skewed popularity (as real routers are); each
 * layer step makes its experts resident and pins them through the engine's residency
 * manager (engine/forward/residency.h: the evict module chooses what makes room), reads each
 * through its fixed address and checks it against its weights, then ends the step. It
 * prints progress and the space's statistics.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/residency.h"
#include "moevm/moevm.h"
#include "tools/cli.h"
#include "vmm/options.h"

struct demo_args {
    uint32_t layers, experts, topk, tokens;
    uint64_t expert_bytes;
    const char *budget, *evict, *evict_args;
    uint64_t seed;
};

static uint64_t next_random(uint64_t *s)
{
    /* splitmix64: deterministic across platforms, good enough for weights and routing */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: moevm demo [--layers N] [--experts N] [--topk K] [--tokens N]\n"
               "                  [--expert-size BYTES] [--budget SIZE|PCT] [--seed N]\n"
               "                  [--evict NAME[{k=v,...}]]\n"
               "defaults: 4 layers x 16 experts of 3M, top-2, 256 tokens, budget 25%%\n");
}

static int parse_args(int argc, char **argv, struct demo_args *a)
{
    *a = (struct demo_args){.layers = 4, .experts = 16, .topk = 2, .tokens = 256,
                            .expert_bytes = 3u << 20, .budget = "25%", .seed = 1};
    enum { O_LAYERS = 1, O_EXPERTS, O_TOPK, O_TOKENS, O_SIZE, O_BUDGET, O_EVICT, O_SEED };
    static const mvm_cli_opt opts[] = {
        {"layers", 0, 1, O_LAYERS},    {"experts", 0, 1, O_EXPERTS},   {"topk", 0, 1, O_TOPK},
        {"tokens", 0, 1, O_TOKENS},    {"expert-size", 0, 1, O_SIZE},  {"budget", 0, 1, O_BUDGET},
        {"evict", 0, 1, O_EVICT},      {"seed", 0, 1, O_SEED},         {0}};
    /* the counts, which read like --expert-size (so 1K works) */
    uint32_t *count[] = {[O_LAYERS] = &a->layers, [O_EXPERTS] = &a->experts,
                         [O_TOPK] = &a->topk, [O_TOKENS] = &a->tokens};
    mvm_cli_iter it = {.cmd = "demo", .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *f = it.flag;
        char *v = it.value;
        uint64_t n = 0;
        uint32_t seed;
        if (it.id == O_BUDGET) {
            a->budget = v;
        } else if (it.id == O_EVICT) {
            if (mvm_cli_policy("demo", f, v, &a->evict, &a->evict_args))
                return 2;
        } else if (it.id == O_SEED) {
            if (mvm_cli_u32("demo", f, v, 0, UINT32_MAX, &seed))
                return 2;
            a->seed = seed;
        } else if (mvm_parse_size(v, &n) || n == 0 || n > UINT32_MAX) {
            fprintf(stderr, "moevm demo: %s %s: not a positive number\n", f, v);
            return 2;
        } else if (it.id == O_SIZE) {
            a->expert_bytes = n;
        } else {
            *count[it.id] = (uint32_t)n;
        }
    }
    if (next != MVM_CLI_END)
        return next;
    if (a->topk > a->experts) {
        fprintf(stderr, "moevm demo: --topk %u exceeds --experts %u\n", a->topk, a->experts);
        return 2;
    }
    return -1; /* go on */
}

struct demo {
    struct demo_args a;
    mvm_space *sp;
    mvm_resid *resid;
    mvm_space_info info;
    uint64_t *checksum; /* per expert, of its weights */
    double *popularity; /* per expert within a layer: Zipf-like weights */
    uint32_t *counts;   /* per expert within a layer: tokens of the current step */
    uint64_t verified;
};

static uint64_t sum_words(const uint64_t *p, uint64_t bytes)
{
    uint64_t s = 0;
    for (uint64_t i = 0; i < bytes / 8; i++)
        s = s * 31 + p[i];
    return s;
}

static void fill_weights(struct demo *d)
{
    uint64_t rng = d->a.seed;
    for (uint32_t l = 0; l < d->a.layers; l++)
        for (uint32_t e = 0; e < d->a.experts; e++) {
            uint64_t *w = mvm_expert_home(d->sp, l, e);
            for (uint64_t i = 0; i < d->a.expert_bytes / 8; i++)
                w[i] = next_random(&rng);
            d->checksum[l * d->a.experts + e] = sum_words(w, d->a.expert_bytes);
        }
}

/* One layer step: the chosen experts resident and pinned, each read and checked. */
static int use_experts(struct demo *d, uint32_t l, const int32_t *chosen)
{
    if (mvm_resid_begin(d->resid, l, chosen, d->a.topk, 1) != MVM_OK)
        return mvm_cli_error("demo", "make-resident");
    int rc = 0;
    for (uint32_t k = 0; k < d->a.topk && rc == 0 && d->info.host_readable; k++) {
        uint32_t e = (uint32_t)chosen[k], i = l * d->a.experts + e;
        if (sum_words(mvm_expert_addr(d->sp, l, e), d->a.expert_bytes) != d->checksum[i]) {
            fprintf(stderr, "moevm demo: expert (%u, %u) read wrong bytes through its address\n",
                    l, e);
            rc = 1;
        }
        d->verified++;
    }
    for (uint32_t k = 0; k < d->a.topk; k++)
        d->counts[chosen[k]] = 1;
    mvm_pstep step = {.layer = l, .n_tok = 1, .experts = (int32_t *)chosen,
                      .counts = d->counts};
    if (mvm_resid_end(d->resid, &step, chosen, d->a.topk, l + 1 == d->a.layers) != MVM_OK &&
        rc == 0)
        rc = mvm_cli_error("demo", "unpin");
    for (uint32_t k = 0; k < d->a.topk; k++)
        d->counts[chosen[k]] = 0;
    return rc;
}

/* Draws k distinct experts by popularity (sampling without replacement). */
static void route(struct demo *d, uint64_t *rng, int32_t *out)
{
    for (uint32_t k = 0; k < d->a.topk; k++) {
        double total = 0;
        for (uint32_t e = 0; e < d->a.experts; e++)
            total += d->popularity[e];
        for (uint32_t j = 0; j < k; j++)
            total -= d->popularity[out[j]];
        double x = (double)(next_random(rng) >> 11) / 9007199254740992.0 * total;
        uint32_t pick = 0;
        for (uint32_t e = 0; e < d->a.experts; e++) {
            bool taken = false;
            for (uint32_t j = 0; j < k; j++)
                taken = taken || out[j] == (int32_t)e;
            if (taken)
                continue;
            pick = e;
            if ((x -= d->popularity[e]) < 0)
                break;
        }
        out[k] = (int32_t)pick;
    }
}

static void print_stats(const struct demo *d, uint32_t token)
{
    mvm_stats s;
    mvm_space_get_stats(d->sp, &s);
    uint64_t req = s.hits + s.misses;
    printf("token %4u/%u  hit rate %5.1f%%  moved %7.1f MiB  evicted %5" PRIu64
           " pages  resident %u/%u pages  waited %.1f ms\n",
           token, d->a.tokens, req ? 100.0 * (double)s.hits / (double)req : 0.0,
           (double)s.bytes_moved / 1048576.0, s.pages_evicted, s.resident_pages,
           d->info.device_pages, (double)s.wait_ns / 1e6);
}

static int run_demo(struct demo *d)
{
    fill_weights(d);
    uint64_t rng = d->a.seed ^ 0xD1B54A32D192ED03ull;
    int32_t *chosen = malloc(d->a.topk * sizeof *chosen);
    if (!chosen)
        return 1;
    int rc = 0;
    for (uint32_t t = 0; t < d->a.tokens && rc == 0; t++) {
        for (uint32_t l = 0; l < d->a.layers && rc == 0; l++) {
            route(d, &rng, chosen);
            rc = use_experts(d, l, chosen);
        }
        if (rc == 0 && ((t + 1) % 64 == 0 || t + 1 == d->a.tokens))
            print_stats(d, t + 1);
    }
    free(chosen);
    if (rc == 0)
        printf("verified %" PRIu64 " expert reads through fixed addresses%s\n", d->verified,
               d->info.host_readable ? "" : " (device addresses: not CPU-readable, skipped)");
    return rc;
}

int mvm_cmd_demo(int argc, char **argv)
{
    struct demo d = {0};
    int rc = parse_args(argc, argv, &d.a);
    if (rc >= 0)
        return rc;
    mvm_space_desc desc;
    if ((rc = mvm_cli_space_desc("demo", "--budget", d.a.budget, &desc)) != 0)
        return rc;
    desc.n_layers = d.a.layers;
    desc.n_experts = d.a.experts;
    desc.expert_bytes = d.a.expert_bytes / 8 * 8;
    d.a.expert_bytes = desc.expert_bytes;
    if (mvm_space_create(&desc, &d.sp) != MVM_OK)
        return mvm_cli_error("demo", "creating the expert space");
    mvm_space_get_info(d.sp, &d.info);
    mvm_resid_params rp = {.evict = d.a.evict, .evict_args = d.a.evict_args,
                           .top_k = d.a.topk};
    if (mvm_resid_create(d.sp, &rp, &d.resid) != MVM_OK) {
        mvm_space_destroy(d.sp);
        return mvm_cli_error("demo", d.a.evict ? "--evict" : "residency");
    }
    printf("demo: %u layers x %u experts of %.1f MiB, top-%u, %u tokens; budget %u pages of "
           "%llu KiB on %s; evict %s\n", d.a.layers, d.a.experts,
           (double)d.a.expert_bytes / 1048576.0, d.a.topk, d.a.tokens, d.info.device_pages,
           (unsigned long long)(d.info.page_size >> 10), d.info.backend,
           mvm_resid_evict_name(d.resid));
    uint32_t n = d.a.layers * d.a.experts;
    d.checksum = calloc(n, sizeof *d.checksum);
    d.popularity = calloc(d.a.experts, sizeof *d.popularity);
    d.counts = calloc(d.a.experts, sizeof *d.counts);
    if (!d.checksum || !d.popularity || !d.counts) {
        fprintf(stderr, "moevm demo: out of memory\n");
        rc = 1;
    } else {
        for (uint32_t e = 0; e < d.a.experts; e++)
            d.popularity[e] = 1.0 / pow(e + 1.0, 1.1); /* Zipf, as expert loads roughly are */
        rc = run_demo(&d);
    }
    mvm_resid_destroy(d.resid);
    free(d.checksum);
    free(d.popularity);
    free(d.counts);
    mvm_space_destroy(d.sp);
    return rc;
}
