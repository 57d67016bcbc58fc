/* The MOEVM_* options table and its parsers (see options.h). */
#include "vmm/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

static const mvm_option_desc options[MVM_OPTION_COUNT_] = {
    [MVM_OPTION_GPU_BUDGET] = {"MOEVM_GPU_BUDGET", MVM_OPT_BUDGET, "auto", NULL,
                               "device memory for expert pages: bytes (8G), a percentage of "
                               "the experts' pages (25%; 100% holds them all; under the "
                               "interposer, of the device's memory), or auto (90% of free "
                               "device memory less the engine's context beside the experts; "
                               "on the host backend the engine reads the experts at their "
                               "homes, a library space holds them all)"},
    [MVM_OPTION_BACKEND] = {"MOEVM_BACKEND", MVM_OPT_CHOICE, "auto", "auto|host|cuda",
                            "physical backend: cuda when a CUDA device is usable, else host"},
    [MVM_OPTION_DEVICE] = {"MOEVM_DEVICE", MVM_OPT_INT, "0", NULL, "CUDA device ordinal"},
    [MVM_OPTION_PAGE_SIZE] = {"MOEVM_PAGE_SIZE", MVM_OPT_SIZE, "0", NULL,
                              "page size of the expert space; 0 = the backend's default "
                              "(2 MiB); else a multiple of the backend's granularity"},
    [MVM_OPTION_CLEAN_EVICT] = {"MOEVM_CLEAN_EVICT", MVM_OPT_CHOICE, "on", "off|on",
                                "spaces whose pages the device may write (the interposer's): "
                                "skip the write-back of an evicted page whose device digest "
                                "equals the one taken when it was loaded (cuda backend)"},
    [MVM_OPTION_HOME_MAP] = {"MOEVM_HOME_MAP", MVM_OPT_CHOICE, "on", "off|on",
                             "cuda backend, devices with HOST_NUMA VMM: map non-resident "
                             "pages to their host homes, so kernels can read any expert in "
                             "place; off leaves them unmapped: loads and evictions remap "
                             "about half as much (docs/perf/vmm.md), but every expert a "
                             "kernel reads must be resident (the interposer keeps them "
                             "mapped)"},
    [MVM_OPTION_LOG] = {"MOEVM_LOG", MVM_OPT_CHOICE, "warn", "off|warn|info|debug",
                        "what libmoevm prints to stderr"},
    [MVM_OPTION_CUDA_LIBRARY] = {"MOEVM_CUDA_LIBRARY", MVM_OPT_STRING, "libcuda.so.1", NULL,
                                 "the CUDA driver library the cuda backend loads"},
    [MVM_OPTION_THREADS] = {"MOEVM_THREADS", MVM_OPT_INT, "0", NULL,
                            "CPU threads of the engine (`moevm run -t`); 0 = one per core near "
                            "the GPU, or per core of the caller's NUMA node"},
    [MVM_OPTION_CPU_SIMD] = {"MOEVM_CPU_SIMD", MVM_OPT_CHOICE, "auto",
                             "auto|avx512vnni|avx512|avx2|dotprod|neon|scalar",
                             "SIMD level of the CPU kernels; auto = the best this CPU has (a "
                             "level it lacks is an error)"},
    [MVM_OPTION_PRELOAD_MIN] = {"MOEVM_PRELOAD_MIN", MVM_OPT_SIZE, "2M", NULL,
                                "interposer: device allocations of at least this many bytes "
                                "become ranges of the managed space; smaller ones stay native"},
    [MVM_OPTION_OVERSUBSCRIBE] = {"MOEVM_OVERSUBSCRIBE", MVM_OPT_SIZE, "0", NULL,
                                  "interposer: host-backed bytes the program may allocate "
                                  "beyond MOEVM_GPU_BUDGET (pinned at the first managed "
                                  "allocation); 0 = none"},
    [MVM_OPTION_PRELOAD_SLICES] = {"MOEVM_PRELOAD_SLICES", MVM_OPT_CHOICE, "on", "off|on",
                                   "interposer: cut a tensor whose launches point at a stride "
                                   "of a page or more inside it (the experts of a fused MoE "
                                   "weight) into slices made resident one by one"},
    [MVM_OPTION_EVICT] = {"MOEVM_EVICT", MVM_OPT_STRING, "reuse", NULL,
                          "engine and interposer: the evict policy module (reuse, lru, lfu, "
                          "score, workload, lcp; docs/policies.md)"},
    [MVM_OPTION_EVICT_ARGS] = {"MOEVM_EVICT_ARGS", MVM_OPT_STRING, "", NULL,
                               "engine and interposer: the evict module's parameters, "
                               "\"name=value,...\""},
    [MVM_OPTION_PREDICT] = {"MOEVM_PREDICT", MVM_OPT_STRING, "none", NULL,
                            "engine: the predict policy module whose forecast of the next "
                            "layer's experts is prefetched (none, gate, residual, learned; "
                            "docs/policies.md)"},
    [MVM_OPTION_PREDICT_ARGS] = {"MOEVM_PREDICT_ARGS", MVM_OPT_STRING, "", NULL,
                                 "engine: the predict module's parameters, \"name=value,...\""},
    [MVM_OPTION_ROUTE] = {"MOEVM_ROUTE", MVM_OPT_STRING, "none", NULL,
                          "engine: the route policy module, which may run a resident expert "
                          "in place of a selected one that is not (none: the exact model; "
                          "importance; docs/policies.md)"},
    [MVM_OPTION_ROUTE_ARGS] = {"MOEVM_ROUTE_ARGS", MVM_OPT_STRING, "", NULL,
                               "engine: the route module's parameters, \"name=value,...\""},
    [MVM_OPTION_CONFIG] = {"MOEVM_CONFIG", MVM_OPT_STRING, "none", NULL,
                           "engine: the config policy module, which sets per-layer budgets "
                           "and the split θ of cached experts (none: one budget for all "
                           "layers; uniform, hot, fixedpoint; docs/policies.md)"},
    [MVM_OPTION_CONFIG_ARGS] = {"MOEVM_CONFIG_ARGS", MVM_OPT_STRING, "", NULL,
                                "engine: the config module's parameters, \"name=value,...\""},
    [MVM_OPTION_ASSIGN] = {"MOEVM_ASSIGN", MVM_OPT_STRING, "gpu", NULL,
                           "engine on a GPU: the assign policy module, which runs each expert "
                           "of a step on the GPU (resident, loaded, or read from its home) or "
                           "on the CPU (gpu: always the GPU; twoptr, greedy, presched; "
                           "docs/policies.md)"},
    [MVM_OPTION_ASSIGN_ARGS] = {"MOEVM_ASSIGN_ARGS", MVM_OPT_STRING, "", NULL,
                                "engine: the assign module's parameters, \"name=value,...\""},
    [MVM_OPTION_ADMIT] = {"MOEVM_ADMIT", MVM_OPT_CHOICE, "on", "off|on",
                          "engine on a GPU: an expert a step ran from its home (on the CPU, or "
                          "read in place) is loaded into the device cache in the background "
                          "afterwards when the evict module would keep it over its victim "
                          "and no other copy is queued (docs/policies.md)"},
    [MVM_OPTION_COST] = {"MOEVM_COST", MVM_OPT_STRING, "h100", NULL,
                         "engine and simulator: the machine the cost model describes, a "
                         "preset (rtx3090, a6000, a100, h100) or a JSON cost file "
                         "(docs/cost-format.md; `moevm calibrate` writes one)"},
    [MVM_OPTION_REPORT] = {"MOEVM_REPORT", MVM_OPT_STRING, "", NULL,
                           "interposer: write a JSON report (allocations by call site, moves, "
                           "hit rate, time waited) to this path at exit"},
    [MVM_OPTION_REPORT_SKIP] = {"MOEVM_REPORT_SKIP", MVM_OPT_STRING, "libcudart,libc10_cuda",
                                NULL,
                                "interposer: libraries (comma-separated name prefixes) whose "
                                "frames a call site skips, as it skips the interposer's own: "
                                "the CUDA runtime and PyTorch's caching allocator, so that "
                                "the site names their caller; none: keep every frame"},
    [MVM_OPTION_KV_TYPE] = {"MOEVM_KV_TYPE", MVM_OPT_CHOICE, "f16", "f16|f32",
                            "engine: the type of the KV cache's elements (`moevm run "
                            "--kv-type`); f16 keeps half the bytes, f32 the exact values"},
};

