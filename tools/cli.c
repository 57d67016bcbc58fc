/* Helpers shared by the subcommands (cli.h). */
#include "tools/cli.h"
#include "tools/cli_llama.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/api/threads.h"
#include "engine/forward/kv_cache.h"
#include "engine/plan/plan.h"
#include "moevm/moevm.h"
#include "policy/choose.h"
#include "vmm/options.h"

int mvm_cli_error(const char *cmd, const char *what)
{
    /* Some messages already start with the command's name ("train-predictor: ..."): once
     * is enough. */
    const char *msg = mvm_last_error();
    size_t n = strlen(cmd);
    if (!strncmp(msg, cmd, n) && !strncmp(msg + n, ": ", 2))
        msg += n + 2;
    fprintf(stderr, "moevm %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", msg);
    return 1;
}

int mvm_cli_choice(const char *cmd, const char *flag, const char *value,
                   const char *const *names, int *out)
{
    int n = 0;
    while (names[n])
        n++;
    for (int i = 0; i < n; i++)
        if (!strcmp(value, names[i])) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0, o = 0; i < n && o < (int)sizeof list; i++)
        o += snprintf(list + o, sizeof list - (size_t)o, "%s%s", names[i],
                      i + 2 < n ? ", " : i + 1 < n ? " or " : "");
    fprintf(stderr, "moevm %s: %s %s: expected %s\n", cmd, flag, value, list);
    return 2;
}

/* getopt_long's val for a long option: CLI_LONG + its row; --help's is CLI_HELP. */
enum { CLI_MAX_OPTS = 160, CLI_HELP = 255, CLI_LONG = 256 };

/* getopt_long's tables from the command's: the long options, and the short ones after ':'
 * (a missing value then returns ':', told apart from an unknown option) and 'h'. Built at
 * each call, so the iterator needs no storage of getopt's types. -1 on a table too long. */
static int build_tables(const mvm_cli_opt *opts, struct option *lo, char *shorts)
{
    int n = 0, i = 0;
    *shorts++ = ':';
    *shorts++ = 'h';
    for (; opts && (opts[i].name || opts[i].letter); i++) {
        if (i == CLI_MAX_OPTS)
            return -1;
        if (opts[i].name)
            lo[n++] = (struct option){opts[i].name, opts[i].value ? required_argument
                                                                  : no_argument,
                                      NULL, CLI_LONG + i};
        if (opts[i].letter) {
            *shorts++ = opts[i].letter;
            if (opts[i].value)
                *shorts++ = ':';
        }
    }
    lo[n++] = (struct option){"help", no_argument, NULL, CLI_HELP};
    lo[n] = (struct option){0};
    *shorts = '\0';
    return 0;
}

/* The index of the element getopt_long reads next: the first option ("-x...", not "-"
 * alone, an argument) at or after optind; -1 at "--" or the end. Permutation moves only
 * elements before optind, so this is the one. */
static int next_element(const mvm_cli_iter *it)
{
    for (int k = optind ? optind : 1; k < it->argc; k++)
        if (it->argv[k][0] == '-' && it->argv[k][1])
            return strcmp(it->argv[k], "--") ? k : -1;
    return -1;
}

/* getopt_long knows "--name" and "-c" only, so an element typed as a one-dash long name
 * ("-ngl", "-ngl=99") is handed to it as "--" + itself, matching the row named "-ngl",
 * from alias_buf; 1 when element k was so replaced (the caller puts it back). */
static int one_dash_alias(mvm_cli_iter *it, int k)
{
    const char *a = it->argv[k];
    size_t len = strcspn(a, "=");
    if (a[1] == '-' || strlen(a) + 3 > sizeof it->alias_buf)
        return 0;
    for (const mvm_cli_opt *o = it->opts; o && (o->name || o->letter); o++)
        if (o->name && o->name[0] == '-' && strlen(o->name) == len && !strncmp(o->name, a, len)) {
            snprintf(it->alias_buf, sizeof it->alias_buf, "--%s", a);
            it->argv[k] = it->alias_buf;
            return 1;
        }
    return 0;
}

