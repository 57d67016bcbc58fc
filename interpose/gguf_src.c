/*
 * Fused expert tensors recognised by where their bytes come from. llama.cpp maps the GGUF
 * file and uploads each tensor with one host-to-device copy whose source is the tensor's
 * data inside that mapping. So the source address names the file and the offset, and the
 * file's tensor infos say whether the copy is a fused expert tensor and how many experts
 * it holds (gguf_scan.c): an exact cut, where launch pointers can teach none (llama.cpp's
 * mul_mat_id kernels are handed the tensor's base and find their experts through the
 * routing ids in device memory; route.c reads those).
 *
 * /proc/self/maps gives the mapping of a source address; every mapping looked up is kept
 * (a file's tensor table with it, or nothing for memory that is no GGUF), so a load of
 * hundreds of tensors from one file reads the maps and scans the file once. A copy from
 * pinned staging buffers (llama.cpp with --no-mmap) names no file: no experts are declared.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose/gguf_scan.h"
#include "interpose/preload.h"
#include "vmm/error.h"

#define MAX_RANGES 256

typedef struct range {
    uintptr_t start, end;
    uint64_t file_off;         /* the file offset mapped at `start` */
    mvm_gguf_fused *fused;     /* the file's fused tensors; NULL: no GGUF, or none */
    uint32_t n_fused;
} range;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static range ranges[MAX_RANGES];
static uint32_t n_ranges;

/* The mapping holding p, from /proc/self/maps, with its file's table; false if none. */
static bool look_up(uintptr_t p, range *out)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[4096 + 128];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        uintptr_t start, end;
        uint64_t off;
        int path_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %" SCNx64 " %*s %*s %n", &start, &end,
                   &off, &path_at) < 3 || p < start || p >= end)
            continue;
        found = true;
        *out = (range){.start = start, .end = end, .file_off = off};
        char *path = line + path_at;
        path[strcspn(path, "\n")] = 0;
        char err[160];
        if (path_at && path[0] == '/' &&
            mvm_gguf_scan_fused(path, &out->fused, &out->n_fused, err, sizeof err) == 0 &&
            out->n_fused)
            MVM_PL_LOG(MVM_LOG_INFO, "%s: %u fused expert tensors", path, out->n_fused);
    }
    fclose(f);
    return found;
}

/* The kept range holding p, looking it up if needed (lock held); NULL when unknown. */
static const range *range_of(uintptr_t p)
{
    for (uint32_t i = 0; i < n_ranges; i++)
        if (p >= ranges[i].start && p < ranges[i].end)
            return &ranges[i];
    range r;
    if (!look_up(p, &r))
        return NULL;
    if (n_ranges == MAX_RANGES) { /* full: forget the ranges that are no GGUF */
        uint32_t keep = 0;
        for (uint32_t i = 0; i < n_ranges; i++)
            if (ranges[i].fused)
                ranges[keep++] = ranges[i];
        n_ranges = keep;
        if (n_ranges == MAX_RANGES) {
            free(r.fused);
            return NULL;
        }
    }
    ranges[n_ranges] = r;
    return &ranges[n_ranges++];
}

uint32_t mvm_gguf_src_experts(const void *src, uint64_t n, uint32_t *used)
{
    pthread_mutex_lock(&lock);
    const range *r = range_of((uintptr_t)src);
    uint32_t experts = 0;
    *used = 0;
    if (r && r->fused) {
        uint64_t at = r->file_off + ((uintptr_t)src - r->start);
        uint32_t lo = 0, hi = r->n_fused;
        while (lo < hi) { /* the first fused tensor at or after `at` */
            uint32_t mid = (lo + hi) / 2;
            if (r->fused[mid].offset < at)
                lo = mid + 1;
            else
                hi = mid;
        }
        /* The copy must be the whole tensor: it starts at its data, and the padding that
         * may follow its bytes is all that is left of its room. */
        const mvm_gguf_fused *t = lo < r->n_fused ? &r->fused[lo] : NULL;
        if (t && t->offset == at && n <= t->room && t->room - n < MVM_GGUF_MAX_ALIGNMENT &&
            n % t->experts == 0) {
            experts = t->experts;
            *used = t->used < experts ? t->used : 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return experts;
}

void mvm_gguf_src_forget(void)
{
    pthread_mutex_lock(&lock);
    for (uint32_t i = 0; i < n_ranges; i++)
        free(ranges[i].fused);
    n_ranges = 0;
    pthread_mutex_unlock(&lock);
}