const mvm_option_desc *mvm_option_describe(mvm_option_id id)
{
    return (unsigned)id < MVM_OPTION_COUNT_ ? &options[id] : NULL;
}

static const char *type_name(mvm_option_type t)
{
    switch (t) {
    case MVM_OPT_SIZE: return "size";
    case MVM_OPT_BUDGET: return "budget";
    case MVM_OPT_INT: return "integer";
    case MVM_OPT_CHOICE: return "choice";
    case MVM_OPT_STRING: return "string";
    }
    return "?";
}

int mvm_parse_size(const char *s, uint64_t *out)
{
    /* Decimal digits and a point only: strtod would also take hex, exponents, inf, nan. */
    size_t digits = s ? strspn(s, "0123456789.") : 0;
    if (digits == 0 || (s[digits] && !isalpha((unsigned char)s[digits])) ||
        tolower((unsigned char)s[digits]) == 'e')
        return -1;
    char num[64];
    if (digits >= sizeof num)
        return -1;
    memcpy(num, s, digits);
    num[digits] = 0;
    errno = 0;
    char *end;
    double v = strtod(num, &end);
    if (*end || errno || !isfinite(v))
        return -1;
    end = (char *)s + digits;
    /* Accept "64K", "64KB", "64KiB" (all binary), or plain bytes. */
    static const char units[] = "KMGT";
    double mult = 1;
    if (*end) {
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (!u)
            return -1;
        mult = ldexp(1.0, 10 * (int)(u - units + 1));
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    if (*end)
        return -1;
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0 || bytes != floor(bytes))
        return -1; /* overflow, or a fraction of a byte */
    *out = (uint64_t)bytes;
    return 0;
}

