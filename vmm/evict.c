/*
 * Evictions from the space (mvm_evict, mvm_discard, mvm_evict_many, mvm_prefetch_cancel): a
 * resident run at a time back on its homes (written back first in write-back spaces, unless
 * the device left it as it was loaded), loading pages cancelled, MoEpic's cuts remembered
 * per layer. space.c has the layout and the pins; migrate.c the moves.
 */
#include <stdio.h>
#include <stdlib.h>

#include "vmm/error.h"
#include "vmm/registry.h"
#include "vmm/space_impl.h"

/* Marks a slab already listed by an eviction (its next_free is unused while owned). */
#define LISTED UINT32_MAX

/* Puts the resident run of the slab at `first` back on its homes: the write-backs first (in
 * write_back spaces, of the pages not clean[i]: all with keep, else those before `from`,
 * which the caller loads again), then one unmap, then the homes
 * mapped back where the backend maps them. A failure before the unmap leaves the run
 * resident and readable. If the homes cannot be mapped back, the slab is mapped back and the
 * run stays resident; only if that fails too do its pages go home unmapped (logged). */
static mvm_status put_run_home(mvm_space *sp, uint32_t first, bool keep, const bool *clean,
                               uint32_t from)
{
    mvm_backend *be = sp->be;
    struct slab *s = &sp->slabs[first];
    uint32_t idx = (uint32_t)s->expert, a = s->page, n = s->n;
    uint64_t va = page_va(sp, idx, a), bytes = (uint64_t)n * sp->page_size;
    size_t home = (size_t)idx * sp->ppe + a;
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; sp->write_back && i < n; i++) {
        if (clean[i] || (!keep && a + i >= from))
            continue;
        if ((st = be->ops->copy_back(be, sp->pool, first + i,
                                     sp->home_host + (home + i) * sp->page_size,
                                     page_bytes(sp, a + i))) != MVM_OK)
            return st; /* still resident, nothing lost */
        sp->stats.bytes_written_back += page_bytes(sp, a + i);
    }
    /* Where the backend swaps mappings in one step (host), readers never see a hole; where
     * homes are unmapped nobody reads here now, and the worker unmaps it later (slab.c),
     * unless the caller loads kept pages here again at once (a cut). A slot space never
     * mapped it there. */
    bool swap = sp->homes_mapped && be->atomic_remap;
    bool later = !sp->homes_mapped && !sp->slots && from <= a &&
                 mvm_stale_keep(sp, va, bytes, first);
    if (later)
        mvm_wake_worker(sp); /* the worker unmaps it when it has nothing to copy */
    if (!swap && !later && !sp->slots && (st = be->ops->unmap(be, va, bytes, bytes)) != MVM_OK)
        return st;
    if (sp->homes_mapped && (st = be->ops->map_home(be, va, sp->home, home, n, swap))) {
        char why[200];
        snprintf(why, sizeof why, "%s", mvm_last_error());
        if (be->ops->map_chunks(be, va, sp->pool, first, n, false) == MVM_OK)
            return mvm_fail(st, "%s; the pages stay resident", why);
        mvm_log(MVM_LOG_WARN, "expert %u pages %u-%u are home but unmapped: %s", idx, a,
                a + n - 1, why);
        mvm_fail(st, "%s", why);
    }
    for (uint32_t i = 0; i < n; i++) {
        struct page *pg = page_at(sp, idx, a + i);
        pg->chunk = -1;
        pg->state = MVM_PAGE_HOME;
        pg->prefetched = 0;
        if (a + i < from) /* kept: reloaded by the caller */
            continue;
        sp->stats.pages_evicted++;
        sp->stats.pages_discarded += !keep;
        sp->stats.pages_clean += keep && clean[i];
    }
    sp->n_resident -= n;
    mvm_slab_release(sp, first);
    return st;
}

/* put_run_home, its time counted in evict_ns */
static mvm_status evict_run(mvm_space *sp, uint32_t first, bool keep, const bool *clean,
                           uint32_t from)
{
    const uint64_t start = mvm_clock_ns();
    mvm_status st = put_run_home(sp, first, keep, clean, from);
    sp->stats.evict_ns += mvm_clock_ns() - start;
    return st;
}

/* Which pages of the runs still hold what their loads put there, asked of the backend in
 * one call: a write_back space then waits once per eviction, not once per page. A failed or
 * impossible check leaves them "changed": the copy is the safe side. */
