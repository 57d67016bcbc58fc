/* A step's begin in the engine's residency (residency.h): its experts shielded, requested
 * and counted, their copies asked together and waited for, in rounds that fit the budget
 * for a reader that cannot read the homes, and pinned; and its release. */
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/residency_impl.h"
#include "vmm/error.h"

/* Unpins the experts the step still holds (a round released earlier, or an expert run on
 * the CPU, holds none) and unshields them. */
static void unpin(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = layer * r->n_experts + (uint32_t)experts[i];
        if (r->pinned[x])
            mvm_unpin(r->space, layer, (uint32_t)experts[i]);
        r->pinned[x] = 0;
        r->view_addr[x] = 0;
        r->busy[x] = 0;
    }
}

/* The step's pin of expert x. */
static mvm_status pin_one(mvm_resid *r, uint32_t x)
{
    mvm_status st = mvm_pin(r->space, x / r->n_experts, x % r->n_experts);
    r->pinned[x] = st == MVM_OK;
    return st;
}

/* Whether an expert was all there: every page resident, none loading. */
static int all_there(const mvm_residency *res)
{
    return res->resident == res->n_pages && !res->loading;
}

/* Counts a step's access to expert x, which found `res` when requested. */
static void count_access(mvm_resid *r, uint32_t x, const mvm_residency *res)
{
    int hit = all_there(res);
    r->stats.accesses++;
    r->stats.hits += hit;
    r->stats.partial_hits += !hit && res->resident > 0 && !res->loading;
    r->stats.prefetch_used += r->by_prefetch[x];
    r->stats.prefetch_hits += hit && r->by_prefetch[x];
    r->by_prefetch[x] = 0;
}

/* A step's access to expert x (shielded): requested resident and counted. *move (move not
 * NULL): the copy to wait for before x is pinned, NULL when there is none (a hit, or
 * MOEVM_DETERMINISTIC's copies, landed in order). A step asks for all its experts before it
 * waits for any, so the migration worker copies them as one batch: each job's remaps overlap
 * the next one's copy (docs/perf/vmm.md, section 5: eight experts at once cost eight bare
 * copies, one alone up to 1.6x its copy). */
static mvm_status ask_expert(mvm_resid *r, uint32_t x, mvm_move **move)
{
    uint32_t l = x / r->n_experts, e = x % r->n_experts;
    mvm_residency res = {0};
    mvm_expert_residency(r->space, l, e, &res);
    if (move)
        *move = NULL;
    /* a hit has nothing to wait for: no move handle (made, waited on and freed for nothing) */
    mvm_status st = mvm_resid_request(r, x, 1, 1, r->ordered || all_there(&res) ? NULL : move);
    if (st == MVM_OK)
        count_access(r, x, &res);
    return st;
}

/* Pins what ask_expert asked for, once its copy (move, released here; may be NULL) has
 * landed: a page pinned while its copy lands would wait for the pin to go (vmm/migrate.c). */
static mvm_status hold_expert(mvm_resid *r, uint32_t x, mvm_move *move)
{
    mvm_status st = MVM_OK;
    if (move) {
        st = mvm_move_wait(move, -1);
        mvm_move_release(move);
    }
    return st == MVM_OK ? pin_one(r, x) : st;
}

/* hold_expert for a reader on a device stream: x pinned, then that stream ordered after
 * x's copy (mvm_expert_wait_on) where the host would have waited for it to land; the host
 * goes on queueing. A copy that failed before it could be ordered (or one that landed
 * unmapped) is left to hold_expert, which waits and says why. A failure after it was ordered
 * is the driver's, which the stream's next synchronisation reports. */
static mvm_status hold_expert_on(mvm_resid *r, uint32_t x, mvm_move *move)
{
    const uint32_t l = x / r->n_experts, e = x % r->n_experts;
    mvm_status st = pin_one(r, x);
    if (st != MVM_OK || !move)
        return st;
    uint64_t at = 0; /* device-view: where the copy lands, not waiting for its map */
    if ((r->read_view &&
         mvm_expert_wait_view(r->space, l, e, r->reader_stream, &at) == MVM_OK) ||
        mvm_expert_wait_on(r->space, l, e, r->reader_stream) == MVM_OK) {
        r->view_addr[x] = at;
        r->stats.view_holds += at != 0;
        mvm_move_release(move);
        return MVM_OK;
    }
    mvm_unpin(r->space, l, e); /* a pin would hold off the landing waited for below */
    r->pinned[x] = 0;
    return hold_expert(r, x, move);
}

/* Pins experts[0..n), asked for with moves[i] (NULL: nothing to wait for), each once its
 * copy has landed; those pinned already (run from their homes) stay as they are. After a
 * failure (st, or a copy's) the other copies are released unwaited. The time it takes is
 * the steps' wait for their copies. */
