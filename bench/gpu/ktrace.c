/*
 * ktrace: each kernel's device time in any CUDA program, CUDA graphs included, for a GPU
 * machine without Nsight Systems (the lent ones have none). Preloaded:
 *
 *   LD_PRELOAD=build-gpu/bench/gpu/libmoevm_ktrace.so moevm bench ...
 *   LD_PRELOAD=... llama-bench ...
 *
 * CUPTI's activity API records every kernel, copy and memset the device runs, with its start
 * and end on the device's clock, also for the nodes of a replayed graph, which event timing
 * (MOEVM_GPU_PROFILE) cannot see into. At exit (or when a context is destroyed) the records
 * are summed per kernel name and printed to stderr, most time first:
 *
 *   ktrace: 812.4 ms from the first kernel to the last, the device busy 590.1 ms (72.6%)
 *   ktrace:  share   total ms    calls    avg us  name
 *   ktrace:  31.2%    184.127     4096     44.95  mvm_g_expert_up
 *
 * The busy time is the union of the records' intervals, so the rest of the span is the
 * device idle: the host's launch gaps and round trips. KTRACE_ROWS (default 30) rows;
 * KTRACE_SKIP=N drops the first N records (a warm-up's). Names are demangled and cut to
 * 90 characters. A measurement tool, not part of moevm: it changes the timing a little
 * (CUPTI's own cost per record).
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

#define KT_BUFFER (8u << 20)

struct kt_rec {
    uint64_t start, end;
    uint32_t name; /* index into kt.names */
};

struct kt_name {
    char *text;
    double total_ns;
    uint64_t calls;
};

static struct {
    struct kt_rec *recs;
    size_t n, cap;
    struct kt_name *names;
    size_t n_names, cap_names;
    uint64_t dropped;
} kt;

static void *kt_grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * size);
    if (!q)
        return NULL;
    *cap = c;
    return q;
}

/* The name's index; names are few (a program has tens of kernels), so a linear search. */
static uint32_t kt_name_index(const char *raw)
{
    int status = -1;
    char *dem = raw && raw[0] == '_' ? __cxa_demangle(raw, NULL, NULL, &status) : NULL;
    char text[96];
    snprintf(text, sizeof text, "%s", status == 0 && dem ? dem : raw ? raw : "?");
    free(dem);
    for (size_t i = 0; i < kt.n_names; i++)
        if (!strcmp(kt.names[i].text, text))
            return (uint32_t)i;
    struct kt_name *n = kt_grow(kt.names, &kt.cap_names, kt.n_names + 1, sizeof *n);
    char *copy = strdup(text);
    if (!n || !copy) {
        free(copy);
        return UINT32_MAX;
    }
    kt.names = n;
    kt.names[kt.n_names] = (struct kt_name){.text = copy};
    return (uint32_t)kt.n_names++;
}

static void kt_add(const char *name, uint64_t start, uint64_t end)
{
    uint32_t idx = kt_name_index(name);
    struct kt_rec *r = kt_grow(kt.recs, &kt.cap, kt.n + 1, sizeof *r);
    if (idx == UINT32_MAX || !r) {
        kt.dropped++;
        return;
    }
    kt.recs = r;
    kt.recs[kt.n++] = (struct kt_rec){start, end, idx};
}

static void CUPTIAPI kt_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, KT_BUFFER);
    *size = *buffer ? KT_BUFFER : 0;
    *max_records = 0;
}

static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                         size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            kt_add(k->name, k->start, k->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            static const char *const kinds[] = {
                [CUPTI_ACTIVITY_MEMCPY_KIND_HTOD] = "[copy host -> device]",
                [CUPTI_ACTIVITY_MEMCPY_KIND_DTOH] = "[copy device -> host]",
                [CUPTI_ACTIVITY_MEMCPY_KIND_DTOD] = "[copy device -> device]"};
            const char *name = m->copyKind < sizeof kinds / sizeof *kinds && kinds[m->copyKind]
                                   ? kinds[m->copyKind]
                                   : "[copy, other]";
            kt_add(name, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            kt_add("[memset]", m->start, m->end);
            break;
        }
        default:
            break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
        kt.dropped += dropped;
    free(buffer);
}

static int kt_by_start(const void *a, const void *b)
{
    const struct kt_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int kt_by_total(const void *a, const void *b)
{
    const struct kt_name *x = a, *y = b;
    return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

static void kt_report(void)
{
    const char *s = getenv("KTRACE_SKIP"), *r = getenv("KTRACE_ROWS");
    size_t skip = s ? strtoull(s, NULL, 10) : 0;
    size_t rows = r ? strtoull(r, NULL, 10) : 30;
    qsort(kt.recs, kt.n, sizeof *kt.recs, kt_by_start);
    skip = skip < kt.n ? skip : kt.n;
    uint64_t busy = 0, cover_end = 0, first = 0, last = 0;
    for (size_t i = skip; i < kt.n; i++) {
        const struct kt_rec *x = &kt.recs[i];
        if (i == skip)
            first = x->start;
        last = x->end > last ? x->end : last;
        /* the union of the intervals, in start order */
        uint64_t from = x->start > cover_end ? x->start : cover_end;
        if (x->end > from)
            busy += x->end - from;
        cover_end = x->end > cover_end ? x->end : cover_end;
        kt.names[x->name].total_ns += (double)(x->end - x->start);
        kt.names[x->name].calls++;
    }
    double sum = 0;
    for (size_t i = 0; i < kt.n_names; i++)
        sum += kt.names[i].total_ns;
    qsort(kt.names, kt.n_names, sizeof *kt.names, kt_by_total);
    const double span = last > first ? (double)(last - first) : 0;
    fprintf(stderr,
            "ktrace: %zu records (%zu skipped, %llu dropped); %.1f ms from the first to the "
            "last, the device busy %.1f ms (%.1f%%)\n",
            kt.n - skip, skip, (unsigned long long)kt.dropped, span / 1e6, (double)busy / 1e6,
            span > 0 ? 100.0 * (double)busy / span : 0.0);
    fprintf(stderr, "ktrace:  share   total ms    calls    avg us  name\n");
    for (size_t i = 0; i < kt.n_names && i < rows; i++) {
        const struct kt_name *n = &kt.names[i];
        if (!n->calls)
            continue;
        fprintf(stderr, "ktrace: %5.1f%% %10.3f %8llu %9.2f  %s\n",
                sum > 0 ? 100.0 * n->total_ns / sum : 0.0, n->total_ns / 1e6,
                (unsigned long long)n->calls, n->total_ns / 1e3 / (double)n->calls, n->text);
    }
}

/* A context's records go with it: flushed before it is destroyed, reported at exit. */
static void CUPTIAPI kt_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                 const void *data)
{
    (void)user, (void)data;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(1);
}

static void kt_finish(void)
{
    cuptiActivityFlushAll(1);
    kt_report();
}

__attribute__((constructor)) static void kt_start(void)
{
    static CUpti_SubscriberHandle sub;
    if (cuptiActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed) !=
            CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI's activity API did not start; nothing is traced\n");
        return;
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (cuptiSubscribe(&sub, kt_callback, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
                            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    atexit(kt_finish);
}
