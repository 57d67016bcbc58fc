/* `moevm run`'s closing report (run_report.h). */
#include "tools/run_report.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/prefetch.h"
#include "engine/forward/residency.h"
#include "engine/forward/substitute.h"
#include "tools/cli.h"

enum { MOD_EVICT, MOD_PREDICT, MOD_ROUTE, MOD_CONFIG, MOD_ASSIGN, MOD_COUNT };
static const char *const role_names[MOD_COUNT] = {"evict", "predict", "route", "config",
                                                  "assign"};

/* What the memory manager did, as both reports tell it. */
struct memory {
    mvm_resid_stats rs;
    mvm_stats vs;
    mvm_space_info info;
    mvm_prefetch_stats ps;
    uint64_t substituted;
    const char *module[MOD_COUNT]; /* NULL: not in use */
};

/* The modules in use: evict wherever there is a budget (a budget needs room made); the
 * others when one was chosen. "none" is none, and the assign module's default "gpu" runs
 * every expert where the run would without one. (Their counts do not tell: a prefetch may
 * be the evict or the assign module's, and an expert read at its home counts as a CPU
 * run.) */
static void get_memory(const mvm_run_report *r, struct memory *m)
{
    const mvm_resid *res = mvm_ctx_residency(r->ctx);
    mvm_resid_get_stats(res, &m->rs);
    mvm_space_get_stats(r->model->space, &m->vs);
    mvm_space_get_info(r->model->space, &m->info);
    m->substituted = mvm_substitutor_count(mvm_ctx_substitutor(r->ctx));
    m->module[MOD_EVICT] = r->model->experts_at_home ? NULL : mvm_resid_evict_name(res);
    m->module[MOD_PREDICT] = mvm_prefetcher_name(mvm_ctx_prefetcher(r->ctx));
    mvm_prefetcher_get_stats(mvm_ctx_prefetcher(r->ctx), &m->ps);
    m->module[MOD_ROUTE] = mvm_substitutor_name(mvm_ctx_substitutor(r->ctx));
    m->module[MOD_CONFIG] = mvm_resid_config_name(res);
    m->module[MOD_ASSIGN] = mvm_resid_assign_name(res);
    for (int i = MOD_PREDICT; i < MOD_COUNT; i++)
        if (!strcmp(m->module[i], "none") || (i == MOD_ASSIGN && !strcmp(m->module[i], "gpu")))
            m->module[i] = NULL;
}

static double per_second(double n, double seconds)
{
    return seconds > 0 ? n / seconds : 0.0;
}

static void print_prefetches(const mvm_resid_stats *rs)
{
    fprintf(stderr, "%" PRIu64 " prefetched, %" PRIu64 " used, %" PRIu64 " in time",
            rs->prefetches, rs->prefetch_used, rs->prefetch_hits);
    if (rs->prefetches_cut)
        fprintf(stderr, ", %" PRIu64 " cut at the router", rs->prefetches_cut);
}

/* " (hit ...; evict lru: 3 out; ...)": the hit rate and the counts beside it that are not
 * zero (the partial share also whenever a config module could split), then each module in
 * use with its counts. */
static void print_residency(const struct memory *m)
{
    const mvm_resid_stats *rs = &m->rs;
    double acc = rs->accesses ? (double)rs->accesses : 1;
    fprintf(stderr, " (hit %.1f%%", 100.0 * (double)rs->hits / acc);
    if (m->module[MOD_CONFIG] || rs->partial_hits)
        fprintf(stderr, ", %.1f%% partial", 100.0 * (double)rs->partial_hits / acc);
    if (rs->bypassed)
        fprintf(stderr, ", %" PRIu64 " from host", rs->bypassed);
    if (rs->extra_rounds)
        fprintf(stderr, ", %" PRIu64 " extra rounds", rs->extra_rounds);
    if (!m->module[MOD_PREDICT] && rs->prefetches) { /* the evict or assign module's */
        fputs(", ", stderr);
        print_prefetches(rs);
    }
    for (int i = 0; i < MOD_COUNT; i++) {
        if (!m->module[i])
            continue;
        fprintf(stderr, "; %s %s: ", role_names[i], m->module[i]);
        if (i == MOD_EVICT)
            fprintf(stderr, "%" PRIu64 " out", rs->evictions);
        else if (i == MOD_PREDICT) {
            print_prefetches(rs);
            if (m->ps.named) /* the forecasts themselves, resident or not */
                fprintf(stderr, ", %.0f%% of %" PRIu64 " named used",
                        100.0 * (double)m->ps.named_used / (double)m->ps.named, m->ps.named);
        }
        else if (i == MOD_ROUTE)
            fprintf(stderr, "%" PRIu64 " substituted", m->substituted);
        else if (i == MOD_CONFIG)
        {
            fprintf(stderr, "%" PRIu64 " changes, %" PRIu64 " split", rs->reconfigs, rs->splits);
            if (rs->held)
                fprintf(stderr, ", %" PRIu64 " held", rs->held);
        }
        else
            fprintf(stderr, "%" PRIu64 " on CPU, %" PRIu64 " zero-copy, %" PRIu64 " planned",
                    rs->cpu_runs, rs->zerocopy_runs, rs->planned);
    }
    fprintf(stderr, ") | moved %.1f MiB, waited %.3f s for it\n",
            (double)m->vs.bytes_moved / 1048576.0, rs->wait_s);
}