static mvm_status hold_all(mvm_resid *r, uint32_t layer, const int32_t *experts,
                           mvm_move **moves, uint32_t n, mvm_status st)
{
    const double t0 = mvm_now_s();
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = layer * r->n_experts + (uint32_t)experts[i];
        mvm_move *move = moves[i];
        moves[i] = NULL;
        if (st == MVM_OK && !r->pinned[x])
            st = r->reader_stream ? hold_expert_on(r, x, move) : hold_expert(r, x, move);
        else if (move)
            mvm_move_release(move);
    }
    r->stats.wait_s += mvm_now_s() - t0;
    return st;
}

/* The start of a step's begin over experts[0..n) of `layer`: checked, then all shielded
 * from eviction before any of them loads. */
static mvm_status enter_step(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (experts[i] < 0 || (uint32_t)experts[i] >= r->n_experts || layer >= r->shape.n_layers)
            return mvm_fail(MVM_ERR_RANGE, "expert (%u, %d) is outside the space", layer,
                            experts[i]);
    for (uint32_t i = 0; i < n; i++)
        r->busy[layer * r->n_experts + (uint32_t)experts[i]] = 1;
    return MVM_OK;
}

/* After a failure: unpins the first `pinned` experts, unshields them all. */
static void abandon(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n,
                    uint32_t pinned)
{
    unpin(r, layer, experts, pinned);
    for (uint32_t i = pinned; i < n; i++)
        r->busy[layer * r->n_experts + (uint32_t)experts[i]] = 0;
}

mvm_status mvm_resid_begin(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n,
                           int wait)
{
    if (r->at_home)
        return mvm_resid_begin_home(r, layer, experts, n, 0, 0);
    mvm_status st = enter_step(r, layer, experts, n);
    if (st != MVM_OK)
        return st;
    uint32_t k = 0;
    for (; k < n && st == MVM_OK; k++) {
        uint32_t e = (uint32_t)experts[k], x = layer * r->n_experts + e;
        st = ask_expert(r, x, wait ? &r->moves[k] : NULL);
        if (st == MVM_ERR_NOSPACE) { /* no room: it runs from its home, which stays put */
            mvm_residency res = {0};
            mvm_expert_residency(r->space, layer, e, &res);
            count_access(r, x, &res);
            r->stats.bypassed++;
            st = pin_one(r, x);
        } else if (st == MVM_OK && !wait) { /* read through its address as it lands */
            st = pin_one(r, x);
        }
    }
    st = hold_all(r, layer, experts, r->moves, k, st);
    if (st != MVM_OK)
        unpin(r, layer, experts, n);
    return st;
}

void mvm_resid_drop_moves(mvm_resid *r)
{
    for (uint32_t i = 0; r->moves && i < r->n_experts; i++)
        if (r->moves[i]) {
            mvm_move_release(r->moves[i]);
            r->moves[i] = NULL;
        }
}

/* Room held by copies still in flight (prefetches the step does not use) is free once they
 * land: waits for the first of them. MVM_ERR_NOSPACE when none is in flight, which is no
 * proof that nothing can go: a copy the eviction passed by as loading may have landed since
 * (begin_round asks once more). */
static mvm_status wait_for_landing(mvm_resid *r)
{
    for (uint32_t x = 0; x < r->n_total; x++) {
        uint32_t l = x / r->n_experts, e = x % r->n_experts;
        mvm_residency res = {0};
        mvm_move *move = NULL;
        if (!r->resident[x] || r->busy[x] || mvm_expert_residency(r->space, l, e, &res) !=
            MVM_OK || !res.loading || mvm_make_resident_async(r->space, l, e, MVM_ALL_PAGES,
                                                               &move) != MVM_OK)
            continue;
        mvm_status st = mvm_move_wait(move, -1);
        mvm_move_release(move);
        return st;
    }
    return MVM_ERR_NOSPACE;
}

/* Moves experts[i] to experts[front], those between one on, keeping their order; moves
 * (NULL: none) beside them. */
static void to_front(int32_t *experts, mvm_move **moves, uint32_t i, uint32_t front)
{
    int32_t e = experts[i];
    mvm_move *m = moves ? moves[i] : NULL;
    memmove(experts + front + 1, experts + front, (i - front) * sizeof *experts);
    experts[front] = e;
    if (moves) {
        memmove(moves + front + 1, moves + front, (i - front) * sizeof *moves);
        moves[front] = m;
    }
}

/* Moves the experts with pages on the device (or on their way) to the front, in order. */
static void resident_first(const mvm_resid *r, uint32_t layer, int32_t *experts, uint32_t n)
{
    for (uint32_t i = 0, front = 0; i < n; i++)
        if (r->resident[layer * r->n_experts + (uint32_t)experts[i]])
            to_front(experts, NULL, i, front++);
}

/* Moves the asked experts[0..k) whose copies have landed (or that had none) to the
 * front, in order, r->moves beside them (NULL for those): returns their number. */
