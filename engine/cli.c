/* Helpers shared by the subcommands (cli.h). */
#include "engine/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moevm/moevm.h"

int mvm_cli_error(const char *what)
{
    fprintf(stderr, "moevm: %s: %s\n", what, mvm_last_error());
    return 1;
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
