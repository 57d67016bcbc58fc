/*
 * The virtual expert address space: layout, creation, queries and pins. Evictions are in
 * evict.c, moves (make-resident, prefetch) and the migration worker in migrate.c.
 *
 * Layout: expert (l, e) lives at base + (l*E + e) * stride, stride = expert_bytes rounded
 * up to the page size (in a packed space, to MVM_PACK_ALIGN: upload.c). Its host home sits
 * at (l*E + e) * home_stride in the home allocation, home_stride the page-rounded stride
 * either way, so page p of any expert is home page (expert * ppe + p).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"
#include "vmm/options.h"
#include "vmm/registry.h"
#include "vmm/space_impl.h"

/* Beyond this a model cannot be one reservation on current GPUs (49-bit VA) anyway. */
#define MAX_SPACE_BYTES (1ull << 46)

mvm_status mvm_space_desc_init(mvm_space_desc *d)
{
    if (!d)
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_desc_init: desc is NULL");
    memset(d, 0, sizeof *d);
    mvm_option_value budget, backend, device, page, clean, home_map, huge;
    mvm_status st;
    if ((st = mvm_option_read(&mvm_opt_gpu_budget, &budget)) ||
        (st = mvm_option_read(&mvm_opt_backend, &backend)) ||
        (st = mvm_option_read(&mvm_opt_device, &device)) ||
        (st = mvm_option_read(&mvm_opt_page_size, &page)) ||
        (st = mvm_option_read(&mvm_opt_clean_evict, &clean)) ||
        (st = mvm_option_read(&mvm_opt_home_map, &home_map)) ||
        (st = mvm_option_read(&mvm_opt_huge_pages, &huge)))
        return st;
    d->device_budget = (uint64_t)budget.i;
    d->device_budget_frac = budget.frac;
    d->backend = (mvm_backend_kind)backend.i; /* the table's order is the enum's */
    d->device = (int)device.i;
    d->page_size = (uint64_t)page.i;
    d->clean_evict = clean.i == 1; /* "off|on" */
    d->unmapped_homes = home_map.i == 0;
    d->small_pages = huge.i == 0; /* "off|on" */
    return MVM_OK;
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static mvm_status check_desc(const mvm_space_desc *d)
{
    if (!d)
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_create: desc is NULL");
    if (d->n_layers == 0 || d->n_experts == 0)
        return mvm_fail(MVM_ERR_INVALID, "space of %u layers x %u experts: both must be > 0",
                        d->n_layers, d->n_experts);
    if (d->expert_bytes == 0)
        return mvm_fail(MVM_ERR_INVALID, "expert_bytes is 0");
    if (d->device_budget == 0 && !(d->device_budget_frac > 0 && d->device_budget_frac <= 1))
        return mvm_fail(MVM_ERR_INVALID,
                        "device budget is 0 bytes and the fraction %g is not in (0, 1]",
                        d->device_budget_frac);
    if (d->slots && d->write_back)
        return mvm_fail(MVM_ERR_INVALID, "a slot space's experts are read where they land, "
                        "and nothing writes them back: slots with write_back");
    if (d->backend != MVM_BACKEND_AUTO && d->backend != MVM_BACKEND_HOST &&
        d->backend != MVM_BACKEND_CUDA)
        return mvm_fail(MVM_ERR_INVALID, "unknown backend %d", (int)d->backend);
    return MVM_OK;
}

/* The page size and what follows from it: stride, pages per expert, and that the experts
 * fit in the space in pages this large. */
static mvm_status set_page(mvm_space *sp, const mvm_space_desc *d, uint64_t page)
{
    sp->page_size = page;
    sp->stride = sp->home_stride = (d->expert_bytes + page - 1) / page * page;
    sp->ppe = (uint32_t)(sp->stride / page);
    sp->n_total = d->n_layers * d->n_experts;
    /* the experts would fit in the space, but not in pages this large */
    const uint64_t n_exp = (uint64_t)d->n_layers * d->n_experts;
    if (page > MAX_SPACE_BYTES ||
        (d->expert_bytes && n_exp <= MAX_SPACE_BYTES / d->expert_bytes &&
         n_exp > MAX_SPACE_BYTES / sp->stride)) {
        char b[32], p[32];
        fmt_bytes(b, sizeof b, MAX_SPACE_BYTES);
        fmt_bytes(p, sizeof p, page);
        return mvm_fail(MVM_ERR_INVALID, "page size %s: each expert takes whole pages, and %u "
                        "x %s exceed the %s a space can address (MOEVM_PAGE_SIZE: pages of "
                        "about an expert's size or less)", p, (unsigned)n_exp, p, b);
    }
    if ((uint64_t)d->n_layers * d->n_experts > UINT32_MAX / 2 || d->expert_bytes > MAX_SPACE_BYTES ||
        sp->n_total > MAX_SPACE_BYTES / sp->stride) {
        char b[32];
        fmt_bytes(b, sizeof b, MAX_SPACE_BYTES);
        return mvm_fail(MVM_ERR_INVALID, "%u layers x %u experts x %llu bytes exceeds the %s a "
                        "space can address", d->n_layers, d->n_experts,
                        (unsigned long long)d->expert_bytes, b);
    }
    sp->reserved = sp->stride * sp->n_total;
    return MVM_OK;
}

/* The device budget in bytes (automatic, a share of the experts' pages, or as given), at
 * least a page (a slot space's pages come later, and may be smaller: `slots`). */
static mvm_status budget_bytes(const mvm_space *sp, const mvm_space_desc *d, bool slots,
                               uint64_t *out)
{
    const mvm_backend *be = sp->be;
    const uint64_t page = sp->page_size, total_pages = (uint64_t)sp->n_total * sp->ppe;
    uint64_t budget = d->device_budget;
    if (budget == MVM_BUDGET_AUTO && be->device_free && d->device_reserve >= be->device_free) {
        char f[32], r[32];
        fmt_bytes(f, sizeof f, be->device_free);
        fmt_bytes(r, sizeof r, d->device_reserve);
        return mvm_fail(MVM_ERR_INVALID, "the device has %s free and %s of it are needed beside "
                        "the expert space: no room for an automatic budget (give a budget, or "
                        "need less beside it)", f, r);
    }
    if (budget == MVM_BUDGET_AUTO)
        budget = be->device_free ? (be->device_free - d->device_reserve) / 10 * 9
                                 : total_pages * page;
    else if (budget == 0) /* of the experts' pages, so that 1 holds every expert: each
                           * takes whole pages, and an expert of 3.4 MiB two of 2 MiB */
        budget = (uint64_t)(d->device_budget_frac * (double)(total_pages * page));
    if (budget < page && !slots) {
        char b[32], p[32];
        fmt_bytes(b, sizeof b, budget);
        fmt_bytes(p, sizeof p, page);
        return mvm_fail(MVM_ERR_INVALID, "device budget %s is smaller than one page (%s)", b, p);
    }
    *out = budget;
    return MVM_OK;
}

/* A slot space's pages (space_impl.h): nothing maps a page at an address, so they need not
 * be the device's granules (2 MiB, of which an expert wasted up to a page: a 4.8 MiB one
 * took 6); by default 64 KiB, doubled until an expert takes at most 64 of them (its waste
 * under a 64th; a power of two, so a divisor or a multiple of the granularity). One given
 * (MOEVM_PAGE_SIZE) is a divisor of the granularity, a multiple of 4 KiB, or a multiple of
 * the granularity. */
static uint64_t slot_page(const mvm_space_desc *d)
{
    if (d->page_size)
        return d->page_size;
    uint64_t page = 64u << 10;
    while ((d->expert_bytes + page - 1) / page > 64)
        page *= 2;
    return page;
}

/* A slot space: its pages, and its budget in whole experts (a remainder of pages could never
 * hold one, and left among the free chunks it would split a run over two slabs), in memory
 * of whole granules no larger than the budget (the pool is one allocation of them: slab.c). */
static mvm_status plan_slots(mvm_space *sp, const mvm_space_desc *d)
{
    mvm_backend *be = sp->be;
    const size_t gran = be->granularity;
    if (be->host_readable || !be->ops->chunk_addr)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "the %s backend has no pool view for the device "
                        "to read experts in: no slot space (mvm_space_desc.slots)", be->name);
    const uint64_t page = slot_page(d);
    if (page % 4096 || (page < gran ? gran % page : page % gran))
        return mvm_fail(MVM_ERR_INVALID, "page size %llu: a slot space's pages divide the %s "
                        "backend's granularity (%zu) in multiples of 4 KiB, or are multiples of "
                        "it", (unsigned long long)page, be->name, gran);
    mvm_status st = set_page(sp, d, page);
    uint64_t budget = 0;
    if (st == MVM_OK)
        st = budget_bytes(sp, d, false, &budget);
    if (st != MVM_OK)
        return st;
    const uint64_t total_pages = (uint64_t)sp->n_total * sp->ppe;
    const uint64_t pages = budget / gran * gran / page;
    sp->n_chunks = (uint32_t)(pages < total_pages ? pages : total_pages);
    sp->n_chunks -= sp->n_chunks % sp->ppe;
    if (sp->n_chunks == 0) {
        char b[32], x[32];
        fmt_bytes(b, sizeof b, budget);
        fmt_bytes(x, sizeof x, sp->stride);
        return mvm_fail(MVM_ERR_INVALID, "device budget %s holds no whole expert (%s) in "
                        "whole %zu KiB granules in a slot space", b, x, gran >> 10);
    }
    sp->reserved = (sp->reserved + gran - 1) / gran * gran;
    sp->slots = true;
    be->home_mappable = false; /* nothing reads the experts' own addresses */
    return MVM_OK;
}