static void print_dist(const mvm_dist *d)
{
    mvm_dist_stats ds;
    mvm_dist_get_stats(d, &ds);
    char held[256] = "";
    for (uint32_t r = 0, o = 0; r < ds.ranks && o < sizeof held - 16; r++)
        o += (uint32_t)snprintf(held + o, sizeof held - o, "%s%u", r ? "/" : "", ds.held[r]);
    char homes[48] = ""; /* Prism's several home servers: which one this report is */
    if (ds.homes > 1)
        snprintf(homes, sizeof homes, ", home %u of %u", ds.rank, ds.homes);
    fprintf(stderr, "distributed: %u ranks holding %s experts%s | remote %" PRIu64 " of %" PRIu64
            " expert rows (%.1f%%) in %" PRIu64 " requests, %.2f MiB out, %.2f MiB back, "
            "waited %.3f s | %u placements, %u migrations moving %.2f MiB\n",
            ds.ranks, held, homes, ds.remote_rows, ds.rows,
            ds.rows ? 100.0 * (double)ds.remote_rows / (double)ds.rows : 0.0, ds.messages,
            (double)ds.bytes_sent / 1048576.0, (double)ds.bytes_back / 1048576.0, ds.waited_s,
            ds.placements, ds.migrations, (double)ds.migrated_bytes / 1048576.0);
}

void mvm_run_report_text(const mvm_run_report *r)
{
    struct memory m;
    get_memory(r, &m);
    fprintf(stderr, "prefill %u tokens %.1f tok/s | decode %u tokens %.2f tok/s | expert "
            "accesses %" PRIu64, r->n_prefilled, per_second(r->n_prefilled, r->t_prefill),
            r->n_generated, per_second(r->n_generated, r->t_decode), m.rs.accesses);
    if (r->model->experts_at_home) /* nothing moved: no residency to report */
        fprintf(stderr, ", all read at their homes\n");
    else
        print_residency(&m);
    if (r->dist)
        print_dist(r->dist);
}

/* {"tokens", "seconds", "tokens_per_second"} */
static void add_phase(cJSON *o, const char *name, uint32_t tokens, double seconds)
{
    cJSON *p = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(p, "tokens", tokens);
    cJSON_AddNumberToObject(p, "seconds", seconds);
    cJSON_AddNumberToObject(p, "tokens_per_second", per_second(tokens, seconds));
}

/* The memory manager's counters, all of them whatever the modules (a script reads the same
 * keys from every run), and the modules in use by role. */
