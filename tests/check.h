/*
 * A minimal test harness: CHECK(cond) records a failure with its location and goes on;
 * TEST_END prints "N passed, N failed" (the closing line CI reads) and sets the exit code.
 * A test program is a main() calling static test functions.
 */
#ifndef MVM_TESTS_CHECK_H
#define MVM_TESTS_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed, check_picked; /* picked: tests CHECK_ONLY named */

#define CHECK(cond)                                                                             \
    do {                                                                                        \
        if (cond) {                                                                             \
            check_passed++;                                                                     \
        } else {                                                                                \
            check_failed++;                                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);            \
        }                                                                                       \
    } while (0)

/* CHECK that a call returns `want`, printing the library's message when it does not. */
#define CHECK_ST(call, want)                                                                    \
    do {                                                                                        \
        mvm_status st_ = (call);                                                                \
        if (st_ == (want)) {                                                                    \
            check_passed++;                                                                     \
        } else {                                                                                \
            check_failed++;                                                                     \
            fprintf(stderr, "%s:%d: %s returned %s, wanted %s (%s)\n", __FILE__, __LINE__,      \
                    #call, mvm_status_name(st_), mvm_status_name(want), mvm_last_error());       \
        }                                                                                       \
    } while (0)

/* Whether RUN runs `name`: every test, or with CHECK_ONLY set (names, comma-separated)
 * those it lists, so that a second configuration of the same program (CTest's variants)
 * runs only the tests that configuration changes. TEST_END fails a run where a listed name
 * ran no test (a name misspelt, or a test renamed), which would otherwise pass unseen. */
static inline int check_selected(const char *name)
{
    const char *only = getenv("CHECK_ONLY");
    if (!only || !*only)
        return 1;
    const size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) {
            check_picked++;
            return 1;
        }
    return 0;
}

/* CHECK_ONLY's names that ran no test (0 without it). */
static inline int check_unpicked(void)
{
    const char *only = getenv("CHECK_ONLY");
    if (!only || !*only)
        return 0;
    int names = 1;
    for (const char *p = only; *p; p++)
        names += *p == ',';
    return names - check_picked;
}

#define RUN(test)                                                                               \
    do {                                                                                        \
        if (!check_selected(#test))                                                             \
            break;                                                                              \
        int before_ = check_failed;                                                             \
        test();                                                                                 \
        fprintf(stderr, "%s %s\n", check_failed == before_ ? "ok  " : "FAIL", #test);           \
    } while (0)

#define TEST_END()                                                                              \
    do {                                                                                        \
        if (check_unpicked()) {                                                                 \
            check_failed++;                                                                     \
            fprintf(stderr, "CHECK_ONLY names %d test(s) this program does not run\n",          \
                    check_unpicked());                                                          \
        }                                                                                       \
        printf("%d passed, %d failed\n", check_passed, check_failed);                           \
        return check_failed ? 1 : 0;                                                            \
    } while (0)

/* The whole text file at path, NUL-terminated (free it), or NULL where it cannot be read. */
static inline char *check_read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL; /* (C++ includes it too) */
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* splitmix64: the tests' random weights and choices, reproducible from the seed *s. */
static inline uint64_t check_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One token of a router whose logits drift (the eviction tests' routing: popular experts, a
 * slowly moving token stream): its E scores at layer l from the uniforms u[E], into sc, and
 * its top two into ex. */
static inline void check_drift_route(const double *u, uint32_t E, uint32_t l, uint64_t tok,
                                     float *sc, int32_t ex[2])
{
    double sum = 0;
    for (uint32_t e = 0; e < E; e++)
        sum += exp(1.5 * sin(0.05 * (double)tok + e + 2.0 * l) - 0.3 * e + 2 * u[e]);
    for (uint32_t e = 0; e < E; e++)
        sc[e] = (float)(exp(1.5 * sin(0.05 * (double)tok + e + 2.0 * l) - 0.3 * e + 2 * u[e]) /
                        sum);
    for (uint32_t j = 0; j < 2; j++) {
        int32_t best = -1;
        for (uint32_t e = 0; e < E; e++)
            if ((j == 0 || e != (uint32_t)ex[0]) && (best < 0 || sc[e] > sc[best]))
                best = (int32_t)e;
        ex[j] = best;
    }
}

/* ||a - b||_2 / ||b||_2 over n floats; infinite when either holds a non-finite value (a
 * poisoned output left unwritten). */
static inline double check_rel_l2(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d / r);
}

#endif