static void check_clean(mvm_space *sp, const uint32_t *runs, uint32_t n_runs, bool *clean,
                        uint32_t n_pages)
{
    size_t *chunks = malloc(((size_t)n_pages + 1) * sizeof *chunks);
    if (!chunks)
        return;
    uint32_t m = 0;
    for (uint32_t r = 0; r < n_runs; r++)
        for (uint32_t i = 0; i < sp->slabs[runs[r]].n; i++)
            chunks[m++] = runs[r] + i;
    if (sp->be->ops->unchanged(sp->be, sp->pool, chunks, m, clean) != 0)
        for (uint32_t i = 0; i < m; i++)
            clean[i] = false;
    free(chunks);
}

/* Evicts pages [keep_pages, ppe) of experts idx[0..n), sp->mu held: loading pages are
 * cancelled, resident ones go home (keep: through a write-back where needed), a run at a
 * time. A run is one mapping of one slab and cannot be cut, so a resident run that starts
 * before keep_pages goes whole and its pages before keep_pages are loaded again (*reload, a
 * move for the caller to wait on; NULL: there was none); the cut is remembered for the
 * layer, so that its next loads put it between two runs and the next such eviction drops
 * a run. A pinned expert is left as it is (MVM_ERR_PINNED). Returns the first failure; the
 * other experts and runs are still evicted. */
static mvm_status evict_locked(mvm_space *sp, const uint32_t *idx, uint32_t n,
                               uint32_t keep_pages, bool keep, mvm_move **reload)
{
    uint32_t cut_run = UINT32_MAX, cut_idx = 0; /* the run that keep_pages cuts, if any */
    if (reload)
        *reload = NULL;
    uint32_t from = keep_pages == MVM_ALL_PAGES ? sp->ppe : keep_pages;
    uint32_t *runs = malloc(((size_t)n * (sp->ppe - from) + 1) * sizeof *runs);
    if (!runs)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory evicting %u experts", n);
    mvm_status first = MVM_OK;
    uint32_t m = 0, n_pages = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (sp->pins[idx[i]]) {
            if (first == MVM_OK)
                first = mvm_fail(MVM_ERR_PINNED, "expert (%u, %u) is pinned %u time(s); unpin "
                                 "it before evicting", idx[i] / sp->n_experts,
                                 idx[i] % sp->n_experts, sp->pins[idx[i]]);
            continue;
        }
        if (from > 0 && from < sp->ppe)
            sp->cut[idx[i] / sp->n_experts] = from;
        for (uint32_t p = from; p < sp->ppe; p++) {
            struct page *pg = page_at(sp, idx[i], p);
            if (pg->state == MVM_PAGE_LOADING) {
                mvm_cancel_page(sp, idx[i], p);
            } else if (pg->state == MVM_PAGE_RESIDENT) {
                uint32_t k;
                struct slab *s = slab_of(sp, pg->chunk, &k);
                if (s->next_free != LISTED) { /* an expert named twice lists its runs once */
                    s->next_free = LISTED;
                    runs[m++] = k;
                    n_pages += s->n;
                }
                if (s->page < from) {
                    cut_run = s->page;
                    cut_idx = idx[i];
                }
                p = s->page + s->n - 1;
            }
        }
    }
    bool *clean = calloc((size_t)n_pages + 1, sizeof *clean);
    if (!clean) {
        free(runs);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory evicting %u experts", n);
    }
    if ((keep || cut_run != UINT32_MAX) && sp->write_back && sp->be->track_clean && m)
        check_clean(sp, runs, m, clean, n_pages);
    for (uint32_t r = 0, at = 0; r < m; at += sp->slabs[runs[r]].n, r++) {
        sp->slabs[runs[r]].next_free = 0; /* owned slabs do not use it */
        mvm_status st = evict_run(sp, runs[r], keep, clean + at, from);
        if (st != MVM_OK && first == MVM_OK)
            first = st;
    }
    free(clean);
    free(runs);
    if (cut_run != UINT32_MAX && reload && page_at(sp, cut_idx, cut_run)->state == MVM_PAGE_HOME) {
        mvm_status st = mvm_reload_locked(sp, cut_idx, cut_run, from, reload);
        if (st != MVM_OK && first == MVM_OK)
            first = st;
    }
    return first;
}

mvm_status mvm_slots_refuse_part(const mvm_space *sp, uint32_t l, uint32_t e, uint32_t n)
{
    return mvm_fail(MVM_ERR_UNSUPPORTED, "expert (%u, %u): a part of it (%u of its %u pages) "
                    "asked to move, but a slot space moves whole experts (each is read where it "
                    "lands, in one slab); MOEVM_SLOTS=off keeps them in pages that move apart",
                    l, e, n, sp->ppe);
}

