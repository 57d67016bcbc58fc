/* llama.cpp's names and letters of the sampler chain's steps (sampler_order.h). */
#include "tools/sampler_order.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* llama.cpp's names of the steps (common/sampling.cpp), by MVM_SAMPLER_* - 1, and their
 * letters. */
static const char *const step_names[] = {"penalties", "dry", "top_n_sigma", "top_k", "typ_p",
                                         "top_p", "min_p", "xtc", "temperature"};
static const char step_chars[] = "edskypmxt";

const char *mvm_cli_sampler_name(int step)
{
    return step >= 1 && step < MVM_SAMPLER_STEP_END ? step_names[step - 1] : "?";
}

/* A name, lower-cased, as llama.cpp reads it: canonical, with '-' for '_', without '_', or
 * an alias. The step, 0 for one llama.cpp has and moevm not, -1 for none. */
static int step_of(const char *name)
{
    char low[32], bare[32];
    size_t n = 0, b = 0;
    for (; name[n] && n < sizeof low - 1; n++) {
        low[n] = (char)tolower((unsigned char)name[n]);
        if (low[n] == '-')
            low[n] = '_';
        if (low[n] != '_')
            bare[b++] = low[n];
    }
    if (name[n])
        return -1;
    low[n] = bare[b] = '\0';
    static const struct { const char *name; int step; } alias[] = {
        {"nucleus", MVM_SAMPLER_TOP_P}, {"temp", MVM_SAMPLER_TEMPERATURE},
        {"typ", MVM_SAMPLER_TYPICAL}, {"infill", 0}, {"adaptive_p", 0}, {"adaptivep", 0}};
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (!strcmp(low, alias[i].name))
            return alias[i].step;
    for (int s = 0; s < MVM_SAMPLER_STEP_END - 1; s++) {
        char nb[32];
        size_t k = 0;
        for (const char *c = step_names[s]; *c; c++)
            if (*c != '_')
                nb[k++] = *c;
        nb[k] = '\0';
        if (!strcmp(low, step_names[s]) || (strchr(step_names[s], '_') && !strcmp(bare, nb)))
            return s + 1;
    }
    return -1;
}

int mvm_cli_sampler_names(const char *const *names, size_t n, uint8_t *order, char *bad,
                          size_t cap)
{
    if (n == 0 || n > MVM_SAMPLER_MAX_STEPS) {
        snprintf(bad, cap, "%zu samplers: give 1 to %d", n, MVM_SAMPLER_MAX_STEPS);
        return -1;
    }
    memset(order, 0, MVM_SAMPLER_MAX_STEPS);
    for (size_t i = 0; i < n; i++) {
        const int s = step_of(names[i]);
        if (s <= 0) {
            snprintf(bad, cap, s < 0 ? "'%.40s' is not a sampler (penalties, dry, top_n_sigma, "
                                       "top_k, typ_p, top_p, min_p, xtc, temperature)"
                                     : "the '%.40s' sampler is not supported by moevm", names[i]);
            return -1;
        }
        order[i] = (uint8_t)s;
    }
    return 0;
}

int mvm_cli_sampler_chars(const char *chars, uint8_t *order, char *bad, size_t cap)
{
    const size_t n = strlen(chars);
    if (n == 0 || n > MVM_SAMPLER_MAX_STEPS) {
        snprintf(bad, cap, "%zu samplers: give 1 to %d", n, MVM_SAMPLER_MAX_STEPS);
        return -1;
    }
    memset(order, 0, MVM_SAMPLER_MAX_STEPS);
    for (size_t i = 0; i < n; i++) {
        const char *at = chars[i] ? strchr(step_chars, chars[i]) : NULL;
        if (!at) {
            snprintf(bad, cap, chars[i] == 'i' || chars[i] == 'a'
                                   ? "the sampler '%c' is not supported by moevm"
                                   : "'%c' is not a sampler's letter (edskypmxt)", chars[i]);
            return -1;
        }
        order[i] = (uint8_t)(at - step_chars + 1);
    }
    return 0;
}