/* Page size, stride and the page budget, checked against the backend's limits. */
static mvm_status plan_layout(mvm_space *sp, const mvm_space_desc *d)
{
    mvm_backend *be = sp->be;
    /* (a slot space's own page size, which need not be granules, comes after packing) */
    uint64_t page = d->page_size && !(d->slots && d->page_size % be->granularity)
                        ? d->page_size
                        : be->default_page_size;
    if (page % be->granularity != 0)
        return mvm_fail(MVM_ERR_INVALID,
                        "page size %llu is not a multiple of the %s backend's granularity (%zu)",
                        (unsigned long long)page, be->name, be->granularity);
    mvm_status st = set_page(sp, d, page);
    if (st != MVM_OK)
        return st;
    sp->n_layers = d->n_layers;
    sp->n_experts = d->n_experts;
    sp->expert_bytes = d->expert_bytes;
    uint64_t total_pages = (uint64_t)sp->n_total * sp->ppe, budget;
    if ((st = budget_bytes(sp, d, d->slots, &budget)) != MVM_OK)
        return st;
    uint64_t pages = budget / page;
    sp->n_chunks = (uint32_t)(pages < total_pages ? pages : total_pages);
    /* packed where the budget holds every expert back to back (space_impl.h): bytes (or
     * the automatic budget) that hold them so, or a share of the experts that is all of
     * them (a smaller share asks for a cache of that share, whatever would fit) */
    const uint64_t packed = (d->expert_bytes + MVM_PACK_ALIGN - 1) / MVM_PACK_ALIGN *
                            MVM_PACK_ALIGN;
    const uint64_t packed_pages = (sp->n_total * packed + page - 1) / page;
    const bool holds = d->device_budget ? packed_pages <= pages : pages >= total_pages;
    if (d->pack && !d->write_back && !be->host_readable && be->ops->copy_to && holds) {
        sp->packed = true;
        sp->stride = packed;
        sp->reserved = packed_pages * page;
        sp->n_chunks = (uint32_t)packed_pages;
    }
    return d->slots && !sp->packed ? plan_slots(sp, d) : MVM_OK;
}