/* An eviction from a packed space: its experts stay (space_impl.h). */
static mvm_status packed_refuses(uint32_t l, uint32_t e)
{
    return mvm_fail(MVM_ERR_INVALID, "expert (%u, %u): the space is packed (its budget holds "
                    "every expert, back to back), so its experts stay resident; MOEVM_PACK=off "
                    "keeps them in pages that can move", l, e);
}

static mvm_status evict_pages(mvm_space *sp, uint32_t l, uint32_t e, uint32_t keep_pages,
                              bool keep)
{
    uint32_t idx;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    if (keep_pages != MVM_ALL_PAGES && keep_pages > sp->ppe)
        st = mvm_fail(MVM_ERR_RANGE, "keep_pages %u out of range: experts have %u pages",
                      keep_pages, sp->ppe);
    else if (sp->packed && keep_pages < sp->ppe)
        st = packed_refuses(l, e);
    else if (sp->slots && keep_pages > 0 && keep_pages < sp->ppe)
        st = mvm_slots_refuse_part(sp, l, e, keep_pages);
    mvm_move *reload = NULL;
    if (st == MVM_OK)
        st = evict_locked(sp, &idx, 1, keep_pages, keep, &reload);
    pthread_mutex_unlock(&sp->mu);
    if (reload) { /* the kept pages of a cut run, loaded again */
        mvm_status rst = mvm_move_wait(reload, -1);
        mvm_move_release(reload);
        if (st == MVM_OK)
            st = rst;
    }
    return st;
}

mvm_status mvm_evict(mvm_space *sp, uint32_t l, uint32_t e, uint32_t keep_pages)
{
    return evict_pages(sp, l, e, keep_pages, true);
}

mvm_status mvm_discard(mvm_space *sp, uint32_t l, uint32_t e, uint32_t keep_pages)
{
    return evict_pages(sp, l, e, keep_pages, false);
}

mvm_status mvm_prefetch_cancel(mvm_space *sp, uint32_t l, uint32_t e, uint32_t *n_pages)
{
    uint32_t idx, n = 0;
    if (n_pages)
        *n_pages = 0;
    mvm_status st = mvm_lock_expert(sp, l, e, &idx);
    if (st != MVM_OK)
        return st;
    for (uint32_t p = 0; p < sp->ppe; p++) {
        struct page *pg = page_at(sp, idx, p);
        if (pg->state == MVM_PAGE_LOADING && !pg->job->started && pg->job->prio == PRIO_PREFETCH) {
            uint32_t loading = 0;
            for (uint32_t q = p; q < sp->ppe; q++)
                loading += page_at(sp, idx, q)->state == MVM_PAGE_LOADING;
            mvm_cancel_page(sp, idx, p); /* its whole run goes home */
            for (uint32_t q = p; q < sp->ppe; q++)
                loading -= page_at(sp, idx, q)->state == MVM_PAGE_LOADING;
            n += loading;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    if (n_pages)
        *n_pages = n;
    return MVM_OK;
}

mvm_status mvm_evict_many(mvm_space *sp, uint32_t l, const uint32_t *experts, uint32_t n)
{
    if (!sp || !mvm_registry_contains(sp))
        return mvm_fail(MVM_ERR_INVALID, "%p is not a live space", (void *)sp);
    if (n && !experts)
        return mvm_fail(MVM_ERR_INVALID, "mvm_evict_many: experts is NULL");
    if (l >= sp->n_layers)
        return mvm_fail(MVM_ERR_RANGE, "layer %u out of range: the space has %u layers", l,
                        sp->n_layers);
    for (uint32_t i = 0; i < n; i++)
        if (experts[i] >= sp->n_experts)
            return mvm_fail(MVM_ERR_RANGE, "expert (%u, %u) out of range: the space has %u "
                            "experts a layer", l, experts[i], sp->n_experts);
    uint32_t *idx = malloc(((size_t)n + 1) * sizeof *idx);
    if (!idx)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory evicting %u experts", n);
    for (uint32_t i = 0; i < n; i++)
        idx[i] = l * sp->n_experts + experts[i];
    pthread_mutex_lock(&sp->mu);
    mvm_status st = sp->packed && n ? packed_refuses(l, experts[0])
                                    : evict_locked(sp, idx, n, 0, true, NULL);
    pthread_mutex_unlock(&sp->mu);
    free(idx);
    return st;
}