/* The long name getopt_long's val stands for; NULL for a short option. */
static const char *long_name(const mvm_cli_iter *it, int val)
{
    return val == CLI_HELP ? "help" : val >= CLI_LONG ? it->opts[val - CLI_LONG].name : NULL;
}

/* "moevm <cmd>: <before><flag><after> (see --help)"; MVM_CLI_BAD. */
static int cli_fail(const mvm_cli_iter *it, const char *before, const char *after)
{
    fprintf(stderr, "moevm %s: %s%s%s (see %s)\n", it->cmd, before, it->flag, after,
            it->help ? it->help : "--help");
    return MVM_CLI_BAD;
}

/* After the last option: the positional arguments, no more than the command takes. */
static int cli_end(mvm_cli_iter *it)
{
    it->args = it->argv + optind;
    it->n_args = it->argc - optind;
    if (it->n_args <= it->max_args)
        return MVM_CLI_END;
    fprintf(stderr, "moevm %s: unexpected argument '%s' (see %s)\n", it->cmd,
            it->args[it->max_args], it->help ? it->help : "--help");
    return MVM_CLI_BAD;
}

/* Whether the command's table has a row for the option typed[0..len): "--name", or a lone
 * "-x" of its letters (one-dash names are one_dash_alias's). */
static int has_row(const mvm_cli_iter *it, const char *typed, size_t len)
{
    for (const mvm_cli_opt *o = it->opts; o && (o->name || o->letter); o++) {
        if (typed[1] == '-' && o->name && o->name[0] != '-' && strlen(o->name) == len - 2 &&
            !strncmp(o->name, typed + 2, len - 2))
            return 1;
        if (typed[1] != '-' && len == 2 && o->letter == typed[1])
            return 1;
    }
    return 0;
}

/* An element that is one of llama.cpp's flags (cli_llama.h), in a command that takes them
 * and has no row of its own for it, is handed to getopt_long as one of MVM_CLI_LLAMA_OPTS's
 * rows (with its "=value"), from alias_buf, so that getopt reads its value as any other's;
 * 1 when element k was so replaced (the caller puts it back). */
static int llama_alias(mvm_cli_iter *it, int k)
{
    const char *a = it->argv[k];
    const size_t len = strcspn(a, "=");
    int takes = 0;
    for (const mvm_cli_opt *o = it->opts; o && (o->name || o->letter); o++)
        takes |= o->id == MVM_CLI_LLAMA;
    if (!takes || has_row(it, a, len) || strlen(a) + 12 > sizeof it->alias_buf ||
        !(it->llama = mvm_cli_llama_find(it->cmd, a, len)))
        return 0;
    snprintf(it->alias_buf, sizeof it->alias_buf, "--%s%s",
             it->llama->value ? "\x01llama-v" : "\x01llama-f", a + len);
    it->argv[k] = it->alias_buf;
    return 1;
}

