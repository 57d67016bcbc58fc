/*
 * `moevm sim`: replay a routing trace through policy modules (tools/sim.h).
 *
 *   moevm sim --trace T.jsonl [--budget SIZE|PCT] [--cost PRESET|FILE.json]
 *             [--route NAME] [--evict NAME] [--assign NAME] [--predict NAME] [--config NAME]
 *             [--page-size SIZE] [--zerocopy] [--no-admit] [--prefetch top-k|window]
 *             [--budget-routing host|in-place|read-through|read-ahead] [--device-cpu]
 *             [--compare SETS] [--sweep budget=A..B]
 *             [--steps N] [--out PREFIX] [--alpha-for MS [--alpha-degree D]]
 *
 * A policy is NAME or NAME{k=v,k=v}. A policy set for --compare is role=policy items
 * separated by commas, sets separated by ';', e.g.
 *   --compare 'evict=lru; evict=score{n=8},route=importance{alpha=0.4}'
 * Roles not named in a set take the single-run flags (or the defaults).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model.h"
#include "policy/cost_load.h"
#include "policy/route_alpha.h"
#include "policy/choose.h"
#include "tools/cli.h"
#include "tools/cmd_sim.h"
#include "tools/sim.h"
#include "tools/sim_inputs.h"
#include "tools/svg_plot.h"
#include "tools/trace_gen.h"
#include "vmm/options.h"

#define MAX_SETS 16

struct policy_set {
    char label[160];
    char buf[512];                      /* names and params point in here */
    const char *policy[MVM_ROLE_COUNT];
    const char *params[MVM_ROLE_COUNT];
};

