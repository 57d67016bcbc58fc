/* The MOEVM_* options table: vmm's options, the registry of every layer's, and the
 * parsers (see options.h). */
#include "vmm/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

const mvm_option_desc mvm_opt_gpu_budget = {
    "MOEVM_GPU_BUDGET", MVM_OPT_BUDGET, "auto", NULL,
    "device memory for expert pages: bytes (8G), a percentage of "
    "the experts' pages (25%; 100% holds them all; under the "
    "interposer, of the device's memory), or auto (90% of free "
    "device memory less the engine's context beside the experts; "
    "on the host backend the engine reads the experts at their "
    "homes, a library space holds them all)"};

const mvm_option_desc mvm_opt_backend = {
    "MOEVM_BACKEND", MVM_OPT_CHOICE, "auto", "auto|host|cuda",
    "physical backend: cuda when a CUDA device is usable, else host"};

const mvm_option_desc mvm_opt_device = {
    "MOEVM_DEVICE", MVM_OPT_INT, "0", NULL,
    "CUDA device ordinal"};

const mvm_option_desc mvm_opt_page_size = {
    "MOEVM_PAGE_SIZE", MVM_OPT_SIZE, "0", NULL,
    "page size of the expert space; 0 = the backend's default "
    "(2 MiB; a slot space's, MOEVM_SLOTS: 64 KiB or more, at most 64 an "
    "expert); else a multiple of the backend's granularity (a slot space's "
    "may also divide it, in multiples of 4 KiB)"};

const mvm_option_desc mvm_opt_clean_evict = {
    "MOEVM_CLEAN_EVICT", MVM_OPT_CHOICE, "on", "off|on",
    "spaces whose pages the device may write (the interposer's): "
    "skip the write-back of an evicted page whose device digest "
    "equals the one taken when it was loaded (cuda backend)"};

const mvm_option_desc mvm_opt_home_map = {
    "MOEVM_HOME_MAP", MVM_OPT_CHOICE, "off", "off|on",
    "cuda backend, devices with HOST_NUMA VMM: on maps non-resident "
    "pages to their host homes, so kernels can read any expert in "
    "place at its own address, but each page of a move "
    "is then its own remap; off (the default) leaves them "
    "unmapped, so a move is one map of a slab: on an H100 moves "
    "2-3x and offloaded decode 2.6-6x faster (docs/perf/vmm.md). The "
    "interposer always maps them"};

const mvm_option_desc mvm_opt_huge_pages = {
    "MOEVM_HUGE_PAGES", MVM_OPT_CHOICE, "on", "off|on",
    "on advises the host homes for transparent huge pages, which the "
    "kernel grants where its THP settings allow (host backend: "
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled at advise or "
    "always; cuda's registered homes: enabled at madvise or always): "
    "the CPU reads experts in 2 MiB pages (a 16-layer OLMoE's decode: "
    "3% faster, median of 12 pairs, docs/perf/cpu.md); an expert's last "
    "page is memory "
    "whole where that wastes at most an eighth of its bytes, else stays "
    "in 4 KiB pages; off keeps 4 KiB pages throughout"};

const mvm_option_desc mvm_opt_copy_piece = {
    "MOEVM_COPY_PIECE", MVM_OPT_SIZE, "4M", NULL,
    "a prefetch's copy goes out in pieces of this many bytes (whole "
    "pages), two at most on the bus, and an on-demand load asked for "
    "meanwhile is copied before the next piece: it waits behind two "
    "pieces, not the whole expert; 0 = one piece"};

const mvm_option_desc mvm_opt_copy_streams = {
    "MOEVM_COPY_STREAMS", MVM_OPT_INT, "1", "1..8",
    "cuda backend: the streams a load's bytes are split across, at "
    "page boundaries (PreScope's AsyncIO uses 3, one per weight "
    "matrix); 1 keeps every load on one stream. On an H200 over PCIe "
    "Gen5 one stream fills the link and more gained nothing "
    "(docs/perf/vmm.md); vmm_costs section 9 (bench/gpu/run.sh --only "
    "9) measures 1 to 4 on a device"};

const mvm_option_desc mvm_opt_move_spin = {
    "MOEVM_MOVE_SPIN", MVM_OPT_INT, "auto", "0..100000",
    "microseconds the migration worker, idle after a batch, and a "
    "thread waiting for it (a step's misses, a move) spin before they "
    "sleep: a wake-up from a sleep costs tens of microseconds on a VM, "
    "and a step with misses waits for the worker at least twice; auto "
    "is 2000 on the cuda backend where the process may run on 4 CPUs "
    "or more, else 0 (sleep at once)"};

const mvm_option_desc mvm_opt_log = {
    "MOEVM_LOG", MVM_OPT_CHOICE, "warn", "off|warn|info|debug",
    "what libmoevm prints to stderr"};

const mvm_option_desc mvm_opt_cuda_library = {
    "MOEVM_CUDA_LIBRARY", MVM_OPT_STRING, "libcuda.so.1", NULL,
    "the CUDA driver library the cuda backend loads"};

static const mvm_option_desc *const vmm_list[] = {
    &mvm_opt_gpu_budget, &mvm_opt_backend, &mvm_opt_device, &mvm_opt_page_size,
    &mvm_opt_clean_evict, &mvm_opt_home_map, &mvm_opt_huge_pages, &mvm_opt_copy_piece, &mvm_opt_copy_streams,
    &mvm_opt_move_spin, &mvm_opt_log, &mvm_opt_cuda_library,
};