int mvm_cli_next(mvm_cli_iter *it)
{
    if (!it->started) {
        it->started = 1;
        optind = 0; /* glibc: a fresh walk, whatever an earlier parser left */
        opterr = 0; /* its messages are ours to write */
    }
    struct option lo[CLI_MAX_OPTS + 2];
    char shorts[2 * CLI_MAX_OPTS + 3];
    if (build_tables(it->opts, lo, shorts)) {
        fprintf(stderr, "moevm %s: more than %d option rows\n", it->cmd, CLI_MAX_OPTS);
        return MVM_CLI_BAD;
    }
    int k = next_element(it);
    char *typed = k >= 0 ? it->argv[k] : NULL;
    int alias = k >= 0 && (one_dash_alias(it, k) || llama_alias(it, k));
    int r = getopt_long(it->argc, it->argv, shorts, lo, NULL);
    if (alias)
        it->argv[k] = typed;
    if (r == -1 || !typed) /* getopt read element k, if any */
        return cli_end(it);
    /* the option as typed, for messages: "--name" or "-ngl" up to '=', else "-c" */
    const int is_long = alias || typed[1] == '-';
    snprintf(it->flag_buf, sizeof it->flag_buf, "%.*s",
             is_long ? (int)strcspn(typed, "=") : 2, typed);
    it->flag = it->flag_buf;
    /* a one-dash alias's "=value" is in alias_buf, which the next call reuses: point into
     * argv instead */
    it->value = alias && strchr(typed, '=') ? strchr(typed, '=') + 1 : optarg;
    const int val = r == '?' || r == ':' ? optopt : r;
    const char *name = long_name(it, val);
    /* getopt_long takes a unique prefix for the whole name: here only the exact name */
    if (is_long && (!name || (!alias && (name[0] == '-' || strcmp(it->flag + 2, name)))))
        return cli_fail(it, "unknown option ", "");
    if (r == '?')
        return cli_fail(it, name ? "" : "unknown option ", name ? " takes no value" : "");
    if (r == ':')
        return cli_fail(it, "", " needs a value");
    if (val == 'h' || val == CLI_HELP) {
        it->usage(stdout);
        return MVM_CLI_HELP;
    }
    int row = val - CLI_LONG;
    for (int i = 0; row < 0; i++)
        if (it->opts[i].letter == val)
            row = i;
    it->id = it->opts[row].id;
    if (it->id == MVM_CLI_LLAMA)
        return mvm_cli_llama_apply(it->cmd, it->llama, it->flag, it->value) ? MVM_CLI_BAD
                                                                            : mvm_cli_next(it);
    return MVM_CLI_OPTION;
}

int mvm_cli_list(const char *cmd, const char *flag, const char *value)
{
    size_t n = strlen(value);
    if (n && value[0] != ',' && value[n - 1] != ',' && !strstr(value, ",,"))
        return 0;
    fprintf(stderr, "moevm %s: %s %s: an empty item in the list\n", cmd, flag, value);
    return 2;
}

int mvm_cli_u32(const char *cmd, const char *flag, const char *value, uint32_t lo, uint32_t hi,
                uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = value ? strtoull(value, &end, 10) : 0;
    if (!value || !*value || *end || errno || value[0] == '-' || v < lo || v > hi) {
        fprintf(stderr, "moevm %s: %s %s: expected an integer in %u..%u\n", cmd, flag,
                value ? value : "(missing)", lo, hi);
        return 2;
    }
    *out = (uint32_t)v;
    return 0;
}

int mvm_cli_float(const char *cmd, const char *flag, const char *value, double lo, double hi,
                  float *out)
{
    char *end;
    double v = value ? strtod(value, &end) : NAN;
    if (!value || !*value || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "moevm %s: %s %s: expected a number in %g..%g\n", cmd, flag,
                value ? value : "(missing)", lo, hi);
        return 2;
    }
    *out = (float)v;
    return 0;
}

int mvm_cli_float_to_double(const char *cmd, const char *flag, const char *value, double lo,
                            double hi, double *out)
{
    float f;
    int rc = mvm_cli_float(cmd, flag, value, lo, hi, &f);
    if (!rc)
        *out = f;
    return rc;
}

int mvm_cli_kv_llama_flag(const char *flag)
{
    return strstr(flag, "-ct") || strstr(flag, "cache-type");
}

int mvm_cli_kv_type(const char *cmd, const char *flag, const char *value, const char **out)
{
    static const char *const types[MVM_KV_N_TYPES + 1] = MVM_KV_TYPES;
    static int noted;
    int i;
    if (mvm_cli_choice(cmd, flag, value, types, &i))
        return 2;
    if (mvm_cli_kv_llama_flag(flag)) {
        if (*out && strcmp(*out, types[i])) {
            fprintf(stderr, "moevm %s: %s %s: moevm's KV cache keeps keys and values in one "
                    "type, and %s was given before\n", cmd, flag, value, *out);
            return 2;
        }
        if (!noted++)
            fprintf(stderr, "moevm %s: %s: llama.cpp's, taken for keys and values alike (moevm's "
                    "--kv-type)\n", cmd, flag);
    }
    *out = types[i];
    return 0;
}

