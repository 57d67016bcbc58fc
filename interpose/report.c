/*
 * Attribution and the report. Every allocation the interposer sees records its call site:
 * libunwind's unw_backtrace (raw instruction pointers, per-thread cache, as heaptrack does),
 * with the interposer's own frames dropped and the rest interned by hash in a bounded table.
 * Names are resolved only at exit, by libunwind from each object's symbol table (dladdr
 * where that is stripped). The frames of the libraries MOEVM_REPORT_SKIP
 * names are dropped too (dladdr per frame, on allocations only): by default the CUDA runtime's
 * and PyTorch's caching allocator's, so that the site is the code that asked them for memory,
 * not their internals. Behind a caching allocator that is the operation that made its pool
 * grow, not every tensor.
 *
 * At exit: MOEVM_REPORT=path gets a JSON report (written to path.tmp, then renamed);
 * MOEVM_LOG=info prints one summary line. Neither calls the driver, which may already be
 * shutting down.
 */
#define UNW_LOCAL_ONLY
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"
#include "vmm/error.h"

#define MAX_SITES 1024
#define SITE_FRAMES 4
#define UNWIND_DEPTH 32

typedef struct site {
    uint64_t hash;
    uint32_t n_frames;
    void *frames[SITE_FRAMES];
    uint64_t count, bytes, managed_count, managed_bytes, live_managed_bytes;
} site;

static site sites[MAX_SITES + 1]; /* the last one collects sites past the table's size */
static uint32_t n_sites;
static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t self_lo, self_hi; /* the interposer's own code */

static int find_self(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_addr != (uintptr_t)data)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD) {
            uintptr_t end = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr +
                            info->dlpi_phdr[i].p_memsz;
            if (end > self_hi)
                self_hi = end;
        }
    return 1;
}

/* Once, at init: our own address range, and a first unwind (the first one may allocate and
 * walk the loader's lists; better here than inside a hook). */
void mvm_report_prime(void)
{
    Dl_info info;
    if (dladdr((void *)mvm_report_prime, &info) && info.dli_fbase) {
        self_lo = (uintptr_t)info.dli_fbase;
        dl_iterate_phdr(find_self, info.dli_fbase);
    }
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    void *ips[4];
    unw_backtrace(ips, 4);
}

/* Whether the frame at ip lies in a library MOEVM_REPORT_SKIP names (a prefix of its file's
 * name: "libcudart" takes libcudart.so.13). */