int mvm_parse_budget(const char *s, uint64_t *bytes, double *frac)
{
    *frac = 0;
    if (s && strcmp(s, "auto") == 0) {
        *bytes = MVM_BUDGET_AUTO;
        return 0;
    }
    size_t n = s ? strlen(s) : 0;
    if (n > 1 && s[n - 1] == '%') {
        char num[64];
        if (n - 1 >= sizeof num)
            return -1;
        memcpy(num, s, n - 1);
        num[n - 1] = 0;
        char *end;
        errno = 0;
        double p = strtod(num, &end);
        if (*end || end == num || errno || !(p > 0 && p <= 100) || isspace((unsigned char)*num))
            return -1;
        *bytes = 0;
        *frac = p / 100;
        return 0;
    }
    if (mvm_parse_size(s, bytes) != 0 || *bytes == MVM_BUDGET_AUTO)
        return -1;
    return 0;
}

static int parse_int(const char *s, int64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v > INT32_MAX)
        return -1;
    *out = v;
    return 0;
}

static int parse_choice(const char *s, const char *choices, int64_t *out)
{
    size_t n = strlen(s);
    int64_t idx = 0;
    for (const char *c = choices; *c; idx++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncasecmp(c, s, n) == 0) {
            *out = idx;
            return 0;
        }
        c += len + (bar ? 1 : 0);
    }
    return -1;
}

static const char *expectation(const mvm_option_desc *d, char *buf, size_t len)
{
    switch (d->type) {
    case MVM_OPT_SIZE: return "a size in bytes with an optional K/M/G/T suffix, e.g. 2M";
    case MVM_OPT_BUDGET:
        return "a size with an optional K/M/G/T suffix (8G), a percentage in (0,100] (25%), "
               "or auto";
    case MVM_OPT_INT: return "a non-negative integer";
    case MVM_OPT_CHOICE: snprintf(buf, len, "one of %s", d->choices); return buf;
    case MVM_OPT_STRING: return "a string";
    }
    return "?";
}

