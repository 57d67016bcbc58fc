/* Helpers shared by the subcommands (cli.h). */
#include "tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/forward/engine_options.h"
#include "kernels/cpu/kernels.h"
#include "moevm/moevm.h"
#include "vmm/options.h"
#include "vmm/topo.h"

int mvm_cli_error(const char *what)
{
    fprintf(stderr, "moevm: %s: %s\n", what, mvm_last_error());
    return 1;
}

int mvm_cli_next(mvm_cli_iter *it)
{
    if (it->i == 0)
        it->i = 1; /* argv[0] is the command */
    if (it->i >= it->argc)
        return MVM_CLI_END;
    it->flag = it->argv[it->i++];
    it->value = NULL;
    if (!strcmp(it->flag, "--help") || !strcmp(it->flag, "-h")) {
        it->usage(stdout);
        return MVM_CLI_HELP;
    }
    for (const char *const *s = it->switches; s && *s; s++)
        if (!strcmp(it->flag, *s))
            return MVM_CLI_OPTION;
    if (it->i >= it->argc) {
        fprintf(stderr, "moevm %s: %s needs a value (see %s)\n", it->cmd, it->flag,
                it->help ? it->help : "--help");
        return MVM_CLI_BAD;
    }
    it->value = it->argv[it->i++];
    return MVM_CLI_OPTION;
}

int mvm_cli_unknown(const mvm_cli_iter *it)
{
    fprintf(stderr, "moevm %s: unknown option %s (see %s)\n", it->cmd, it->flag,
            it->help ? it->help : "--help");
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

int mvm_cli_kv_type(const char *cmd, const char *value, const char **out)
{
    if (strcmp(value, "f16") && strcmp(value, "f32")) {
        fprintf(stderr, "moevm %s: --kv-type %s: expected f16 or f32\n", cmd, value);
        return 2;
    }
    *out = value;
    return 0;
}

int mvm_cli_need_model(const char *cmd, const char *model)
{
    if (model)
        return 0;
    fprintf(stderr, "moevm %s: -m MODEL.gguf is required (make one with `moevm mkmodel`)\n",
            cmd);
    return 2;
}

int mvm_cli_split_policy(char *p, const char **name, const char **params)
{
    char *brace = strchr(p, '{');
    *name = p;
    *params = NULL;
    if (!brace)
        return 0;
    char *close = strrchr(brace, '}');
    if (!close || close[1])
        return -1;
    *brace = *close = '\0';
    *params = brace + 1;
    return 0;
}

int mvm_cli_policy(const char *cmd, const char *flag, char *value, const char **name,
                   const char **params)
{
    if (!mvm_cli_split_policy(value, name, params))
        return 0;
    fprintf(stderr, "moevm %s: %s %s: expected NAME or NAME{k=v,...}\n", cmd, flag, value);
    return 2;
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
    mvm_topo topo;
    if (mvm_topo_probe(NULL, &topo) != MVM_OK)
        return mvm_cli_error("probing the topology");
    mvm_option_value simd, env_threads;
    if (mvm_option_read(&mvm_opt_cpu_simd, &simd) != MVM_OK ||
        mvm_option_read(&mvm_opt_threads, &env_threads) != MVM_OK)
        return mvm_cli_error("options");
    /* the choice order of MOEVM_CPU_SIMD: auto|avx512vnni|avx512|avx2|dotprod|neon|scalar */
    static const enum mvm_simd levels[] = {MVM_SIMD_SCALAR, MVM_SIMD_AVX512VNNI, MVM_SIMD_AVX512,
                                           MVM_SIMD_AVX2,   MVM_SIMD_DOTPROD,    MVM_SIMD_NEON,
                                           MVM_SIMD_SCALAR};
    if (simd.i > 0 && mvm_k_simd_use(levels[simd.i]) != 0) {
        fprintf(stderr, "moevm %s: MOEVM_CPU_SIMD=%s: this CPU does not support it (best: %s)\n",
                cmd, mvm_k_simd_name(levels[simd.i]), mvm_k_simd_name(mvm_k_simd_detect()));
        return 1;
    }
    int n = threads ? (int)threads
            : env_threads.i > 0 ? (int)env_threads.i
            : topo.n_cores > 0 ? topo.n_cores : 1;
    if (mvm_pool_create(n, &topo, out) != MVM_OK)
        return mvm_cli_error("threads");
    return 0;
}

int mvm_cli_space_desc(const char *cmd, const char *flag, const char *budget,
                       mvm_space_desc *desc)
{
    if (mvm_space_desc_init(desc) != MVM_OK)
        return mvm_cli_error("options");
    if (budget && mvm_parse_budget(budget, &desc->device_budget, &desc->device_budget_frac)) {
        fprintf(stderr, "moevm %s: %s %s: expected a size (8G), a percentage (25%%) or auto\n",
                cmd, flag, budget);
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