struct sim_args {
    const char *trace, *cost, *budget, *compare, *sweep, *out, *page;
    const char *model, *predictor, *shape, *hot_profile;
    int zerocopy, no_admit, prefetch_window, admit_steps, device_routed, device_cpu;
    uint32_t steps, alpha_degree;
    int steps_given;
    float alpha_for;                    /* ms per token; 0 = not asked */
    struct policy_set base;             /* from --route/--evict/... */
    struct policy_set sets[MAX_SETS];
    int n_sets;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm sim --trace T.jsonl [--budget SIZE|PCT] [--cost PRESET|FILE.json]\n"
            "                 [--route P] [--evict P] [--assign P] [--predict P] [--config P]\n"
            "                 [--page-size SIZE] [--zerocopy] [--no-admit] [--prefetch top-k|window]\n"
            "                 [--admit on|off|steps]\n"
            "                 [--budget-routing host|in-place|read-through|read-ahead]\n"
            "                 [--device-cpu] [--compare SETS]\n"
            "                 [--sweep budget=A%%..B%%] [--steps N] [--out PREFIX]\n"
            "                 [--model M.gguf] [--predictor P.bin] [--hot-profile T.jsonl]\n"
            "       moevm sim --model-shape NAME|L,E,K ...   (a synthetic trace, trace gen's defaults)\n"
            "       moevm sim --model M.gguf ...             (the same, of that model's shape)\n"
            "  P            a module, optionally with parameters: score{n=8}\n"
            "  --budget     device memory for experts: bytes (8G) or %% of their pages (25%%)\n"
            "  --cost       %s, or a JSON cost file (docs/cost-format.md, `moevm calibrate`);\n"
            "               default MOEVM_COST (h100)\n"
            "  --no-admit   experts run from their homes (CPU, zero-copy) are not loaded into\n"
            "               the cache in the background afterwards (docs/policies.md); --admit\n"
            "               off the same, on (default) one a step while the copy engine is idle,\n"
            "               steps one a step whatever it carries (MOEVM_ADMIT)\n"
            "  --budget-routing  in-place: decode routed on the device at a budget, as the\n"
            "               engine's MOEVM_BUDGET_ROUTING=in-place: no host time between a\n"
            "               layer's attention and its experts (host_step) but the host's time\n"
            "               between tokens (host_token), the experts landed at\n"
            "               the token's start read there, every other one read in place\n"
            "               (zero-copy); read-through: the same, each miss stored as it is read\n"
            "               into a free slab, resident from the next token (no admission);\n"
            "               read-ahead (a design the engine does not have yet): read-through,\n"
            "               and the predict module's top experts of the next layer copied\n"
            "               by the device into free slabs from each layer's attention end,\n"
            "               over the link after that layer's reads in place (with --predict);\n"
            "               host (default): routed by the host\n"
            "  --device-cpu with a --budget-routing on the device (MOEVM_DEVICE_CPU):\n"
            "               a miss runs on the CPU threads from its home where that ends\n"
            "               before its read over the bus would (the CPU told the routing\n"
            "               through mapped memory at the layer's attention end, its result\n"
            "               summed on the device; cpu_setup a handshake)\n"
            "  --prefetch   what a prediction prefetches: top-k (default), the next layer's top_k\n"
            "               most likely experts; window, MoEpic's (§3.3): every expert it ranks,\n"
            "               most likely first, each its pages not resident, until that layer\n"
            "               routes (what has not started then is dropped)\n"
            "  --compare    policy sets 'evict=lru; evict=score,route=importance{alpha=0.4}'\n"
            "               (every table ends with the bound: the base policies with\n"
            "               evict=belady, the offline optimum read from the trace)\n"
            "  --sweep      run each set at --steps budgets from A to B; writes PREFIX.csv and\n"
            "               PREFIX.svg (--out, default sim-sweep)\n"
            "  --model      the GGUF that recorded the trace: routers for predict gate/residual;\n"
            "               alone, a synthetic trace of its shape\n"
            "  --predictor  a `moevm train-predictor` file for predict learned\n"
            "  --hot-profile  a trace of a profiling run (`moevm run --trace-out`): config hot\n"
            "               builds its table from its counts and holds it from the start\n"
            "  --alpha-for MS  choose route importance's alpha for MS ms/token (SMoE §V-C):\n"
            "               --steps alphas over [0, 1] (default 11) and a polynomial fit of\n"
            "               --alpha-degree D (default 2)\n"
            "  --servers N  the multi-server model of the place role instead (--servers --help)\n"
            "The table: a row per policy set, modelled over every token of the trace.\n"
            "  hit %%       expert accesses whose expert was wholly resident when routed\n"
            "  part %%      accesses that found only a page prefix resident (a config split:\n"
            "               the prefix computes while the rest loads)\n"
            "  moved GB    bytes copied into the budget, on demand and prefetched (10^9)\n"
            "  pf-pr       prefetch precision: of the experts prefetched, the share used before\n"
            "               being evicted\n"
            "  pf-rc       prefetch recall: of the accesses that would have missed but for the\n"
            "               prefetches (the misses, and the hits on prefetched experts), the\n"
            "               share a prefetch made hits\n"
            "  cpu %%       accesses run on the CPU threads (the assign module's choice, or no\n"
            "               room and no --zerocopy)\n"
            "  ms/token    modelled time per token, the sum of the four columns after it:\n"
            "  attn        attention and the rest of a layer that is not experts (the cost's\n"
            "               attn_time), and the host's routing of the step (host_step, less\n"
            "               its launches' host_queue while copies or experts ran)\n"
            "  gpu         experts on the GPU: their compute, or the zero-copy reads beside\n"
            "               it where those take longer\n"
            "  stall       the GPU waiting for copies to land\n"
            "  cpu-w       waiting for the CPU's experts after the GPU's were done\n"
            "--alpha-for prints alpha, ms/token, hit %% and substitutions per token for each\n"
            "alpha, then the alpha to use.\n",
            mvm_machine_preset_names());
}