static const mvm_option_table vmm_options = {vmm_list, sizeof vmm_list / sizeof *vmm_list};

/* The registered tables; vmm's is always the first. */
static const mvm_option_table *tables[8] = {&vmm_options};
static size_t n_tables = 1;

mvm_status mvm_options_register(const mvm_option_table *t)
{
    for (size_t i = 0; i < n_tables; i++)
        if (tables[i] == t)
            return MVM_OK;
    if (n_tables == sizeof tables / sizeof *tables)
        return mvm_fail(MVM_ERR_INVALID, "too many option tables (at most %zu)",
                        sizeof tables / sizeof *tables);
    tables[n_tables++] = t;
    return MVM_OK;
}

/* The k-th registered option, in registration order; NULL past the last. */
static const mvm_option_desc *nth_option(size_t k)
{
    for (size_t t = 0; t < n_tables; k -= tables[t++]->n)
        if (k < tables[t]->n)
            return tables[t]->opts[k];
    return NULL;
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
    /* 0 bytes is refused here, as 0% is, so the message names the option or flag. */
    if (mvm_parse_size(s, bytes) != 0 || *bytes == MVM_BUDGET_AUTO || *bytes == 0)
        return -1;
    return 0;
}

/* A non-negative integer, within `range` ("LO..HI") when there is one. */
static int parse_int(const char *s, const char *range, int64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10), lo = 0, hi = INT32_MAX;
    if (range && sscanf(range, "%lld..%lld", &lo, &hi) != 2)
        return -1; /* a table's mistake: every value fails, named */
    if (*end || errno || v < lo || v > hi)
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
        return "a size above 0 with an optional K/M/G/T suffix (8G), a percentage in (0,100] "
               "(25%), or auto";
    case MVM_OPT_INT:
        snprintf(buf, len, "%s%s%s", d->choices ? "an integer in " : "a non-negative integer",
                 d->choices ? d->choices : "", strcmp(d->def, "auto") == 0 ? ", or auto" : "");
        return buf;
    case MVM_OPT_CHOICE: snprintf(buf, len, "one of %s", d->choices); return buf;
    case MVM_OPT_STRING: /* only an empty one fails: unset, the default applies */
        snprintf(buf, len, "a value, not an empty one; unset it for the default, %s", d->def);
        return buf;
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
    case MVM_OPT_INT:
        if (strcmp(d->def, "auto") == 0 && strcmp(s, "auto") == 0) {
            v->i = -1;
            return 0;
        }
        return parse_int(s, d->choices, &v->i);
    case MVM_OPT_CHOICE: return parse_choice(s, d->choices, &v->i);
    case MVM_OPT_STRING:
        v->s = s;
        return *s || !*d->def ? 0 : -1; /* empty only where empty means "unset" */
    }
    return -1;
}

mvm_status mvm_option_get(const mvm_option_desc *d, mvm_option_value *out, char *msg,
                          size_t msg_len)
{
    const char *env = getenv(d->name);
    const char *s = env ? env : d->def;
    if (parse_value(d, s, out) == 0)
        return MVM_OK;
    char buf[128];
    snprintf(msg, msg_len, "%s=%s: not valid (expected %s)", d->name, s,
             expectation(d, buf, sizeof buf));
    return MVM_ERR_OPTION;
}

mvm_status mvm_option_read(const mvm_option_desc *d, mvm_option_value *out)
{
    char msg[512];
    mvm_status st = mvm_option_get(d, out, msg, sizeof msg);
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

mvm_status mvm_options_check(void)
{
    const mvm_option_desc *d;
    for (size_t k = 0; (d = nth_option(k)); k++) {
        mvm_option_value v;
        mvm_status st = mvm_option_read(d, &v);
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
        for (size_t k = 0; (d = nth_option(k)); k++) {
            size_t dist = distance(name, d->name);
            if (dist < best_d) {
                best_d = dist;
                best = d->name;
            }
        }
        if (best_d == 0)
            continue;
        if (best_d <= 3)
            mvm_log(MVM_LOG_WARN, "%s is not an option this program reads (did you mean %s?)",
                    name, best);
        else
            mvm_log(MVM_LOG_WARN, "%s is not an option this program reads (`moevm options` "
                    "lists them all)", name);
    }
    return MVM_OK;
}

void mvm_options_print_markdown(FILE *f)
{
    fprintf(f, "| variable | type | default | description |\n|---|---|---|---|\n");
    const mvm_option_desc *d;
    for (size_t k = 0; (d = nth_option(k)); k++) {
        char type[96];
        if (d->type == MVM_OPT_CHOICE)
            snprintf(type, sizeof type, "%s", d->choices);
        else if (d->type == MVM_OPT_INT && d->choices)
            snprintf(type, sizeof type, "integer %s", d->choices);
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
    const mvm_option_desc *d;
    for (size_t k = 0; (d = nth_option(k)); k++) {
        const char *env = getenv(d->name);
        fprintf(f, "  %-20s %-14s %s\n", d->name, env ? env : d->def,
                env ? "(environment)" : "(default)");
    }
}
