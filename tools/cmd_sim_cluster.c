/*
 * `moevm sim --servers N`: the place role's multi-server model (tools/sim_cluster.h).
 *
 *   moevm sim --trace T.jsonl --servers N [--gpus G] [--server-mem SIZE|PCT[,SIZE|PCT...]]
 *             [--place P[;P...]] [--period TOKENS] [--rtt MS] [--link-bw GB/s]
 *             [--cost PRESET|FILE.json]
 *
 * Every server links to every other with the same round trip and bandwidth (the cost
 * preset's network unless given). Requests live on server req mod N, so a trace whose
 * requests differ by task gives each server its own workload (`moevm trace gen --tasks`).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/choose.h"
#include "tools/cli.h"
#include "tools/cmd_sim.h"
#include "tools/sim_cluster.h"
#include "vmm/options.h"

#define MAX_SERVERS 256

struct cluster_args {
    const char *trace, *cost, *mem, *place;
    uint32_t servers, gpus, period;
    float rtt_ms, bw_gbs;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm sim --trace T.jsonl --servers N [--gpus G]\n"
            "                 [--server-mem SIZE|PCT[,...]]\n"
            "                 [--place P[;P...]] [--period TOKENS] [--rtt MS] [--link-bw GB/s]\n"
            "                 [--cost PRESET|FILE.json]\n"
            "  --servers     servers, 2..%d; request r lives on server r mod N\n"
            "  --gpus        GPUs per server, 1..64 (default 1), sharing its memory equally:\n"
            "                each holds whole experts (Prism's per-GPU memory), so a server\n"
            "                may hold fewer experts than its bytes pooled would\n"
            "  --server-mem  expert memory per server: bytes or %% of all expert bytes, one value\n"
            "                for all or one per server (default: 1.5x an even share)\n"
            "  --place       place modules to compare, ';'-separated, each NAME or NAME{k=v}\n"
            "                (default 'uniform;prism')\n"
            "  --period      tokens between placement decisions (default 256; 0: never again)\n"
            "  --rtt, --link-bw  every link's round trip and bandwidth (default: the cost's;\n"
            "                Prism's 500 Mbit/s testbed link when the cost has no network)\n"
            "The table: a row per place module.\n"
            "  local %%      expert calls served on the token's home server\n"
            "  ms/token     modelled latency per token: over its layers, attention and the\n"
            "                slowest of its expert calls (Prism's Eq. 1)\n"
            "  migrations   placements adopted after the first\n"
            "  migrated GB  bytes their copies moved over the links (10^9)\n"
            "  then ms/token of the tokens whose home is each server, server 0 first\n",
            MAX_SERVERS);
}

enum { O_TRACE = 1, O_COST, O_MEM, O_PLACE, O_SERVERS, O_GPUS, O_PERIOD, O_RTT, O_BW,
       O_NOT_HERE };

/* Its options, then `moevm sim`'s others into opts[cap], which are refused by name rather
 * than as unknown. */
static void options(mvm_cli_opt *opts, size_t cap)
{
    static const mvm_cli_opt own[] = {
        {"trace", 0, 1, O_TRACE},     {"cost", 0, 1, O_COST},     {"server-mem", 0, 1, O_MEM},
        {"place", 0, 1, O_PLACE},     {"servers", 0, 1, O_SERVERS}, {"period", 0, 1, O_PERIOD},
        {"rtt", 0, 1, O_RTT},         {"link-bw", 0, 1, O_BW},    {"gpus", 0, 1, O_GPUS}};
    size_t n = 0;
    for (; n < sizeof own / sizeof *own; n++)
        opts[n] = own[n];
    for (const mvm_cli_opt *o = mvm_sim_opts; o->name && n + 1 < cap; o++) {
        size_t i = 0;
        while (i < sizeof own / sizeof *own && strcmp(own[i].name, o->name))
            i++;
        if (i == sizeof own / sizeof *own)
            opts[n++] = (mvm_cli_opt){o->name, o->letter, o->value, O_NOT_HERE};
    }
    opts[n] = (mvm_cli_opt){0};
}

