/* The device pass's profile (gpu_profile.h). */
#include "engine/compute/gpu_profile.h"

#include <stdlib.h>

#include "engine/compute/clock.h"
#include "vmm/error.h"

/* Operations timed between two syncs before the profile syncs by itself to read them: a
 * decode step syncs every layer, far below this. */
#define SLOTS 512

struct kind_total {
    double ms;
    uint64_t calls;
};

struct mvm_gpu_prof {
    const struct cu_api *cu;
    CUstream stream;
    CUevent ev[2 * SLOTS];    /* operation i runs between ev[2i] and ev[2i + 1] */
    int kind[SLOTS];
    int n, open;              /* operations queued since the last read; one begun, not ended */
    int n_kinds;
    const char *const *names;
    struct kind_total *total; /* [n_kinds] */
    double t0, t_last;        /* the first operation and the last sync, host clock */
    double waited;            /* host seconds blocked in syncs */
    uint64_t syncs;
};

static mvm_status cu_check(const mvm_gpu_prof *p, CUresult r, const char *what)
{
    return r == CUDA_SUCCESS ? MVM_OK : mvm_cu_fail(p->cu, r, what);
}

mvm_status mvm_gpu_prof_create(const struct cu_api *cu, CUstream stream, int n_kinds,
                               const char *const *names, mvm_gpu_prof **out)
{
    *out = NULL;
    mvm_gpu_prof *p = calloc(1, sizeof *p);
    if (!p || !(p->total = calloc((size_t)n_kinds, sizeof *p->total))) {
        free(p);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the GPU profile");
    }
    p->cu = cu, p->stream = stream, p->n_kinds = n_kinds, p->names = names;
    for (int i = 0; i < 2 * SLOTS; i++) {
        mvm_status st = cu_check(p, cu->EventCreate(&p->ev[i], 0), "cuEventCreate (profile)");
        if (st != MVM_OK) {
            mvm_gpu_prof_free(p);
            return st;
        }
    }
    *out = p;
    return MVM_OK;
}

void mvm_gpu_prof_free(mvm_gpu_prof *p)
{
    if (!p)
        return;
    for (int i = 0; i < 2 * SLOTS && p->ev[i]; i++)
        p->cu->EventDestroy(p->ev[i]);
    free(p->total);
    free(p);
}

/* Sums the times of the operations queued since the last read, all complete. */
static mvm_status read_times(mvm_gpu_prof *p)
{
    mvm_status st = MVM_OK;
    for (int i = 0; i < p->n && st == MVM_OK; i++) {
        float ms = 0;
        st = cu_check(p, p->cu->EventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]),
                      "cuEventElapsedTime (profile)");
        p->total[p->kind[i]].ms += ms;
        p->total[p->kind[i]].calls++;
    }
    p->n = 0;
    return st;
}

mvm_status mvm_gpu_prof_begin(mvm_gpu_prof *p, int kind)
{
    if (p->n == SLOTS) { /* every slot in use: wait for them here, counted as a sync */
        double t = mvm_now_s();
        mvm_status st = cu_check(p, p->cu->StreamSynchronize(p->stream),
                                 "cuStreamSynchronize (profile)");
        if (st == MVM_OK)
            st = mvm_gpu_prof_synced(p, mvm_now_s() - t);
        if (st != MVM_OK)
            return st;
    }
    if (!p->t0)
        p->t0 = mvm_now_s();
    p->kind[p->n] = kind;
    p->open = 1;
    return cu_check(p, p->cu->EventRecord(p->ev[2 * p->n], p->stream), "cuEventRecord (profile)");
}

mvm_status mvm_gpu_prof_end(mvm_gpu_prof *p)
{
    if (!p->open)
        return MVM_OK; /* its begin failed */
    p->open = 0;
    return cu_check(p, p->cu->EventRecord(p->ev[2 * p->n++ + 1], p->stream),
                    "cuEventRecord (profile)");
}

mvm_status mvm_gpu_prof_synced(mvm_gpu_prof *p, double waited)
{
    p->waited += waited;
    p->syncs++;
    p->t_last = mvm_now_s();
    return read_times(p);
}

void mvm_gpu_prof_report(const mvm_gpu_prof *p, FILE *f)
{
    double busy = 0, wall = p->t_last > p->t0 ? (p->t_last - p->t0) * 1e3 : 0;
    int *order = malloc((size_t)p->n_kinds * sizeof *order);
    if (!order)
        return;
    for (int k = 0; k < p->n_kinds; k++) { /* most time first (a few kinds: insertion) */
        busy += p->total[k].ms;
        int i = k;
        for (; i > 0 && p->total[order[i - 1]].ms < p->total[k].ms; i--)
            order[i] = order[i - 1];
        order[i] = k;
    }
    fprintf(f, "gpu profile: %.1f ms from the first operation to the last sync, the device "
            "busy %.1f ms (%.0f%%); %llu syncs, the host waited %.1f ms in them\n", wall, busy,
            wall > 0 ? 100 * busy / wall : 0.0, (unsigned long long)p->syncs, p->waited * 1e3);
    fprintf(f, "  %-26s %9s %11s %9s %6s\n", "operation", "calls", "total ms", "avg us",
            "busy");
    for (int i = 0; i < p->n_kinds; i++) {
        const struct kind_total *t = &p->total[order[i]];
        if (t->calls)
            fprintf(f, "  %-26s %9llu %11.3f %9.1f %5.1f%%\n", p->names[order[i]],
                    (unsigned long long)t->calls, t->ms, 1e3 * t->ms / (double)t->calls,
                    busy > 0 ? 100 * t->ms / busy : 0.0);
    }
    free(order);
}
