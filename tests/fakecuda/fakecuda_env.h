/*
 * fakecuda_env.h: how the test doubles read their numeric environment variables.
 *
 * Shared by fakecuda.c (libcuda.so.1) and fakenvml.c (libnvidia-ml.so.1) so that both read
 * FAKECUDA_MEM and FAKECUDA_DEVICES by the same rules and report the same device memory.
 * Header-only (static inline): each fake stays one self-contained shared object.
 */
#ifndef FAKECUDA_ENV_H
#define FAKECUDA_ENV_H

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* Decimal with an optional K/M/G (binary) suffix: 0, or -1 when malformed or too large. */
static inline int fk_parse_size(const char *s, unsigned long long *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K') shift = 10;
    else if (*end == 'm' || *end == 'M') shift = 20;
    else if (*end == 'g' || *end == 'G') shift = 30;
    if (shift) end++;
    if (*end || v > (ULLONG_MAX >> shift)) return -1;
    *out = v << shift;
    return 0;
}

/* Reads `var` into *val when set and non-empty; a malformed value or one above `max` leaves
 * *val alone, is reported on stderr under the name `who`, and returns -1. */
static inline int fk_env_num(const char *who, const char *var, unsigned long long *val,
                             unsigned long long max)
{
    const char *s = getenv(var);
    unsigned long long v;
    if (!s || !*s) return 0;
    if (fk_parse_size(s, &v) || v > max) {
        fprintf(stderr, "%s: %s=\"%s\": not a number in 0..%llu\n", who, var, s, max);
        return -1;
    }
    *val = v;
    return 0;
}

#endif