static mvm_status alloc_tables(mvm_space *sp)
{
    size_t n_pages = (size_t)sp->n_total * sp->ppe;
    sp->pages = malloc(n_pages * sizeof *sp->pages);
    sp->pins = calloc(sp->n_total, sizeof *sp->pins);
    sp->cut = calloc(sp->n_layers, sizeof *sp->cut);
    sp->shared = calloc(1, sizeof *sp->shared);
    if (!sp->pages || !sp->pins || !sp->cut || !sp->shared)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the page tables of %zu pages", n_pages);
    for (size_t i = 0; i < n_pages; i++)
        sp->pages[i] = (struct page){.chunk = -1, .state = MVM_PAGE_HOME};
    sp->n_free = sp->n_chunks;
    atomic_init(&sp->shared->refs, 1);
    return MVM_OK;
}

/* Unmaps everything mapped in the range, a mapping at a time: each mapped slab's run, then
 * where homes are mapped every page not resident (a loading page is still on its home). */
static void unmap_all(mvm_space *sp)
{
    mvm_backend *be = sp->be;
    for (uint32_t k = 0; sp->slabs && k < sp->n_chunks; k++) {
        struct slab *s = &sp->slabs[k];
        if (!s->n || s->expert < 0 || !s->mapped || sp->slots)
            continue;
        uint64_t bytes = (uint64_t)s->n * sp->page_size;
        if (be->ops->unmap(be, page_va(sp, (uint32_t)s->expert, s->page), bytes, bytes))
            mvm_log(MVM_LOG_WARN, "teardown: %s", mvm_last_error());
        s->mapped = false;
    }
    if (!sp->homes_mapped)
        return;
    size_t n = (size_t)sp->n_total * sp->ppe, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && sp->pages[i].state != MVM_PAGE_RESIDENT)
            continue;
        if (i > start && be->ops->unmap(be, sp->base + start * sp->page_size,
                                        (i - start) * sp->page_size, sp->page_size) != MVM_OK)
            mvm_log(MVM_LOG_WARN, "teardown: %s", mvm_last_error());
        start = i + 1;
    }
}