void mvm_cli_gpu_layers(const char *cmd, const char *flag)
{
    static int said;
    if (said++)
        return;
    fprintf(stderr, "moevm %s: %s: accepted and ignored: moevm gives experts a byte budget "
            "(--gpu-budget, --n-cpu-moe), not layers, and attention and dense weights always "
            "go to the GPU when there is one\n", cmd, flag);
}

int mvm_cli_n_cpu_moe(const char *cmd, const char *flag, const char *value, uint32_t *n)
{
    if (!value) { /* --cpu-moe */
        *n = MVM_CLI_CPU_MOE_ALL;
        return 0;
    }
    return mvm_cli_u32(cmd, flag, value, 0, MVM_CLI_CPU_MOE_ALL, n);
}

int mvm_cli_budget_or_cpu_moe(const char *cmd, int budget_given, int cpu_moe_given)
{
    if (!budget_given || !cpu_moe_given)
        return 0;
    fprintf(stderr, "moevm %s: give --gpu-budget or --n-cpu-moe, not both (both set the "
            "experts' device budget)\n", cmd);
    return 2;
}

int mvm_cli_cpu_moe(const char *cmd, uint32_t n_cpu_moe, mvm_model *m, mvm_space_desc *desc)
{
    if (mvm_plan_cpu_moe(m, n_cpu_moe, desc) != MVM_OK) {
        fprintf(stderr, "moevm %s: --n-cpu-moe %u: %s\n", cmd, n_cpu_moe, mvm_last_error());
        return 2;
    }
    mvm_cli_cpu_moe_note(cmd, n_cpu_moe, m->hp.n_layer);
    return 0;
}

void mvm_cli_cpu_moe_note(const char *cmd, uint32_t n_cpu_moe, uint32_t n_layer)
{
    char flag[32] = "--cpu-moe";
    if (n_cpu_moe != MVM_CLI_CPU_MOE_ALL)
        snprintf(flag, sizeof flag, "--n-cpu-moe %u", n_cpu_moe);
    if (n_cpu_moe >= n_layer)
        fprintf(stderr, "moevm %s: %s: the experts of all %u MoE layers stay on the CPU, so no "
                "expert budget: the CPU computes every expert, reading it in host memory, and a "
                "GPU (where one computes) the rest\n", cmd, flag, n_layer);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

void mvm_cli_unescape(char *s)
{
    char *o = s;
    for (const char *i = s; *i; i++) {
        if (*i != '\\' || !i[1]) {
            *o++ = *i;
            continue;
        }
        const char c = *++i;
        const int hi = c == 'x' ? hex_digit(i[1]) : -1, lo = hi >= 0 ? hex_digit(i[2]) : -1;
        if (c == 'n' || c == 'r' || c == 't')
            *o++ = c == 'n' ? '\n' : c == 'r' ? '\r' : '\t';
        else if (c == '\'' || c == '"' || c == '\\')
            *o++ = c;
        else if (lo >= 0 && (hi || lo))
            *o++ = (char)(hi * 16 + lo), i += 2;
        else
            *o++ = '\\', *o++ = c;
    }
    *o = '\0';
}

volatile sig_atomic_t mvm_cli_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    mvm_cli_interrupted = 1;
}

void mvm_cli_catch_sigint(int flags)
{
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = flags};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