static bool skipped(uintptr_t ip)
{
    Dl_info info;
    if (!mvm_interposer.report_skip[0] || !dladdr((void *)(ip - 1), &info) || !info.dli_fname)
        return false;
    const char *lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    for (const char *p = mvm_interposer.report_skip; *p;) {
        const size_t len = strcspn(p, ",");
        if (len && strncmp(lib, p, len) == 0)
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* The site of the frames ips[0..n): the first SITE_FRAMES outside the interposer, and with
 * skip, outside the libraries MOEVM_REPORT_SKIP names. */
static site site_of(void *const *ips, int n, bool skip)
{
    site s = {.hash = 1469598103934665603ull};
    for (int i = 0; i < n && s.n_frames < SITE_FRAMES; i++) {
        uintptr_t ip = (uintptr_t)ips[i];
        if ((ip >= self_lo && ip < self_hi) || (skip && skipped(ip)))
            continue;
        s.frames[s.n_frames++] = ips[i];
        s.hash = (s.hash ^ ip) * 1099511628211ull;
    }
    return s;
}

uint32_t mvm_report_site(void)
{
    void *ips[UNWIND_DEPTH];
    int n = unw_backtrace(ips, UNWIND_DEPTH);
    site s = site_of(ips, n, true);
    if (!s.n_frames) /* every frame skipped: the libraries' own frames rather than none */
        s = site_of(ips, n, false);
    pthread_mutex_lock(&sites_mu);
    uint32_t i = 0;
    while (i < n_sites && sites[i].hash != s.hash)
        i++;
    if (i == n_sites && n_sites < MAX_SITES)
        sites[n_sites++] = s;
    pthread_mutex_unlock(&sites_mu);
    return i; /* MAX_SITES: the overflow entry */
}

void mvm_report_site_add(uint32_t i, uint64_t bytes, bool managed)
{
    pthread_mutex_lock(&sites_mu);
    site *s = &sites[i <= MAX_SITES ? i : MAX_SITES];
    s->count++;
    s->bytes += bytes;
    if (managed) {
        s->managed_count++;
        s->managed_bytes += bytes;
        s->live_managed_bytes += bytes;
    }
    pthread_mutex_unlock(&sites_mu);
}

void mvm_report_site_free(uint32_t i, uint64_t bytes)
{
    pthread_mutex_lock(&sites_mu);
    site *s = &sites[i <= MAX_SITES ? i : MAX_SITES];
    s->live_managed_bytes -= bytes <= s->live_managed_bytes ? bytes : s->live_managed_bytes;
    pthread_mutex_unlock(&sites_mu);
}

/* "libfoo.so!function+0x1c", "libfoo.so+0x1234" or "0x7f...". The function's name comes
 * from libunwind, which reads the object's full symbol table, so static functions and
 * those of an executable that exports nothing are named too (dladdr sees only the dynamic
 * symbols: a call from a static helper of a program read "program+0x1467"); dladdr's name
 * is the fallback, for objects whose symbol table is stripped. */
static void frame_name(void *ip, char *buf, size_t cap)
{
    Dl_info info;
    uintptr_t at = (uintptr_t)ip - 1; /* the call, not the instruction after it */
    if (!dladdr((void *)at, &info) || !info.dli_fname) {
        snprintf(buf, cap, "0x%lx", (unsigned long)at);
        return;
    }
    const char *lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    char fn[160];
    unw_word_t off = 0;
    unw_accessors_t *acc = unw_get_accessors(unw_local_addr_space);
    int named = acc && acc->get_proc_name &&
                acc->get_proc_name(unw_local_addr_space, (unw_word_t)at, fn, sizeof fn, &off,
                                   NULL) == 0;
    if (named)
        snprintf(buf, cap, "%s!%s+0x%lx", lib, fn, (unsigned long)off);
    else if (info.dli_sname)
        snprintf(buf, cap, "%s!%s+0x%lx", lib, info.dli_sname,
                 (unsigned long)(at - (uintptr_t)info.dli_saddr));
    else
        snprintf(buf, cap, "%s+0x%lx", lib, (unsigned long)(at - (uintptr_t)info.dli_fbase));
}

static int by_bytes(const void *a, const void *b)
{
    const site *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

static void add_num(cJSON *o, const char *k, double v)
{
    cJSON_AddNumberToObject(o, k, v);
}

static cJSON *sites_json(void)
{
    cJSON *arr = cJSON_CreateArray();
    site *copy = malloc(sizeof sites);
    if (!arr || !copy) {
        free(copy);
        return arr;
    }
    pthread_mutex_lock(&sites_mu);
    memcpy(copy, sites, sizeof sites);
    uint32_t n = n_sites;
    pthread_mutex_unlock(&sites_mu);
    copy[n++] = copy[MAX_SITES];
    qsort(copy, n, sizeof *copy, by_bytes);
    for (uint32_t i = 0; i < n; i++) {
        if (!copy[i].count)
            continue;
        cJSON *o = cJSON_CreateObject(), *fr = cJSON_CreateArray();
        for (uint32_t f = 0; f < copy[i].n_frames; f++) {
            char name[256];
            frame_name(copy[i].frames[f], name, sizeof name);
            cJSON_AddItemToArray(fr, cJSON_CreateString(name));
        }
        if (!copy[i].n_frames)
            cJSON_AddItemToArray(fr, cJSON_CreateString("(other sites)"));
        cJSON_AddItemToObject(o, "site", fr);
        add_num(o, "count", (double)copy[i].count);
        add_num(o, "bytes", (double)copy[i].bytes);
        add_num(o, "managed_count", (double)copy[i].managed_count);
        add_num(o, "managed_bytes", (double)copy[i].managed_bytes);
        add_num(o, "live_managed_bytes", (double)copy[i].live_managed_bytes);
        cJSON_AddItemToArray(arr, o);
    }
    free(copy);
    return arr;
}

/* The threads' counter blocks, never freed (a thread's block outlives it: its counts stay
 * in the report). A thread that cannot get one shares `spare` and may lose counts. */
static pthread_mutex_t counts_mu = PTHREAD_MUTEX_INITIALIZER;
static mvm_counts *counts_all, spare;
static _Thread_local mvm_counts *counts_mine __attribute__((tls_model("initial-exec")));

mvm_counts *mvm_counts_mine(void)
{
    mvm_counts *c = counts_mine;
    if (__builtin_expect(c != NULL, 1))
        return c;
    c = calloc(1, sizeof *c);
    if (!c)
        return &spare;
    pthread_mutex_lock(&counts_mu);
    c->next = counts_all;
    counts_all = c;
    pthread_mutex_unlock(&counts_mu);
    return counts_mine = c;
}

typedef struct totals {
    mvm_stats st;
    uint64_t launches, managed, hits, graph_launches, deferred, copies;
    double hit_rate;
    bool clean_evict; /* the space skips unchanged pages' write-backs */
} totals;

static void add_counts(totals *t, mvm_counts *c)
{
    t->launches += atomic_load_explicit(&c->launches, memory_order_relaxed);
    t->managed += atomic_load_explicit(&c->managed, memory_order_relaxed);
    t->hits += atomic_load_explicit(&c->hits, memory_order_relaxed);
    t->graph_launches += atomic_load_explicit(&c->graph_launches, memory_order_relaxed);
    t->deferred += atomic_load_explicit(&c->deferred, memory_order_relaxed);
    t->copies += atomic_load_explicit(&c->copies, memory_order_relaxed);
}

static totals gather(void)
{
    totals t = {0};
    if (mvm_interposer.space) {
        mvm_space_info info;
        mvm_space_get_stats(mvm_interposer.space, &t.st);
        t.clean_evict =
            mvm_space_get_info(mvm_interposer.space, &info) == MVM_OK && info.clean_evict;
    }
    pthread_mutex_lock(&counts_mu);
    for (mvm_counts *c = counts_all; c; c = c->next)
        add_counts(&t, c);
    pthread_mutex_unlock(&counts_mu);
    add_counts(&t, &spare);
    t.hit_rate = t.managed ? (double)t.hits / (double)t.managed : 1.0;
    return t;
}

/* The objects demand paging knows now: extents learnt from copies, how many of them are
 * cut into slices (and into how many), how many of those into the experts their GGUF file
 * declares, and how many stay whole for good. */
static cJSON *objects_json(void)
{
    uint64_t extents = 0, sliced = 0, slices = 0, routed = 0, flat = 0;
    for (uint32_t i = 0; i < mvm_interposer.n_allocs; i++) {
        const mvm_alloc *a = mvm_interposer.allocs[i];
        extents += a->n_ext;
        for (uint32_t k = 0; k < a->n_ext; k++) {
            sliced += a->ext[k].n_slices > 0;
            slices += a->ext[k].n_slices;
            routed += a->ext[k].experts > 0;
            flat += a->ext[k].flat;
        }
    }
    cJSON *o = cJSON_CreateObject();
    add_num(o, "extents", (double)extents);
    add_num(o, "sliced", (double)sliced);
    add_num(o, "slices", (double)slices);
    add_num(o, "routed", (double)routed);
    add_num(o, "flat", (double)flat);
    return o;
}

static cJSON *report_json(const totals *t)
{
    cJSON *r = cJSON_CreateObject(), *o;
    cJSON_AddStringToObject(r, "moevm_preload", mvm_version());
    cJSON_AddItemToObject(r, "options", o = cJSON_CreateObject());
    add_num(o, "min_bytes", (double)mvm_interposer.min_bytes);
    add_num(o, "oversubscribe_bytes", (double)mvm_interposer.oversub_bytes);
    cJSON_AddStringToObject(o, "evict", mvm_interposer.evict_name);
    cJSON_AddBoolToObject(o, "clean_evict", mvm_interposer.clean_evict);
    cJSON_AddBoolToObject(o, "slices", mvm_interposer.slices);
    cJSON_AddBoolToObject(o, "prefetch", mvm_interposer.prefetch);
    cJSON_AddBoolToObject(o, "routing", mvm_interposer.routing);
    cJSON_AddItemToObject(r, "space", o = cJSON_CreateObject());
    add_num(o, "device", mvm_interposer.space ? mvm_interposer.device : -1);
    add_num(o, "page_size", (double)mvm_interposer.page_size);
    add_num(o, "capacity_bytes", (double)mvm_interposer.capacity_bytes);
    add_num(o, "device_budget_bytes",
            (double)mvm_interposer.device_pages * (double)mvm_interposer.page_size);
    add_num(o, "resident_bytes", (double)t->st.resident_pages * (double)mvm_interposer.page_size);
    cJSON_AddBoolToObject(o, "clean_evict", t->clean_evict);
    cJSON_AddItemToObject(r, "allocations", sites_json());
    cJSON_AddItemToObject(r, "managed", o = cJSON_CreateObject());
    add_num(o, "count", (double)mvm_interposer.managed_allocs);
    add_num(o, "bytes", (double)mvm_interposer.managed_bytes);
    add_num(o, "peak_bytes", (double)mvm_interposer.peak_managed_bytes);
    add_num(o, "live_bytes", (double)mvm_interposer.alloc_pages * (double)mvm_interposer.page_size);
    cJSON_AddItemToObject(r, "objects", objects_json());
    cJSON_AddItemToObject(r, "native", o = cJSON_CreateObject());
    add_num(o, "count", (double)atomic_load(&mvm_interposer.native_allocs));
    add_num(o, "bytes", (double)atomic_load(&mvm_interposer.native_bytes));
    add_num(o, "async_count", (double)atomic_load(&mvm_interposer.async_allocs));
    add_num(o, "async_bytes", (double)atomic_load(&mvm_interposer.async_bytes));
    add_num(o, "ipc_refused", (double)atomic_load(&mvm_interposer.ipc_refused));
    cJSON_AddItemToObject(r, "launches", o = cJSON_CreateObject());
    add_num(o, "total", (double)t->launches);
    add_num(o, "managed", (double)t->managed);
    add_num(o, "hits", (double)t->hits);
    add_num(o, "hit_rate", t->hit_rate);
    add_num(o, "graphs", (double)t->graph_launches);
    add_num(o, "graphs_scanned", (double)atomic_load(&mvm_interposer.graphs_scanned));
    add_num(o, "graph_kernel_nodes", (double)atomic_load(&mvm_interposer.graph_kernel_nodes));
    add_num(o, "graph_copy_nodes", (double)atomic_load(&mvm_interposer.graph_copy_nodes));
    add_num(o, "deferred", (double)t->deferred);
    add_num(r, "managed_copies", (double)t->copies);
    cJSON_AddItemToObject(r, "routing", o = cJSON_CreateObject());
    add_num(o, "declared", (double)mvm_interposer.routed_extents);
    add_num(o, "reads", (double)atomic_load(&mvm_interposer.routed_reads));
    add_num(o, "experts", (double)atomic_load(&mvm_interposer.routed_experts));
    add_num(o, "whole", (double)atomic_load(&mvm_interposer.routed_whole));
    add_num(o, "ns", (double)atomic_load(&mvm_interposer.routing_ns));
    cJSON_AddItemToObject(r, "moves", o = cJSON_CreateObject());
    add_num(o, "misses", (double)mvm_interposer.misses);
    add_num(o, "overflows", (double)mvm_interposer.overflows);
    add_num(o, "prefetch_pages", (double)mvm_interposer.prefetch_pages);
    add_num(o, "prefetch_useful", (double)mvm_interposer.prefetch_useful);
    add_num(o, "prefetch_failed", (double)mvm_interposer.prefetch_failed);
    add_num(o, "prefetch_settles", (double)mvm_interposer.prefetch_settles);
    add_num(o, "pages_in", (double)mvm_interposer.pages_in);
    add_num(o, "bytes_in", (double)t->st.bytes_moved);
    add_num(o, "pages_out", (double)mvm_interposer.pages_out);
    add_num(o, "pages_discarded", (double)t->st.pages_discarded);
    add_num(o, "bytes_written_back", (double)t->st.bytes_written_back);
    add_num(o, "pages_clean", (double)t->st.pages_clean);
    add_num(o, "drains", (double)mvm_interposer.drains);
    add_num(r, "wait_ns", (double)mvm_interposer.wait_ns);
    return r;
}

static void write_report(const totals *t)
{
    cJSON *r = report_json(t);
    char *text = r ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    char tmp[sizeof mvm_interposer.report_path + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", mvm_interposer.report_path);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, mvm_interposer.report_path) != 0) {
        fprintf(stderr, "moevm: preload: cannot write the report %s\n", mvm_interposer.report_path);
        remove(tmp);
    }
    free(text);
}

void mvm_report_at_exit(void)
{
    if (!mvm_interposer_on())
        return;
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    totals t = gather();
    if (mvm_interposer.report_path[0])
        write_report(&t);
    MVM_PL_LOG(MVM_LOG_INFO, "%llu managed allocations (%.1f MiB peak, %.1f MiB on the "
               "device), %llu launches, %llu on managed memory, hit rate %.1f%%, %.1f MiB "
               "moved in, %.1f MiB written back (%llu unchanged pages skipped), %.1f ms waited",
               (unsigned long long)mvm_interposer.managed_allocs,
               (double)mvm_interposer.peak_managed_bytes / 1048576.0,
               (double)mvm_interposer.device_pages * (double)mvm_interposer.page_size / 1048576.0,
               (unsigned long long)t.launches, (unsigned long long)t.managed,
               100.0 * t.hit_rate, (double)t.st.bytes_moved / 1048576.0,
               (double)t.st.bytes_written_back / 1048576.0,
               (unsigned long long)t.st.pages_clean, (double)mvm_interposer.wait_ns * 1e-6);
    pthread_rwlock_unlock(&mvm_interposer.lock);
}