static uint32_t landed_first(mvm_resid *r, int32_t *experts, uint32_t k)
{
    uint32_t front = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (r->moves[i] && mvm_move_test(r->moves[i]) == MVM_OK) {
            mvm_move_release(r->moves[i]);
            r->moves[i] = NULL;
        }
        if (!r->moves[i])
            to_front(experts, r->moves, i, front++);
    }
    return front;
}

/* The failure of a round that found no room for one expert: what holds the budget. */
static mvm_status no_room(mvm_resid *r, uint32_t layer)
{
    uint32_t pinned = 0, pinned_pages = 0, loading = 0, shielded = 0, shielded_pages = 0;
    for (uint32_t x = 0; x < r->n_total; x++) {
        mvm_residency res = {0};
        if (mvm_expert_residency(r->space, x / r->n_experts, x % r->n_experts, &res) !=
                MVM_OK || res.resident + res.loading == 0)
            continue;
        loading += res.loading;
        if (res.pins)
            pinned++, pinned_pages += res.resident + res.loading;
        else if (r->shield && r->shield[x])
            shielded++, shielded_pages += res.resident + res.loading;
    }
    mvm_stats s;
    mvm_space_get_stats(r->space, &s);
    return mvm_fail(MVM_ERR_NOSPACE, "no room on the device for one expert of layer %u (%u "
                    "pages): the budget holds %u pages and none can be freed: %u experts "
                    "pinned (%u pages), %u shielded (%u pages), %u pages "
                    "loading, %u reserved for readers to fill (raise MOEVM_GPU_BUDGET)",
                    layer, r->ppe, (unsigned)r->view.capacity_pages, pinned, pinned_pages,
                    shielded, shielded_pages, loading, s.reserved_pages);
}

mvm_status mvm_resid_begin_round(mvm_resid *r, uint32_t layer, int32_t *experts, uint32_t n,
                                 uint32_t *n_round, uint32_t *n_ready)
{
    *n_round = *n_ready = 0;
    mvm_resid_drop_moves(r);
    mvm_status st = enter_step(r, layer, experts, n);
    if (st != MVM_OK)
        return st;
    resident_first(r, layer, experts, n);
    uint32_t k = 0;
    int asked_after_landing = 0;
    while (k < n) {
        st = ask_expert(r, layer * r->n_experts + (uint32_t)experts[k], &r->moves[k]);
        if (st == MVM_OK)
            k++;
        else if (st != MVM_ERR_NOSPACE || k > 0)
            break;
        else if ((st = wait_for_landing(r)) == MVM_ERR_NOSPACE && !asked_after_landing++)
            st = MVM_OK; /* nothing in flight now: ask once more, over what has landed */
        if (st != MVM_OK)
            break;
    }
    if (st == MVM_ERR_NOSPACE && k > 0)
        st = MVM_OK; /* the round is full: the rest wait for the next */
    uint32_t ready = st == MVM_OK ? landed_first(r, experts, k) : k;
    st = hold_all(r, layer, experts, r->moves, ready, st);
    if (st != MVM_OK) {
        mvm_resid_drop_moves(r);
        abandon(r, layer, experts, n, k);
        return st == MVM_ERR_NOSPACE ? no_room(r, layer) : st;
    }
    *n_round = k;
    *n_ready = ready;
    r->stats.extra_rounds += k < n;
    return MVM_OK;
}

mvm_status mvm_resid_hold_round(mvm_resid *r, uint32_t layer, const int32_t *experts,
                                uint32_t n_ready, uint32_t n_round)
{
    return hold_all(r, layer, experts + n_ready, r->moves + n_ready, n_round - n_ready,
                    MVM_OK);
}

void mvm_resid_release(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n)
{
    mvm_resid_drop_moves(r);
    unpin(r, layer, experts, n);
}

mvm_status mvm_resid_begin_home(mvm_resid *r, uint32_t layer, const int32_t *experts,
                                uint32_t n, int in_place, int missed)
{
    mvm_status st = enter_step(r, layer, experts, n);
    if (st != MVM_OK)
        return st;
    uint32_t done = 0;
    for (; done < n && st == MVM_OK; done++) {
        uint32_t x = layer * r->n_experts + (uint32_t)experts[done];
        mvm_residency res = {.n_pages = r->ppe}; /* missed: none resident */
        if (!missed)
            mvm_expert_residency(r->space, layer, (uint32_t)experts[done], &res);
        count_access(r, x, &res);
        r->stats.cpu_runs += !in_place;
        r->stats.zerocopy_runs += in_place;
        r->home_run[x] = in_place ? 1 : 2;
        if (in_place && r->home_in_place)
            r->view_addr[x] = (uint64_t)(uintptr_t)mvm_expert_home_device(
                r->space, layer, (uint32_t)experts[done]);
        else if (in_place && (st = pin_one(r, x)) != MVM_OK)
            break;
    }
    if (st != MVM_OK)
        abandon(r, layer, experts, n, done);
    return st;
}