char *mvm_cli_read_text(const char *cmd, const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "moevm %s: %s: cannot open it: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    errno = 0;
    while (buf && (got = fread(buf + n, 1, cap - 1 - n, f)) > 0)
        if ((n += got) == cap - 1) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown)
                free(buf);
            buf = grown;
        }
    int failed = !buf || ferror(f), err = errno;
    if (f != stdin)
        fclose(f);
    if (failed) {
        fprintf(stderr, "moevm %s: %s: %s%s\n", cmd, path,
                buf ? "cannot read it: " : "out of memory", buf ? strerror(err) : "");
        free(buf);
        return NULL;
    }
    /* a text stops at its first NUL for everything that reads it after this */
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
        fprintf(stderr, "moevm %s: %s: a NUL byte at offset %zu: expected text\n", cmd, path,
                (size_t)(nul - buf));
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int mvm_cli_need_model(const char *cmd, const char *model)
{
    if (model)
        return 0;
    fprintf(stderr, "moevm %s: -m MODEL.gguf is required (make one with `moevm mkmodel`)\n",
            cmd);
    return 2;
}

int mvm_cli_policy(const char *cmd, const char *flag, char *value, const char **name,
                   const char **params)
{
    if (!mvm_policy_split(value, name, params))
        return 0;
    fprintf(stderr, "moevm %s: %s %s: expected NAME or NAME{k=v,...}\n", cmd, flag, value);
    return 2;
}

int mvm_cli_module(const char *cmd, const char *flag, const char *value, const char **out)
{
    char *copy = strdup(value);
    const char *name, *params;
    if (!copy) {
        fprintf(stderr, "moevm %s: out of memory\n", cmd);
        return 1;
    }
    int bad = mvm_cli_policy(cmd, flag, copy, &name, &params);
    free(copy);
    *out = value;
    return bad;
}

void mvm_cli_progress(void *label, uint64_t done, uint64_t total)
{
    static int last_tenth = -1;
    if (total < (64u << 20))
        return;
    int pct = (int)(100.0 * (double)done / (double)total);
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r%s: %3d%% (%.2f / %.2f GiB)%s", (const char *)label, pct,
                (double)done / (1 << 30), (double)total / (1 << 30), done >= total ? "\n" : "");
    } else if (pct / 10 != last_tenth || done >= total) {
        last_tenth = done >= total ? -1 : pct / 10;
        fprintf(stderr, "%s: %d%% (%.2f / %.2f GiB)\n", (const char *)label, pct,
                (double)done / (1 << 30), (double)total / (1 << 30));
    }
}

int mvm_cli_threads(const char *cmd, uint32_t threads, mvm_pool **out)
{
    if (mvm_threads_pool(threads, out) == MVM_OK)
        return 0;
    fprintf(stderr, "moevm %s: threads: %s\n", cmd, mvm_last_error());
    return 1;
}

int mvm_cli_space_desc(const char *cmd, const char *flag, const char *budget,
                       mvm_space_desc *desc)
{
    if (mvm_space_desc_init(desc) != MVM_OK)
        return mvm_cli_error(cmd, "options");
    if (budget && mvm_parse_budget(budget, &desc->device_budget, &desc->device_budget_frac)) {
        fprintf(stderr, "moevm %s: %s %s: expected a size above 0 (8G), a percentage in "
                "(0,100] (25%%) or auto\n", cmd, flag, budget);
        return 2;
    }
    return 0;
}

int mvm_cli_capacities(const char *cmd, const char *text, uint32_t n, uint64_t all,
                       uint64_t *cap)
{
    if (!text) {
        for (uint32_t s = 0; s < n; s++)
            cap[s] = all / n + all / n / 2;
        return 0;
    }
    if (mvm_cli_list(cmd, "--server-mem", text))
        return 2;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    uint32_t k = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        uint64_t bytes;
        double frac;
        if (k == n || mvm_parse_budget(tok, &bytes, &frac) || bytes == MVM_BUDGET_AUTO) {
            fprintf(stderr, "moevm %s: --server-mem %s: expected one size or percentage, or "
                    "%u of them\n", cmd, text, n);
            return 2;
        }
        cap[k++] = bytes ? bytes : (uint64_t)(frac * (double)all);
    }
    if (k == 1)
        for (uint32_t s = 1; s < n; s++)
            cap[s] = cap[0];
    else if (k != n) {
        fprintf(stderr, "moevm %s: --server-mem: %u values for %u servers\n", cmd, k, n);
        return 2;
    }
    return 0;
}