/* Releases whatever create got to; safe on a partly built space. */
static void teardown(mvm_space *sp)
{
    mvm_backend *be = sp->be;
    if (be) {
        if (sp->base && sp->pages)
            unmap_all(sp);
        if (sp->packed)
            mvm_upload_teardown(sp);
        mvm_slabs_destroy(sp);
        if (sp->pool)
            be->ops->pool_destroy(be, sp->pool);
        if (sp->home)
            be->ops->home_destroy(be, sp->home);
        if (sp->base)
            be->ops->unreserve(be, sp->base, sp->reserved);
        be->ops->destroy(be);
    }
    free(sp->pages);
    free(sp->pins);
    free(sp->cut);
    free(sp->slabs);
    free(sp->chunk_slab);
    free(sp->free_slabs);
    if (sp->shared)
        mvm_shared_release(sp->shared);
    pthread_cond_destroy(&sp->work);
    pthread_cond_destroy(&sp->moved);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

/* MOEVM_MOVE_SPIN in nanoseconds for a space on backend be (options.c says why). */
static mvm_status move_spin_ns(const mvm_backend *be, uint64_t *out)
{
    mvm_option_value v;
    mvm_status st = mvm_option_read(&mvm_opt_move_spin, &v);
    if (st != MVM_OK)
        return st;
    if (v.i < 0) { /* auto */
        cpu_set_t set;
        int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        v.i = strcmp(be->name, "cuda") == 0 && cpus >= 4 ? 2000 : 0;
    }
    *out = (uint64_t)v.i * 1000;
    return MVM_OK;
}

/* Pages of a prefetch's piece (MOEVM_COPY_PIECE bytes in whole pages); 0, or a piece as
 * large as an expert: the whole expert. */
static uint32_t piece_pages(const mvm_space *sp, uint64_t bytes)
{
    uint64_t n = (bytes + sp->page_size - 1) / sp->page_size;
    return bytes && n < sp->ppe ? (uint32_t)n : sp->ppe;
}

mvm_status mvm_space_create(const mvm_space_desc *d, mvm_space **out)
{
    mvm_status st = check_desc(d);
    if (st != MVM_OK)
        return st;
    if (!out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_create: out is NULL");
    mvm_space *sp = calloc(1, sizeof *sp);
    if (!sp)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a space");
    pthread_mutex_init(&sp->mu, NULL);
    cond_init_monotonic(&sp->work);
    cond_init_monotonic(&sp->moved);

    mvm_backend *be = NULL;
    if ((st = mvm_backend_open(d->backend, d->device, &be)) != MVM_OK) {
        teardown(sp);
        return st;
    }
    sp->be = be;
    sp->write_back = be->writable = d->write_back != 0;
    be->track_clean = sp->write_back && d->clean_evict && be->ops->unchanged;
    be->huge_homes = !d->small_pages;
    if (d->unmapped_homes && !be->host_readable) /* the CPU reads host-backend addresses */
        be->home_mappable = false;
    mvm_option_value piece;
    if ((st = mvm_option_read(&mvm_opt_copy_piece, &piece)) != MVM_OK ||
        (st = move_spin_ns(be, &sp->spin_ns)) != MVM_OK) {
        teardown(sp);
        return st;
    }
    if ((st = plan_layout(sp, d)) || (st = alloc_tables(sp)) ||
        (st = mvm_topo_probe(be->pci_bus_id, &sp->topo)) ||
        (st = be->ops->reserve(be, sp->reserved,
                               sp->page_size > be->granularity ? sp->page_size
                                                               : be->granularity,
                               &sp->base)) ||
        (st = be->ops->home_create(be, (size_t)sp->n_total * sp->ppe, sp->page_size, sp->ppe,
                                   sp->expert_bytes, &sp->topo, &sp->home,
                                   (void **)&sp->home_host)) ||
        (st = be->ops->pool_create(be, sp->n_chunks, sp->page_size, &sp->pool)) ||
        (st = sp->packed ? mvm_upload_init(sp) : mvm_slabs_init(sp)) ||
        (be->home_mappable && !sp->packed &&
         (st = be->ops->map_home(be, sp->base, sp->home, 0, (size_t)sp->n_total * sp->ppe,
                                 false))) ||
        ((sp->homes_mapped = be->home_mappable && !sp->packed),
         (sp->piece_pages = piece_pages(sp, (uint64_t)piece.i)),
         (st = mvm_migrate_start(sp)))) {
        teardown(sp);
        return st;
    }
    sp->home_dev = be->ops->home_device_addr ? be->ops->home_device_addr(be, sp->home) : 0;
    if (!mvm_registry_add(sp)) {
        mvm_migrate_stop(sp);
        teardown(sp);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory registering the space");
    }
    char budget[32];
    fmt_bytes(budget, sizeof budget, (uint64_t)sp->n_chunks * sp->page_size);
    mvm_log(MVM_LOG_INFO, "space: %u x %u experts of %llu bytes, %s, budget %s "
            "(%u pages), backend %s, moves spin %llu us before sleeping", sp->n_layers,
            sp->n_experts, (unsigned long long)sp->expert_bytes,
            sp->packed ? "packed" : sp->slots ? "whole pages each, read in slots"
                                              : "whole pages each", budget, sp->n_chunks, be->name,
            (unsigned long long)(sp->spin_ns / 1000));
    *out = sp;
    return MVM_OK;
}

mvm_status mvm_space_destroy(mvm_space *sp)
{
    if (!sp || !mvm_registry_remove(sp))
        return mvm_fail(MVM_ERR_INVALID,
                        "mvm_space_destroy: %p is not a live space (destroyed twice?)", (void *)sp);
    mvm_migrate_stop(sp);
    for (struct unpin_event *u = sp->unpins, *next; u; u = next) {
        next = u->next;
        sp->be->ops->event_destroy(sp->be, u->ev);
        free(u);
    }
    teardown(sp);
    return MVM_OK;
}

mvm_status mvm_lock_expert(const mvm_space *csp, uint32_t l, uint32_t e, uint32_t *idx)
{
    mvm_space *sp = (mvm_space *)csp;
    if (!sp || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "%p is not a live space", (void *)sp);
    if (l >= sp->n_layers || e >= sp->n_experts)
        return mvm_fail(MVM_ERR_RANGE, "expert (%u, %u) out of range: the space has %u layers "
                        "of %u experts", l, e, sp->n_layers, sp->n_experts);
    pthread_mutex_lock(&sp->mu);
    *idx = l * sp->n_experts + e;
    return MVM_OK;
}

mvm_status mvm_space_topo(const mvm_space *sp, mvm_topo *out)
{
    if (!sp || !out || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_topo: not a live space, or out NULL");
    *out = sp->topo;
    return MVM_OK;
}

mvm_status mvm_space_get_info(const mvm_space *sp, mvm_space_info *info)
{
    if (!sp || !info || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_get_info: not a live space, or info NULL");
    memset(info, 0, sizeof *info);
    snprintf(info->backend, sizeof info->backend, "%s", sp->be->name);
    snprintf(info->device, sizeof info->device, "%s", sp->be->device);
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%s", sp->be->pci_bus_id);
    info->n_layers = sp->n_layers;
    info->n_experts = sp->n_experts;
    info->expert_bytes = sp->expert_bytes;
    info->page_size = sp->page_size;
    info->expert_stride = sp->stride;
    info->pages_per_expert = sp->ppe;
    info->device_pages = sp->packed ? sp->n_total * sp->ppe : sp->n_chunks;
    info->device_bytes = (uint64_t)sp->n_chunks * sp->page_size;
    if (sp->pool_backed) /* one allocation of whole granules (mvm_slabs_init) */
        info->device_bytes = (info->device_bytes + sp->be->granularity - 1) /
                             sp->be->granularity * sp->be->granularity;
    info->device_free = sp->be->device_free;
    info->base = sp->base;
    info->reserved_bytes = sp->reserved;
    info->numa_node = sp->be->numa_node >= 0 ? sp->be->numa_node : sp->topo.numa_node;
    info->home_mapped = sp->homes_mapped; /* not in a packed space, whatever the device can */
    info->home_readable = sp->home_dev != 0;
    info->move_spin_us = (uint32_t)(sp->spin_ns / 1000);
    info->host_readable = sp->be->host_readable;
    info->clean_evict = sp->be->track_clean;
    info->packed = sp->packed;
    info->slots = sp->slots;
    info->home_page = sp->be->home_page;
    return MVM_OK;
}

void *mvm_expert_addr(const mvm_space *sp, uint32_t l, uint32_t e)
{
    if (!sp || l >= sp->n_layers || e >= sp->n_experts)
        return NULL;
    return (void *)(uintptr_t)page_va(sp, l * sp->n_experts + e, 0);
}

void *mvm_expert_home(const mvm_space *sp, uint32_t l, uint32_t e)
{
    if (!sp || l >= sp->n_layers || e >= sp->n_experts)
        return NULL;
    return sp->home_host + (uint64_t)(l * sp->n_experts + e) * sp->home_stride;
}

void *mvm_expert_home_device(const mvm_space *sp, uint32_t l, uint32_t e)
{
    if (!sp || l >= sp->n_layers || e >= sp->n_experts || !sp->home_dev)
        return NULL;
    return (void *)(uintptr_t)(sp->home_dev +
                               (uint64_t)(l * sp->n_experts + e) * sp->home_stride);
}

mvm_status mvm_expert_residency(const mvm_space *csp, uint32_t l, uint32_t e,
                                mvm_residency *out)
{
    uint32_t idx;
    if (!out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_expert_residency: out is NULL");
    mvm_status st = mvm_lock_expert(csp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    mvm_space *sp = (mvm_space *)csp;
    memset(out, 0, sizeof *out);
    out->n_pages = sp->ppe;
    out->pins = sp->pins[idx];
    bool prefix = true;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        uint8_t s = page_at(sp, idx, p)->state;
        out->resident += s == MVM_PAGE_RESIDENT;
        out->loading += s == MVM_PAGE_LOADING;
        prefix = prefix && s == MVM_PAGE_RESIDENT;
        out->resident_prefix += prefix;
    }
    pthread_mutex_unlock(&sp->mu);
    return MVM_OK;
}

mvm_status mvm_page_get_state(const mvm_space *csp, uint32_t l, uint32_t e, uint32_t page,
                              mvm_page_state *out)
{
    uint32_t idx;
    if (!out)
        return mvm_fail(MVM_ERR_INVALID, "mvm_page_get_state: out is NULL");
    mvm_status st = mvm_lock_expert(csp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    mvm_space *sp = (mvm_space *)csp;
    if (page >= sp->ppe)
        st = mvm_fail(MVM_ERR_RANGE, "page %u out of range: experts have %u pages", page, sp->ppe);
    else
        *out = (mvm_page_state)page_at(sp, idx, page)->state;
    pthread_mutex_unlock(&sp->mu);
    return st;
}

mvm_status mvm_pin(mvm_space *sp, uint32_t l, uint32_t e)
{
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    if (sp->pins[idx]++ == 0)
        sp->n_pinned++;
    pthread_mutex_unlock(&sp->mu);
    return MVM_OK;
}

void mvm_unpin_locked(mvm_space *sp, uint32_t idx)
{
    if (--sp->pins[idx] == 0) {
        sp->n_pinned--;
        mvm_land_deferred_locked(sp, idx);
        /* a deferred landing left needs the worker's remap; else it has nothing new to do,
         * and waking a sleeping worker at every unpin slowed a step's release
         * (docs/perf/engine.md, session 81) */
        if (sp->deferred.head)
            mvm_wake_worker(sp);
    }
}

/* now: unpin at once; else when the work queued on `stream` so far has finished (NULL is a
 * real stream on CUDA: the legacy default stream). */
static mvm_status unpin(mvm_space *sp, uint32_t l, uint32_t e, bool now, void *stream)
{
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    struct unpin_event *u = NULL;
    mvm_event *ev = NULL;
    if (sp->pins[idx] == 0)
        st = mvm_fail(MVM_ERR_INVALID, "expert (%u, %u) is not pinned", l, e);
    else if (!now && (st = sp->be->ops->event_record(sp->be, stream, &ev)) == MVM_OK && ev &&
             !(u = malloc(sizeof *u))) {
        sp->be->ops->event_destroy(sp->be, ev);
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for an unpin event");
    }
    if (st == MVM_OK && u) {
        *u = (struct unpin_event){.next = sp->unpins, .expert = idx, .ev = ev};
        sp->unpins = u;
        mvm_wake_worker(sp);
    } else if (st == MVM_OK) {
        mvm_unpin_locked(sp, idx);
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

mvm_status mvm_unpin(mvm_space *sp, uint32_t l, uint32_t e)
{
    return unpin(sp, l, e, true, NULL);
}

mvm_status mvm_unpin_after(mvm_space *sp, uint32_t l, uint32_t e, void *stream)
{
    return unpin(sp, l, e, false, stream);
}

mvm_status mvm_space_get_stats(const mvm_space *csp, mvm_stats *out)
{
    mvm_space *sp = (mvm_space *)csp;
    if (!sp || !out || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "mvm_space_get_stats: not a live space, or out NULL");
    pthread_mutex_lock(&sp->mu);
    *out = sp->stats;
    out->wait_ns = atomic_load(&sp->shared->wait_ns);
    out->moves_queued = sp->demand.n + sp->prefetch.n;
    out->moves_in_flight = sp->in_flight;
    out->moves_deferred = sp->deferred.n;
    out->resident_pages = sp->n_resident;
    out->loading_pages = sp->n_loading;
    out->free_pages = sp->n_free;
    out->reserved_pages = sp->n_reserved;
    out->pinned_experts = sp->n_pinned;
    pthread_mutex_unlock(&sp->mu);
    return MVM_OK;
}