static void add_memory(cJSON *o, const mvm_run_report *r)
{
    struct memory m;
    get_memory(r, &m);
    const mvm_resid_stats *rs = &m.rs;
    cJSON *j = cJSON_AddObjectToObject(o, "memory");
    cJSON_AddStringToObject(j, "backend", m.info.backend);
    cJSON_AddBoolToObject(j, "experts_at_home", r->model->experts_at_home);
    cJSON_AddNumberToObject(j, "budget_bytes", r->model->experts_at_home ? 0.0
                            : (double)m.info.device_bytes);
    cJSON_AddNumberToObject(j, "page_size", (double)m.info.page_size);
    const struct { const char *key; uint64_t v; } counts[] = {
        {"accesses", rs->accesses}, {"hits", rs->hits}, {"misses", rs->accesses - rs->hits},
        {"partial_hits", rs->partial_hits}, {"from_host", rs->bypassed},
        {"extra_rounds", rs->extra_rounds}, {"evictions", rs->evictions},
        {"prefetched", rs->prefetches}, {"prefetch_used", rs->prefetch_used},
        {"prefetch_in_time", rs->prefetch_hits}, {"prefetches_cut", rs->prefetches_cut},
        {"substituted", m.substituted},
        {"config_changes", rs->reconfigs}, {"splits", rs->splits}, {"held", rs->held},
        {"cpu_runs", rs->cpu_runs}, {"zerocopy_runs", rs->zerocopy_runs},
        {"planned", rs->planned}, {"bytes_moved", m.vs.bytes_moved},
        {"forecast_named", m.ps.named}, {"forecast_used", m.ps.named_used}};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        cJSON_AddNumberToObject(j, counts[i].key, (double)counts[i].v);
    cJSON_AddNumberToObject(j, "load_wait_seconds", rs->wait_s);
    if (r->model->experts_at_home || !rs->accesses) /* no residency, or nothing to rate */
        cJSON_AddNullToObject(j, "hit_rate");
    else
        cJSON_AddNumberToObject(j, "hit_rate", (double)rs->hits / (double)rs->accesses);
    cJSON *mods = cJSON_AddObjectToObject(j, "modules");
    for (int i = 0; i < MOD_COUNT; i++)
        if (m.module[i])
            cJSON_AddStringToObject(mods, role_names[i], m.module[i]);
}

static void add_dist(cJSON *o, const mvm_dist *d)
{
    mvm_dist_stats ds;
    mvm_dist_get_stats(d, &ds);
    cJSON *j = cJSON_AddObjectToObject(o, "distributed");
    cJSON *held = cJSON_AddArrayToObject(j, "held");
    for (uint32_t r = 0; r < ds.ranks; r++)
        cJSON_AddItemToArray(held, cJSON_CreateNumber(ds.held[r]));
    const struct { const char *key; double v; } fields[] = {
        {"ranks", ds.ranks}, {"homes", ds.homes}, {"rank", ds.rank}, {"rows", (double)ds.rows}, {"remote_rows", (double)ds.remote_rows},
        {"requests", (double)ds.messages}, {"bytes_sent", (double)ds.bytes_sent},
        {"bytes_back", (double)ds.bytes_back}, {"waited_seconds", ds.waited_s},
        {"placements", ds.placements}, {"migrations", ds.migrations},
        {"migrated_bytes", (double)ds.migrated_bytes}};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        cJSON_AddNumberToObject(j, fields[i].key, fields[i].v);
}

/* s[0..n) as a JSON string of o's, valid UTF-8 (a model emits bytes that are not). */
static int add_text(cJSON *o, const char *key, const char *s, size_t n)
{
    char *valid = mvm_cli_valid_utf8(s, n);
    int ok = valid && cJSON_AddStringToObject(o, key, valid);
    free(valid);
    return ok;
}

int mvm_run_report_json(const mvm_run_report *r, FILE *out)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o && add_text(o, "prompt", r->prompt, r->prompt_len) &&
             add_text(o, "text", r->text, r->text_len);
    if (ok) {
        cJSON_AddStringToObject(o, "model", r->model_path);
        cJSON_AddStringToObject(o, "arch", r->model->arch->name);
        cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
        cJSON_AddNumberToObject(o, "n_generated", r->n_generated);
        cJSON_AddNumberToObject(o, "n_predict", r->n_predict);
        cJSON_AddBoolToObject(o, "interrupted", r->interrupted);
        cJSON_AddStringToObject(o, "stop", r->interrupted ? "interrupted"
                                : r->reversed ? "reverse_prompt"
                                : r->n_generated < r->n_predict ? "eog"
                                : "n_predict");
        cJSON *ids = cJSON_AddArrayToObject(o, "tokens");
        for (uint32_t i = 0; ids && i < r->n_generated; i++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->generated[i]));
        add_phase(o, "prefill", r->n_prefilled, r->t_prefill);
        add_phase(o, "decode", r->n_generated, r->t_decode);
        add_memory(o, r);
        if (r->dist)
            add_dist(o, r->dist);
    }
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        fprintf(stderr, "moevm run: out of memory for the JSON report\n");
        return 1;
    }
    fprintf(out, "%s\n", text);
    fflush(out);
    free(text);
    return 0;
}