static int role_of(const char *name, size_t len)
{
    for (int r = 0; r < MVM_ROLE_COUNT; r++)
        if (strlen(mvm_role_name((enum mvm_role)r)) == len &&
            strncmp(mvm_role_name((enum mvm_role)r), name, len) == 0)
            return r;
    return -1;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* One set: role=policy items separated by top-level commas. */
static int parse_set(const char *text, const struct policy_set *base, struct policy_set *out)
{
    *out = *base;
    snprintf(out->label, sizeof out->label, "%s", text);
    snprintf(out->buf, sizeof out->buf, "%s", text);
    char *p = out->buf;
    while (*p) {
        char *item = p;
        int depth = 0;
        while (*p && (*p != ',' || depth)) {
            depth += *p == '{';
            depth -= *p == '}';
            p++;
        }
        if (*p)
            *p++ = '\0';
        item = trim(item);
        char *eq = strchr(item, '=');
        int role = eq ? role_of(item, (size_t)(eq - item)) : -1;
        if (role < 0 ||
            mvm_policy_split(trim(eq + 1), &out->policy[role], &out->params[role])) {
            fprintf(stderr, "moevm sim: '%s': expected role=policy (roles: route, evict, assign, "
                    "predict, config) with optional {k=v,...}\n", item);
            return 2;
        }
    }
    return 0;
}

/* The last row of every table: the base policies with evict belady, the offline optimum
 * (policy/evict_belady.c), so each comparison shows how far its evictions are from the best
 * possible. Not added when a set already runs it (belady without parameters: `ahead` makes
 * it a partial oracle), nor for --alpha-for's series. -1: go on. */
static int add_bound(struct sim_args *a)
{
    for (int i = 0; i < a->n_sets; i++)
        if (a->sets[i].policy[MVM_ROLE_EVICT] &&
            strcmp(a->sets[i].policy[MVM_ROLE_EVICT], "belady") == 0 &&
            !(a->sets[i].params[MVM_ROLE_EVICT] && *a->sets[i].params[MVM_ROLE_EVICT]))
            return -1;
    struct policy_set *b = &a->sets[a->n_sets++];
    *b = a->base;
    b->policy[MVM_ROLE_EVICT] = "belady";
    b->params[MVM_ROLE_EVICT] = NULL;
    snprintf(b->label, sizeof b->label, "bound: evict=belady (offline)");
    return -1;
}

enum {
    O_ROLE = 1, O_ZEROCOPY, O_NO_ADMIT, O_TRACE, O_MODEL, O_PREDICTOR, O_SHAPE, O_COST,
    O_BUDGET, O_COMPARE, O_SWEEP, O_OUT, O_PAGE, O_STEPS, O_ALPHA_FOR, O_ALPHA_DEGREE,
    O_PREFETCH, O_ADMIT, O_BUDGET_ROUTING, O_DEVICE_CPU,
    O_HOT_PROFILE
};

/* The single-run options; cmd_sim_cluster.c names them as not applying with --servers. */
const mvm_cli_opt mvm_sim_opts[] = {
    {"route", 0, 1, O_ROLE},       {"evict", 0, 1, O_ROLE},          {"assign", 0, 1, O_ROLE},
    {"predict", 0, 1, O_ROLE},     {"config", 0, 1, O_ROLE},         {"place", 0, 1, O_ROLE},
    {"zerocopy", 0, 0, O_ZEROCOPY}, {"no-admit", 0, 0, O_NO_ADMIT},  {"trace", 0, 1, O_TRACE},
    {"model", 0, 1, O_MODEL},      {"predictor", 0, 1, O_PREDICTOR}, {"model-shape", 0, 1, O_SHAPE},
    {"cost", 0, 1, O_COST},        {"budget", 0, 1, O_BUDGET},       {"compare", 0, 1, O_COMPARE},
    {"sweep", 0, 1, O_SWEEP},      {"out", 0, 1, O_OUT},             {"page-size", 0, 1, O_PAGE},
    {"steps", 0, 1, O_STEPS},      {"alpha-for", 0, 1, O_ALPHA_FOR},
    {"alpha-degree", 0, 1, O_ALPHA_DEGREE}, {"prefetch", 0, 1, O_PREFETCH},
    {"hot-profile", 0, 1, O_HOT_PROFILE}, {"admit", 0, 1, O_ADMIT},
    {"budget-routing", 0, 1, O_BUDGET_ROUTING}, {"device-cpu", 0, 0, O_DEVICE_CPU}, {0}};

/* --route, --evict, ...: the base set's module of that role, copied into its buffer. */
static int parse_role(struct sim_args *a, char **bp, const char *f, const char *v)
{
    int role = role_of(f + 2, strlen(f + 2));
    size_t used = (size_t)(*bp - a->base.buf), len = strlen(v);
    if (used + len + 1 > sizeof a->base.buf) {
        fprintf(stderr, "moevm sim: policies too long\n");
        return 2;
    }
    memcpy(*bp, v, len + 1);
    if (mvm_policy_split(*bp, &a->base.policy[role], &a->base.params[role])) {
        fprintf(stderr, "moevm sim: %s %s: expected NAME or NAME{k=v,...}\n", f, v);
        return 2;
    }
    *bp += len + 1;
    return 0;
}

/* --admit, --budget-routing, --prefetch: their values' indices into the fields they set. */
static int parse_choice(struct sim_args *a, int id, const char *f, const char *v)
{
    static const char *const admit[] = {"on", "off", "steps", NULL};
    static const char *const routing[] = {"host", "in-place", "read-through", "read-ahead",
                                          NULL};
    static const char *const prefetch[] = {"top-k", "window", NULL};
    int i = 0;
    if (mvm_cli_choice("sim", f, v,
                       id == O_ADMIT ? admit : id == O_BUDGET_ROUTING ? routing : prefetch, &i))
        return 2;
    if (id == O_ADMIT)
        a->no_admit = i == 1, a->admit_steps = i == 2;
    else if (id == O_BUDGET_ROUTING)
        a->device_routed = i; /* 0 host, 1 in-place, 2 read-through, 3 read-ahead */
    else
        a->prefetch_window = i == 1;
    return 0;
}

static int parse_option(struct sim_args *a, char **bp, int id, const char *f, const char *v)
{
    switch (id) {
    case O_ROLE: return parse_role(a, bp, f, v);
    case O_ZEROCOPY: a->zerocopy = 1; return 0;
    case O_DEVICE_CPU: a->device_cpu = 1; return 0;
    case O_NO_ADMIT: a->no_admit = 1; return 0;
    case O_ADMIT:
    case O_BUDGET_ROUTING:
    case O_PREFETCH: return parse_choice(a, id, f, v);
    case O_TRACE: a->trace = v; return 0;
    case O_MODEL: a->model = v; return 0;
    case O_PREDICTOR: a->predictor = v; return 0;
    case O_HOT_PROFILE: a->hot_profile = v; return 0;
    case O_SHAPE: a->shape = v; return 0;
    case O_COST: a->cost = v; return 0;
    case O_BUDGET: a->budget = v; return 0;
    case O_COMPARE: a->compare = v; return 0;
    case O_SWEEP: a->sweep = v; return 0;
    case O_OUT: a->out = v; return 0;
    case O_PAGE: a->page = v; return 0;
    case O_STEPS:
        a->steps_given = 1;
        return mvm_cli_u32("sim", f, v, 2, 1000, &a->steps);
    case O_ALPHA_FOR: return mvm_cli_float("sim", f, v, 1e-6, 1e9, &a->alpha_for);
    case O_ALPHA_DEGREE:
        return mvm_cli_u32("sim", f, v, 1, MVM_ALPHA_FIT_MAX_DEGREE, &a->alpha_degree);
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct sim_args *a)
{
    memset(a, 0, sizeof *a);
    a->steps = 10;
    a->alpha_degree = 2;
    char *bp = a->base.buf;
    mvm_cli_iter it = {.cmd = "sim", .usage = usage, .opts = mvm_sim_opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION)
        if (parse_option(a, &bp, it.id, it.flag, it.value))
            return 2;
    if (next != MVM_CLI_END)
        return next;
    if ((a->trace && a->shape) || (!a->trace && !a->shape && !a->model)) {
        fprintf(stderr, "moevm sim: give --trace FILE (record one with `moevm run --trace-out`, "
                "or `moevm trace gen`), or --model-shape NAME or --model M.gguf alone (a "
                "synthetic trace of that shape with `moevm trace gen`'s defaults), not both\n");
        return 2;
    }
    if (a->alpha_for && (a->compare || a->sweep)) {
        fprintf(stderr, "moevm sim: --alpha-for runs its own series; leave out --compare and "
                "--sweep\n");
        return 2;
    }
    const char *route = a->base.policy[MVM_ROLE_ROUTE];
    if (a->alpha_for && route && (strcmp(route, "importance") || a->base.params[MVM_ROLE_ROUTE])) {
        fprintf(stderr, "moevm sim: --alpha-for chooses the alpha of route importance; leave "
                "--route out\n");
        return 2;
    }
    if (!a->alpha_for && a->alpha_degree != 2) {
        fprintf(stderr, "moevm sim: --alpha-degree goes with --alpha-for\n");
        return 2;
    }
    if (a->device_cpu && !a->device_routed) {
        fprintf(stderr, "moevm sim: --device-cpu goes with a --budget-routing on the device "
                "(in-place, read-through or read-ahead)\n");
        return 2;
    }
    if (!a->steps_given)
        a->steps = a->alpha_for ? 11 : 10;
    snprintf(a->base.label, sizeof a->base.label, "default");
    if (!a->compare) {
        a->sets[a->n_sets++] = a->base;
        return a->alpha_for ? -1 : add_bound(a);
    }
    char list[1024];
    snprintf(list, sizeof list, "%s", a->compare);
    for (char *save = NULL, *tok = strtok_r(list, ";", &save); tok;
         tok = strtok_r(NULL, ";", &save)) {
        if (a->n_sets == MAX_SETS - 1) { /* room for the bound */
            fprintf(stderr, "moevm sim: at most %d policy sets\n", MAX_SETS - 1);
            return 2;
        }
        if (parse_set(trim(tok), &a->base, &a->sets[a->n_sets++]))
            return 2;
    }
    return add_bound(a);
}

/* The set's policies in the config (pointers into the set). */
static void apply_set(const struct policy_set *s, mvm_sim_config *c)
{
    for (int r = 0; r < MVM_ROLE_COUNT; r++) {
        c->policy[r] = s->policy[r];
        c->params[r] = s->params[r];
    }
}

static uint64_t total_pages(const mvm_trace *t, uint32_t page)
{
    return (uint64_t)t->hdr.n_layers * t->hdr.n_experts * ((t->hdr.expert_bytes + page - 1) / page);
}

/* --budget: bytes, or a fraction of the pages all experts take (as the engine's space), in
 * pages. */
static int budget_pages(const char *text, const mvm_trace *t, uint32_t page, uint64_t *out)
{
    uint64_t bytes;
    double frac;
    if (!text) {
        *out = total_pages(t, page) / 4;
        return 0;
    }
    if (mvm_parse_budget(text, &bytes, &frac) != 0 || bytes == MVM_BUDGET_AUTO) {
        fprintf(stderr, "moevm sim: --budget %s: expected a size (8G) or a percentage (25%%)\n",
                text);
        return 2;
    }
    uint64_t total = total_pages(t, page);
    *out = bytes ? bytes / page : (uint64_t)(frac * (double)total);
    if (*out > total) { /* a device larger than the model: say so, and simulate 100% */
        fprintf(stderr, "moevm sim: --budget %s is more than every expert takes (%.1f GiB): "
                "simulating 100%%\n", text, (double)total * page / 1073741824.0);
        *out = total;
    }
    return 0;
}

static void print_header(void)
{
    printf("%-52s %7s %6s %8s %6s %6s %6s %9s %7s %7s %7s %7s\n", "policies", "hit %", "part %",
           "moved GB", "pf-pr", "pf-rc", "cpu %", "ms/token", "attn", "gpu", "stall", "cpu-w");
}

static void print_row(const char *label, const mvm_sim_result *r)
{
    double tok = r->tokens ? (double)r->tokens : 1;
    double acc = r->accesses ? (double)r->accesses : 1;
    double prec = r->prefetches ? (double)r->prefetch_used / (double)r->prefetches : 0;
    double rec = r->prefetch_hits + r->misses ? (double)r->prefetch_hits /
                                                (double)(r->prefetch_hits + r->misses) : 0;
    printf("%-52.52s %7.1f %6.1f %8.2f %6.2f %6.2f %6.1f %9.3f %7.3f %7.3f %7.3f %7.3f\n", label,
           100.0 * (double)r->hits / acc, 100.0 * (double)r->partial_hits / acc, (double)(r->bytes_loaded + r->bytes_prefetched) / 1e9,
           prec, rec, 100.0 * (double)r->cpu_runs / acc, 1e3 * r->time / tok,
           1e3 * r->t_attn / tok, 1e3 * r->t_gpu / tok, 1e3 * r->t_stall / tok,
           1e3 * r->t_cpu_wait / tok);
}

int mvm_sim_cli_cost(const char *spec, const mvm_trace *t, mvm_cost *cost)
{
    mvm_machine m;
    if (mvm_machine_load(spec, "--cost", &m) != MVM_OK)
        return mvm_cli_error("sim", NULL);
    mvm_cost_init(cost, &m, t->hdr.expert_bytes, t->hdr.n_embd, t->hdr.n_ff_exp);
    return 0;
}

/* Sweep: CSV of every (set, budget) and an SVG of ms/token against budget per set. */
static int sweep(const struct sim_args *a, const mvm_trace *t, const mvm_cost *cost,
                 mvm_sim_config *cfg)
{
    double lo, hi;
    if (sscanf(a->sweep, "budget=%lf%%..%lf%%", &lo, &hi) != 2 || !(lo > 0) || !(hi >= lo) ||
        hi > 100) {
        fprintf(stderr, "moevm sim: --sweep %s: expected budget=A%%..B%% with 0 < A <= B <= 100\n",
                a->sweep);
        return 2;
    }
    const char *prefix = a->out ? a->out : "sim-sweep";
    char path[512];
    snprintf(path, sizeof path, "%s.csv", prefix);
    FILE *csv = fopen(path, "w");
    if (!csv) {
        fprintf(stderr, "moevm sim: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(csv, "policies,budget_pct,hit_pct,partial_pct,moved_gb,prefetch_precision,cpu_pct,ms_per_token\n");
    double *ms = malloc((size_t)a->n_sets * a->steps * sizeof *ms);
    double *x = malloc(a->steps * sizeof *x);
    const char *labels[MAX_SETS];
    if (!ms || !x) {
        free(ms), free(x), fclose(csv);
        fprintf(stderr, "moevm sim: out of memory\n");
        return 1;
    }
    print_header();
    for (int s = 0; s < a->n_sets; s++) {
        apply_set(&a->sets[s], cfg);
        labels[s] = a->sets[s].label;
        for (uint32_t i = 0; i < a->steps; i++) {
            double pct = x[i] = lo + (hi - lo) * i / (a->steps - 1);
            cfg->budget_pages = (uint64_t)(pct / 100 * (double)total_pages(t, cfg->page_bytes));
            mvm_sim_result r;
            if (mvm_sim_run(t, cost, cfg, &r) != MVM_OK) {
                free(ms), free(x), fclose(csv);
                return mvm_cli_error("sim", NULL);
            }
            char label[200];
            snprintf(label, sizeof label, "%s @ %.0f%%", a->sets[s].label, pct);
            print_row(label, &r);
            double tok = r.tokens ? (double)r.tokens : 1;
            ms[(size_t)s * a->steps + i] = 1e3 * r.time / tok;
            double acc = (double)(r.accesses ? r.accesses : 1);
            fprintf(csv, "\"%s\",%.2f,%.3f,%.3f,%.4f,%.4f,%.3f,%.5f\n", a->sets[s].label, pct,
                    100.0 * (double)r.hits / acc, 100.0 * (double)r.partial_hits / acc,
                    (double)(r.bytes_loaded + r.bytes_prefetched) / 1e9,
                    r.prefetches ? (double)r.prefetch_used / (double)r.prefetches : 0,
                    100.0 * (double)r.cpu_runs / acc,
                    ms[(size_t)s * a->steps + i]);
        }
    }
    int bad = fclose(csv) != 0;
    snprintf(path, sizeof path, "%s.svg", prefix);
    char title[256];
    snprintf(title, sizeof title, "%s: %u layers x %u experts, top-%u, %s", a->trace,
             t->hdr.n_layers, t->hdr.n_experts, t->hdr.top_k, cost->m.name);
    bad |= mvm_svg_lines(path, title, "device budget (% of expert pages)", "ms per token", x,
                         a->steps, ms, labels, (uint32_t)a->n_sets) != MVM_OK;
    free(ms);
    free(x);
    if (bad) {
        fprintf(stderr, "moevm sim: writing %s failed\n", path);
        return 1;
    }
    printf("wrote %s.csv and %s.svg\n", prefix, prefix);
    return 0;
}

/* A synthetic trace with `moevm trace gen`'s defaults, of a named shape or, shape NULL, of
 * the GGUF model's (its expert bytes in moevm's layout for its weight type). */
static mvm_status synthetic(const char *shape, const char *model, mvm_trace **t)
{
    mvm_trace_gen g;
    mvm_trace_gen_init(&g);
    if (shape) {
        mvm_status st = mvm_trace_gen_set_shape(&g, shape);
        return st == MVM_OK ? mvm_trace_generate(&g, t) : st;
    }
    mvm_model *m;
    mvm_status st = mvm_model_probe(model, &m);
    if (st != MVM_OK)
        return st;
    const mvm_hparams *hp = &m->hp;
    snprintf(g.shape, sizeof g.shape, "%.*s", (int)sizeof g.shape - 1, m->name);
    g.hdr = (mvm_trace_header){.arch = (char *)m->arch->name, .n_layers = hp->n_layer,
                               .n_experts = hp->n_expert, .top_k = hp->n_expert_used,
                               .expert_bytes = m->expert_bytes, .n_embd = hp->n_embd,
                               .n_ff_exp = hp->n_ff_exp,
                               .weights_renormalised = hp->norm_topk};
    mvm_model_free(m);
    return mvm_trace_generate(&g, t);
}

int mvm_cmd_sim(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--servers") == 0 || strncmp(argv[i], "--servers=", 10) == 0)
            return mvm_sim_cluster_cli(argc, argv);
    struct sim_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    mvm_trace *t;
    if (a.trace ? mvm_trace_load(a.trace, &t) != MVM_OK
                : synthetic(a.shape, a.shape ? NULL : a.model, &t) != MVM_OK)
        return mvm_cli_error("sim", a.trace ? "--trace" : a.shape ? "--model-shape" : "--model");
    if (!a.trace)
        a.trace = a.shape ? a.shape : a.model;
    int hot = 0; /* a set that reads --hot-profile */
    for (int s = 0; s < a.n_sets; s++)
        hot |= a.sets[s].policy[MVM_ROLE_CONFIG] &&
               strcmp(a.sets[s].policy[MVM_ROLE_CONFIG], "hot") == 0;
    if (a.hot_profile && !hot) {
        mvm_trace_free(t);
        fprintf(stderr, "moevm sim: --hot-profile: no policy set has config hot, the only "
                        "module that reads a profile\n");
        return 2;
    }
    mvm_sim_config cfg;
    mvm_sim_config_init(&cfg);
    mvm_sim_inputs in = {0};
    const char *bad = a.model && mvm_sim_load_routers(a.model, t, &in) != MVM_OK ? "--model"
        : a.predictor && mvm_sim_load_predictor(a.predictor, &in) != MVM_OK ? "--predictor"
        : a.hot_profile && mvm_sim_load_profile(a.hot_profile, &in) != MVM_OK ? "--hot-profile"
        : NULL;
    if (bad) {
        mvm_sim_inputs_free(&in);
        mvm_trace_free(t);
        return mvm_cli_error("sim", bad);
    }
    cfg.profile = in.profile.counts ? &in.profile : NULL;
    cfg.router = in.model ? &in.router.r : NULL;
    cfg.predictor = in.predictor;
    cfg.predictor_size = in.predictor_size;
    cfg.zerocopy = a.zerocopy;
    cfg.admit = a.no_admit ? 0 : a.admit_steps ? 2 : 1;
    cfg.device_routed = a.device_routed;
    cfg.device_cpu = a.device_cpu;
    cfg.prefetch_window = a.prefetch_window;
    uint64_t page = 0;
    mvm_cost cost;
    /* Whole 4 KiB pages, as every backend's granularity is (the host's smallest). */
    if (a.page && (mvm_parse_size(a.page, &page) != 0 || page == 0 || page % 4096 ||
                   page > (1u << 30))) {
        fprintf(stderr, "moevm sim: --page-size %s: expected a multiple of 4K up to 1G\n",
                a.page);
        rc = 2;
    } else {
        if (page)
            cfg.page_bytes = (uint32_t)page;
        rc = mvm_sim_cli_cost(a.cost, t, &cost);
    }
    if (!rc)
        rc = budget_pages(a.budget, t, cfg.page_bytes, &cfg.budget_pages);
    if (!rc && a.alpha_for) {
        apply_set(&a.sets[0], &cfg);
        rc = mvm_sim_alpha_cli(t, &cost, &cfg, a.alpha_for, a.alpha_degree, a.steps);
    } else if (!rc && !a.sweep) {
        printf("trace %s: %u tokens, %u layers x %u experts (top-%u) of %.1f MiB; budget %llu of "
               "%llu pages; cost %s\n", a.trace, t->n_tokens, t->hdr.n_layers, t->hdr.n_experts,
               t->hdr.top_k, (double)t->hdr.expert_bytes / 1048576.0,
               (unsigned long long)cfg.budget_pages,
               (unsigned long long)total_pages(t, cfg.page_bytes), cost.m.name);
        print_header();
        for (int s = 0; s < a.n_sets && !rc; s++) {
            apply_set(&a.sets[s], &cfg);
            mvm_sim_result r;
            if (mvm_sim_run(t, &cost, &cfg, &r) != MVM_OK)
                rc = mvm_cli_error("sim", NULL);
            else
                print_row(a.sets[s].label, &r);
        }
    } else if (!rc) {
        rc = sweep(&a, t, &cost, &cfg);
    }
    mvm_sim_inputs_free(&in);
    mvm_trace_free(t);
    return rc;
}