static int parse_value(const mvm_option_desc *d, const char *s, mvm_option_value *v)
{
    memset(v, 0, sizeof *v);
    switch (d->type) {
    case MVM_OPT_SIZE: {
        uint64_t b;
        if (mvm_parse_size(s, &b) != 0 || b > INT64_MAX)
            return -1;
        v->i = (int64_t)b;
        return 0;
    }
    case MVM_OPT_BUDGET: {
        uint64_t b;
        if (mvm_parse_budget(s, &b, &v->frac) != 0)
            return -1;
        v->i = (int64_t)b; /* MVM_BUDGET_AUTO reads back as -1 through the cast */
        return 0;
    }
    case MVM_OPT_INT: return parse_int(s, &v->i);
    case MVM_OPT_CHOICE: return parse_choice(s, d->choices, &v->i);
    case MVM_OPT_STRING:
        v->s = s;
        return *s || !*d->def ? 0 : -1; /* empty only where empty means "unset" */
    }
    return -1;
}

mvm_status mvm_option_get(mvm_option_id id, mvm_option_value *out, char *msg, size_t msg_len)
{
    const mvm_option_desc *d = mvm_option_describe(id);
    if (!d) {
        snprintf(msg, msg_len, "unknown option id %d", (int)id);
        return MVM_ERR_INVALID;
    }
    const char *env = getenv(d->name);
    const char *s = env ? env : d->def;
    if (parse_value(d, s, out) == 0)
        return MVM_OK;
    char buf[128];
    snprintf(msg, msg_len, "%s=%s: not valid (expected %s)", d->name, s,
             expectation(d, buf, sizeof buf));
    return MVM_ERR_OPTION;
}

mvm_status mvm_option_read(mvm_option_id id, mvm_option_value *out)
{
    char msg[512];
    mvm_status st = mvm_option_get(id, out, msg, sizeof msg);
    return st == MVM_OK ? MVM_OK : mvm_fail(st, "%s", msg);
}

/* Edit distance, to suggest MOEVM_GPU_BUDGET for MOEVM_GPU_BUGDET. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (lb >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

extern char **environ;

/* Names other modules read (the engine, the interposer) register here as they are built;
 * until then they are unknown and get a warning, which is what a user with a typo needs. */
mvm_status mvm_options_check(void)
{
    for (int id = 0; id < MVM_OPTION_COUNT_; id++) {
        mvm_option_value v;
        mvm_status st = mvm_option_read((mvm_option_id)id, &v);
        if (st != MVM_OK)
            return st;
    }
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "MOEVM_", 6) != 0)
            continue;
        char name[128];
        size_t n = strcspn(*e, "=");
        if (n >= sizeof name)
            n = sizeof name - 1;
        memcpy(name, *e, n);
        name[n] = 0;
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (int id = 0; id < MVM_OPTION_COUNT_; id++) {
            size_t d = distance(name, options[id].name);
            if (d < best_d) {
                best_d = d;
                best = options[id].name;
            }
        }
        if (best_d == 0)
            continue;
        if (best_d <= 3)
            mvm_log(MVM_LOG_WARN, "%s is not a moevm option (did you mean %s?)", name, best);
        else
            mvm_log(MVM_LOG_WARN, "%s is not a moevm option (see `moevm options`)", name);
    }
    return MVM_OK;
}

void mvm_options_print_markdown(FILE *f)
{
    fprintf(f, "| variable | type | default | description |\n|---|---|---|---|\n");
    for (int id = 0; id < MVM_OPTION_COUNT_; id++) {
        const mvm_option_desc *d = &options[id];
        char type[96];
        if (d->type == MVM_OPT_CHOICE)
            snprintf(type, sizeof type, "%s", d->choices);
        else
            snprintf(type, sizeof type, "%s", type_name(d->type));
        /* '|' inside a cell must be escaped in markdown tables. */
        fprintf(f, "| `%s` | ", d->name);
        for (const char *c = type; *c; c++)
            fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, f);
        fprintf(f, " | `%s` | %s |\n", d->def, d->doc);
    }
}

void mvm_options_print_effective(FILE *f)
{
    for (int id = 0; id < MVM_OPTION_COUNT_; id++) {
        const mvm_option_desc *d = &options[id];
        const char *env = getenv(d->name);
        fprintf(f, "  %-20s %-14s %s\n", d->name, env ? env : d->def,
                env ? "(environment)" : "(default)");
    }
}