static int parse(int argc, char **argv, struct cluster_args *a)
{
    *a = (struct cluster_args){.period = 256, .gpus = 1, .rtt_ms = -1, .bw_gbs = -1};
    mvm_cli_opt opts[64];
    options(opts, sizeof opts / sizeof *opts);
    mvm_cli_iter it = {.cmd = "sim", .help = "--servers --help", .usage = usage, .opts = opts,
                       .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *f = it.flag, *v = it.value;
        int bad = 0;
        switch (it.id) {
        case O_TRACE: a->trace = v; break;
        case O_COST: a->cost = v; break;
        case O_MEM: a->mem = v; break;
        case O_PLACE: a->place = v; break;
        case O_SERVERS: bad = mvm_cli_u32("sim", f, v, 2, MAX_SERVERS, &a->servers); break;
        case O_GPUS: bad = mvm_cli_u32("sim", f, v, 1, 64, &a->gpus); break;
        case O_PERIOD: bad = mvm_cli_u32("sim", f, v, 0, 1u << 30, &a->period); break;
        case O_RTT: bad = mvm_cli_float("sim", f, v, 0, 1e6, &a->rtt_ms); break;
        case O_BW: bad = mvm_cli_float("sim", f, v, 1e-6, 1e6, &a->bw_gbs); break;
        default:
            fprintf(stderr, "moevm sim: %s does not apply with --servers (see --servers "
                    "--help)\n", f);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    if (!a->trace) {
        fprintf(stderr, "moevm sim: --trace FILE is required\n");
        return 2;
    }
    return -1;
}

static int run_one(const mvm_trace *t, const mvm_cost *cost, const mvm_cluster *c,
                   char *policy, uint32_t period)
{
    char label[160];
    snprintf(label, sizeof label, "%s", policy);
    const char *name, *params;
    if (mvm_policy_split(policy, &name, &params)) {
        fprintf(stderr, "moevm sim: --place %s: expected NAME or NAME{k=v,...}\n", label);
        return 2;
    }
    mvm_sim_cluster_result r;
    if (mvm_sim_cluster_run(t, cost, c, name, params, period, &r) != MVM_OK)
        return mvm_cli_error("sim", NULL);
    printf("%-28.28s %7.1f %9.3f %10u %11.2f", label, 100.0 * r.local_share,
           1e3 * r.mean_latency, r.migrations, (double)r.bytes_migrated / 1e9);
    for (uint32_t s = 0; s < r.n_servers && s < 8; s++)
        printf(" %8.3f", 1e3 * r.home_latency[s]);
    printf("\n");
    mvm_sim_cluster_result_free(&r);
    return 0;
}

int mvm_sim_cluster_cli(int argc, char **argv)
{
    struct cluster_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    mvm_trace *t;
    if (mvm_trace_load(a.trace, &t) != MVM_OK)
        return mvm_cli_error("sim", "--trace");
    mvm_cost cost;
    uint32_t n = a.servers;
    uint64_t all = (uint64_t)t->hdr.n_layers * t->hdr.n_experts * t->hdr.expert_bytes;
    uint64_t *cap = malloc(n * sizeof *cap);
    uint32_t *gpus = malloc(n * sizeof *gpus);
    double *rtt = malloc((size_t)n * n * sizeof *rtt), *bw = malloc((size_t)n * n * sizeof *bw);
    rc = !cap || !gpus || !rtt || !bw ? mvm_cli_error("sim", NULL)
                                      : mvm_sim_cli_cost(a.cost, t, &cost);
    if (!rc)
        rc = mvm_cli_capacities("sim", a.mem, n, all, cap);
    if (!rc) {
        /* A cost without a network (a one-GPU machine) gets the a100 preset's link, which
         * is Prism's testbed: 500 Mbit/s shaped links between slices of one machine. */
        const mvm_machine *prism = mvm_machine_preset("a100");
        bool net = cost.m.net_bw > 0;
        double r = a.rtt_ms >= 0 ? a.rtt_ms * 1e-3 : net ? cost.m.net_rtt : prism->net_rtt;
        double b = a.bw_gbs > 0 ? a.bw_gbs * 1e9 : net ? cost.m.net_bw : prism->net_bw;
        for (uint32_t i = 0; i < n * n; i++) {
            rtt[i] = i / n == i % n ? 0 : r;
            bw[i] = b;
        }
        for (uint32_t i = 0; i < n; i++)
            gpus[i] = a.gpus;
        mvm_cluster c = {.n_servers = n, .capacity_bytes = cap, .gpus = gpus, .rtt = rtt,
                         .bw = bw};
        printf("trace %s: %u tokens, %u layers x %u experts (top-%u); %u servers of %.2f GB "
               "expert memory on %u GPU%s (%llu experts; all experts: %.2f GB); links %.3f ms, "
               "%.1f GB/s; placement every %u tokens\n", a.trace, t->n_tokens,
               t->hdr.n_layers, t->hdr.n_experts, t->hdr.top_k, n, (double)cap[0] / 1e9, a.gpus,
               a.gpus > 1 ? "s" : "",
               (unsigned long long)mvm_cluster_slots(&c, 0, t->hdr.expert_bytes),
               (double)all / 1e9, r * 1e3, b / 1e9, a.period);
        printf("%-28s %7s %9s %10s %11s  ms/token by home server\n", "place", "local %",
               "ms/token", "migrations", "migrated GB");
        char list[1024];
        snprintf(list, sizeof list, "%s", a.place ? a.place : "uniform;prism");
        for (char *save = NULL, *tok = strtok_r(list, ";", &save); tok && !rc;
             tok = strtok_r(NULL, ";", &save))
            rc = run_one(t, &cost, &c, tok, a.period);
    }
    free(cap);
    free(gpus);
    free(rtt);
    free(bw);
    mvm_trace_free(t);
    return rc;
}
