/* Expert residency for the engine (residency.h): the policy modules, requests and
 * prefetches, and a step's end; a step's begin, its rounds and pins are residency_step.c's. */
#include "engine/forward/residency_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/engine_options.h"
#include "policy/choose.h"
#include "policy/cost_load.h"
#include "policy/evict_driver.h"
#include "vmm/error.h"
#include "vmm/options.h"


static mvm_status hold_table(mvm_resid *r);
static const mvm_pview *view(mvm_resid *r);

struct modules {
    const mvm_evict_ops *evict;
    const mvm_config_ops *config;
    const mvm_assign_ops *assign;
    const char *evict_args, *config_args, *assign_args;
};

/* Each role's module and its parameters: p's, else the options'. The assign role only on
 * a device: on the CPU every expert runs where the CPU reads it, and choosing a module
 * (or giving the default one parameters) there is an error rather than a choice silently
 * ignored. */
static mvm_status find_modules(const mvm_resid_params *p, struct modules *out)
{
    const void *e = NULL, *c = NULL, *a = NULL;
    mvm_status st = mvm_engine_choose(MVM_ROLE_EVICT, p->evict, p->evict_args, &e,
                                      &out->evict_args);
    if (st == MVM_OK)
        st = mvm_engine_choose(MVM_ROLE_CONFIG, p->config, p->config_args, &c,
                               &out->config_args);
    if (st == MVM_OK)
        st = mvm_engine_choose(MVM_ROLE_ASSIGN, p->assign, p->assign_args, &a,
                               &out->assign_args);
    const char *assign = st == MVM_OK ? ((const mvm_assign_ops *)a)->name : NULL;
    const char *args = out->assign_args && *out->assign_args ? out->assign_args : NULL;
    if (assign && !p->on_device && (strcmp(assign, "gpu") != 0 || args))
        return mvm_fail(MVM_ERR_INVALID, "assign %s%s%s%s: the assign role places experts "
                        "between the GPU and the CPU, and this run computes on the CPU only "
                        "(the engine's GPU pass: MOEVM_BACKEND=cuda)", assign,
                        args ? "{" : "", args ? args : "", args ? "}" : "");
    out->evict = e;
    out->config = c;
    out->assign = p->on_device ? a : NULL;
    return st;
}

/* Expert x's pages as the view has them, and its bit of resident_bits. */
static void set_resident(mvm_resid *r, uint32_t x, uint32_t pages)
{
    r->resident[x] = pages;
    mvm_evict_mark(r->resident_bits, x, pages);
}

/* No layer budgets or landings yet, and the mirror as the space is: a context made after
 * another (bench's repetitions, a server's requests) finds that one's experts still
 * resident, and a mirror that thought the device empty would find no victim for a device
 * that is full. */
static void initial_state(mvm_resid *r, uint32_t n_layers)
{
    r->landed_layer = UINT32_MAX;
    r->view.cpu_scale = 1; /* the cost model as given, until the CPU's experts are timed */
    for (uint32_t l = 0; l < n_layers; l++) {
        r->layer_pages[l] = UINT64_MAX;
        r->theta[l] = 1.0f;
    }
    for (uint32_t x = 0; x < r->n_total; x++) {
        mvm_residency res = {0};
        if (mvm_expert_residency(r->space, x / r->n_experts, x % r->n_experts, &res) == MVM_OK)
            set_resident(r, x, res.resident + res.loading);
    }
}

/* The residency's per-expert and per-layer tables; false when memory ran out (what was
 * made is freed with r). */
static bool alloc_tables(mvm_resid *r, uint32_t n_layers)
{
    const size_t n = r->n_total;
    const struct {
        void **p;
        size_t bytes;
    } t[] = {
        {(void **)&r->resident, n * sizeof *r->resident},
        {(void **)&r->resident_bits, (n + 63) / 64 * sizeof *r->resident_bits},
        {(void **)&r->busy, n},
        {(void **)&r->pinned, n},
        {(void **)&r->view_addr, n * sizeof *r->view_addr},
        {(void **)&r->held, n},
        {(void **)&r->plan, n * sizeof *r->plan},
        {(void **)&r->by_prefetch, n},
        {(void **)&r->moved, n},
        {(void **)&r->deferred_kind, n},
        {(void **)&r->deferred, n * sizeof *r->deferred},
        {(void **)&r->spec, n},
        {(void **)&r->spec_keep, n * sizeof *r->spec_keep},
        {(void **)&r->home_run, n},
        {(void **)&r->cand, (n + 1) * sizeof *r->cand},
        {(void **)&r->want, n * sizeof *r->want},
        {(void **)&r->landed, n * sizeof *r->landed},
        {(void **)&r->moves, r->n_experts * sizeof *r->moves},
        {(void **)&r->layer_pages, n_layers * sizeof *r->layer_pages},
        {(void **)&r->theta, n_layers * sizeof *r->theta},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        ok &= (*t[i].p = calloc(1, t[i].bytes ? t[i].bytes : 1)) != NULL;
    return ok;
}

mvm_status mvm_resid_create(mvm_space *space, const mvm_resid_params *p, mvm_resid **out)
{
    *out = NULL;
    mvm_space_info info;
    mvm_status st = mvm_space_get_info(space, &info);
    struct modules mods = {0};
    mvm_machine machine;
    mvm_option_value admit, ordered;
    if (st == MVM_OK)
        st = mvm_option_read(&mvm_opt_admit, &admit);
    if (st == MVM_OK)
        st = mvm_option_read(&mvm_opt_deterministic, &ordered);
    if (st == MVM_OK)
        st = find_modules(p, &mods);
    if (st == MVM_OK && !p->machine)
        st = mvm_machine_load(NULL, NULL, &machine);
    if (st != MVM_OK)
        return st;
    mvm_resid *r = calloc(1, sizeof *r);
    if (!r)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the residency table");
    r->space = space;
    r->at_home = p->at_home;
    r->admit = admit.i; /* MOEVM_ADMIT's choices in order: off, on, steps */
    r->ordered = ordered.i == 1;
    r->home_in_place = !info.home_mapped && info.home_readable;
    r->slots = info.slots;
    r->n_experts = info.n_experts;
    r->n_total = info.n_layers * info.n_experts;
    r->ppe = (uint32_t)((info.expert_bytes + info.page_size - 1) / info.page_size);
    if (!alloc_tables(r, info.n_layers)) {
        mvm_resid_destroy(r);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the residency table");
    }
    r->shape = (mvm_pshape){.n_layers = info.n_layers, .n_experts = info.n_experts,
                            .top_k = p->top_k, .n_embd = p->n_embd, .n_ff = p->n_ff,
                            .pages_per_expert = r->ppe, .expert_bytes = info.expert_bytes};
    /* evict and config rank by use; assign and config's fixedpoint weigh times. */
    mvm_cost_init(&r->cost, p->machine ? p->machine : &machine, info.expert_bytes, p->n_embd,
                  p->n_ff);
    r->view = (mvm_pview){.shape = &r->shape, .resident = r->resident, .busy = r->busy,
                          .capacity_pages = info.device_pages};
    initial_state(r, info.n_layers);
    mvm_pinit in = {.shape = &r->shape, .cost = &r->cost, .params = {mods.evict_args}};
    if ((st = mods.evict->create(&in, &r->evict_self)) != MVM_OK) {
        mvm_resid_destroy(r);
        return st;
    }
    r->evict = mods.evict;
    r->victims = (mvm_evict_driver){.ops = r->evict, .self = r->evict_self,
                                    .resident = r->resident,
                                    .resident_bits = r->resident_bits, .busy = r->busy,
                                    .held = r->held,
                                    .cand = r->cand};
    in.params.text = mods.assign_args;
    in.homes_unreadable = !info.home_mapped && !info.home_readable;
    if (mods.assign && (st = mods.assign->create(&in, &r->assign_self)) != MVM_OK) {
        mvm_resid_destroy(r);
        return st;
    }
    r->assign = mods.assign;
    in.params.text = mods.config_args;
    in.router = p->router;
    in.profile = p->profile;
    if (p->profile && (!mods.config || strcmp(mods.config->name, "hot") != 0)) {
        mvm_resid_destroy(r);
        return mvm_fail(MVM_ERR_INVALID, "a hot-expert profile was given, but config %s does "
                        "not read one (config hot does)", mods.config ? mods.config->name
                                                                       : "none");
    }
    if (mods.config && (st = mods.config->create(&in, &r->config_self)) != MVM_OK) {
        mvm_resid_destroy(r);
        return st;
    }
    r->config = mods.config;
    /* A table from an offline profile is filled at init, as PreScope does. */
    if (r->config && r->config->hold &&
        r->config->configure(r->config_self, view(r), r->layer_pages, r->theta) &&
        (st = hold_table(r)) != MVM_OK) {
        mvm_resid_destroy(r);
        return st;
    }
    *out = r;
    return MVM_OK;
}

void mvm_resid_destroy(mvm_resid *r)
{
    if (!r)
        return;
    mvm_resid_drop_moves(r);
    if (r->evict)
        r->evict->destroy(r->evict_self);
    if (r->config)
        r->config->destroy(r->config_self);
    if (r->assign)
        r->assign->destroy(r->assign_self);
    free(r->resident);
    free(r->resident_bits);
    free(r->busy);
    free(r->pinned);
    free(r->view_addr);
    free(r->held);
    free(r->plan);
    free(r->by_prefetch);
    free(r->moved);
    free(r->deferred_kind);
    free(r->deferred);
    free(r->spec);
    free(r->spec_keep);
    free(r->home_run);
    free(r->cand);
    free(r->want);
    free(r->landed);
    free(r->moves);
    free(r->layer_pages);
    free(r->theta);
    free(r);
}

const char *mvm_resid_evict_name(const mvm_resid *r)
{
    return r->evict->name;
}

const char *mvm_resid_config_name(const mvm_resid *r)
{
    return r->config ? r->config->name : "none";
}

const char *mvm_resid_assign_name(const mvm_resid *r)
{
    return r->assign ? r->assign->name : "none";
}

void mvm_resid_pinit(const mvm_resid *r, mvm_pinit *out)
{
    *out = (mvm_pinit){.shape = &r->shape, .cost = &r->cost};
}

/* Brings the view's page count and clock up to date before the module looks at it. */
static const mvm_pview *view(mvm_resid *r)
{
    mvm_stats s;
    mvm_space_get_stats(r->space, &s);
    r->view.used_pages = s.resident_pages + s.loading_pages + s.reserved_pages;
    r->view.now = mvm_now_s();
    return &r->view;
}

int mvm_resid_landed(const mvm_resid *r, uint32_t layer, uint32_t e)
{
    mvm_residency res = {0};
    return mvm_expert_residency(r->space, layer, e, &res) == MVM_OK &&
           res.resident == res.n_pages && !res.loading;
}

const mvm_pview *mvm_resid_landed_view(mvm_resid *r, uint32_t layer)
{
    uint32_t E = r->n_experts;
    if (r->landed_layer < r->shape.n_layers)
        memset(r->landed + (size_t)r->landed_layer * E, 0, E * sizeof *r->landed);
    r->landed_layer = layer < r->shape.n_layers ? layer : UINT32_MAX;
    for (uint32_t e = 0; e < E && layer < r->shape.n_layers; e++)
        if (r->resident[layer * E + e] && mvm_resid_landed(r, layer, e))
            r->landed[layer * E + e] = r->ppe;
    r->landed_view = *view(r);
    r->landed_view.resident = r->landed;
    return &r->landed_view;
}

uint32_t mvm_resid_landed_all(mvm_resid *r, uint8_t *own, uint64_t *slot)
{
    uint32_t changed = 0;
    for (uint32_t x = 0; x < r->n_total; x++) {
        uint8_t now = 0;
        if (r->resident[x] == r->ppe && own[x] && !r->moved[x])
            now = 1; /* landed before, and nothing has moved it since */
        else if (r->resident[x] == r->ppe) {
            now = (uint8_t)mvm_resid_landed(r, x / r->n_experts, x % r->n_experts);
            r->moved[x] = !now;
            if (now && slot) { /* moved since: maybe to another slot */
                uint64_t at = 0;
                (void)mvm_expert_slot(r->space, x / r->n_experts, x % r->n_experts, &at);
                changed += at != slot[x];
                slot[x] = at;
            }
        }
        changed += now != own[x];
        own[x] = now;
        if (slot && !now)
            slot[x] = 0;
    }
    return changed;
}

static bool unshielded(void *ctx, uint32_t x) { return !((const mvm_resid *)ctx)->shield[x]; }

/* Evicts the module's choice among the experts it may take, for room `layer` needs:
 * resident, not used by the current step, not still loading (cancelling a load frees its
 * chunk only when the copy lands, so it would make no room now), not pinned by another
 * reader and not shielded (mvm_resid_set_shield); only `layer`'s own experts when `within`
 * (room in its config budget). Candidates are offered in expert order, as the simulator
 * offers them. MVM_ERR_NOSPACE if there is none. */
static mvm_status evict_one(mvm_resid *r, uint32_t layer, int within)
{
    uint32_t x0 = within ? layer * r->n_experts : 0;
    mvm_evict_collect(&r->victims, x0, within ? x0 + r->n_experts : r->n_total, UINT32_MAX,
                      r->shield ? unshielded : NULL, r);
    uint32_t x;
    while (mvm_evict_pick(&r->victims, view(r), layer, &x)) {
        uint32_t l = x / r->n_experts, e = x % r->n_experts;
        mvm_residency res = {0};
        bool free_now = mvm_expert_residency(r->space, l, e, &res) == MVM_OK && !res.loading &&
                        !res.pins;
        mvm_status st = free_now ? mvm_evict(r->space, l, e, 0) : MVM_ERR_PINNED;
        if (st == MVM_ERR_PINNED)
            continue; /* not to be taken now: the module chooses among the rest */
        if (st == MVM_OK) {
            set_resident(r, x, 0);
            r->by_prefetch[x] = 0;
            r->stats.evictions++;
        }
        return st;
    }
    return MVM_ERR_NOSPACE;
}

static uint64_t layer_used(const mvm_resid *r, uint32_t l)
{
    uint64_t n = 0;
    for (uint32_t e = 0; e < r->n_experts; e++)
        n += r->resident[l * r->n_experts + e];
    return n;
}

/* Evicts layer l's experts until `need` more pages fit its config budget (what stays
 * cached must; an on-demand load needs only room on the device, as in the simulator).
 * MVM_ERR_NOSPACE when the layer's experts in use or loading are already over it. */
static mvm_status fit_layer(mvm_resid *r, uint32_t l, uint64_t need)
{
    mvm_status st = MVM_OK;
    while (st == MVM_OK && r->layer_pages[l] != UINT64_MAX &&
           layer_used(r, l) + need > r->layer_pages[l])
        st = evict_one(r, l, 1);
    return st;
}

/* The window's copies for the step's layer that it did not use leave with their buffer
 * (MoEpic's buffer is not cache): back to the pages they had before. */
static void drop_window(mvm_resid *r, const mvm_pstep *step)
{
    for (uint32_t e = 0; e < r->n_experts; e++) {
        uint32_t x = step->layer * r->n_experts + e;
        if (!r->spec[x])
            continue;
        r->spec[x] = 0;
        if (!step->counts[e] && r->resident[x] > r->spec_keep[x] &&
            mvm_evict(r->space, step->layer, e, r->spec_keep[x]) == MVM_OK)
            set_resident(r, x, r->spec_keep[x]);
    }
}

/* MoEpic's split: a used expert of layer l keeps only its first θ of pages cached. */
static void split(mvm_resid *r, uint32_t l, const int32_t *experts, uint32_t n)
{
    if (!(r->theta[l] < 1.0f))
        return;
    if (r->slots) { /* whole experts only (mvm_space_desc.slots) */
        if (!r->split_said)
            mvm_log(MVM_LOG_WARN, "config %s splits layer %u's experts (theta %.2f), but "
                    "MOEVM_SLOTS=on moves whole experts: they stay whole", r->config->name, l,
                    (double)r->theta[l]);
        r->split_said = 1;
        return;
    }
    uint32_t keep = (uint32_t)ceilf(r->theta[l] * (float)r->ppe);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = l * r->n_experts + (uint32_t)experts[i];
        if (r->resident[x] > keep && mvm_evict(r->space, l, (uint32_t)experts[i], keep) ==
            MVM_OK) {
            set_resident(r, x, keep);
            r->stats.splits++;
        }
    }
}

/* MOEVM_DETERMINISTIC: waits for a copy just queued, so that no copy is ever in flight when
 * the next hit is judged, the next victim chosen or the next admission offered: what each
 * finds then depends on the order of the requests alone, not on how fast the migration
 * worker ran. An expert pinned (a step running it from its home) lands once unpinned: it is
 * not waited for (it would wait on its own step). */
static mvm_status ordered_wait(mvm_resid *r, uint32_t l, uint32_t e, mvm_move *move)
{
    mvm_residency res = {0};
    mvm_status st = mvm_expert_residency(r->space, l, e, &res);
    if (st == MVM_OK && !res.pins)
        st = mvm_move_wait(move, -1);
    mvm_move_release(move);
    return st;
}

/* Requests x resident (on demand, or as a prefetch), evicting while there is no room
 * (unless !may_evict: MVM_ERR_NOSPACE); *move (move not NULL) completes when it has landed. */
mvm_status mvm_resid_request(mvm_resid *r, uint32_t x, int demand, int may_evict,
                             mvm_move **move)
{
    uint32_t l = x / r->n_experts, e = x % r->n_experts;
    mvm_move *own = NULL;
    if (r->ordered && !move)
        move = &own;
    mvm_status st;
    while ((st = demand ? mvm_make_resident_async(r->space, l, e, MVM_ALL_PAGES, move)
                        : mvm_prefetch(r->space, l, e, MVM_ALL_PAGES, move)) == MVM_ERR_NOSPACE &&
           may_evict) {
        mvm_status ev = evict_one(r, l, 0);
        if (ev != MVM_OK) {
            st = ev; /* MVM_ERR_NOSPACE when nothing can go, else the eviction's failure */
            break;
        }
    }
    if (st == MVM_OK) {
        r->moved[x] |= r->resident[x] < r->ppe;
        set_resident(r, x, r->ppe);
    }
    if (own)
        st = st == MVM_OK ? ordered_wait(r, l, e, own) : (mvm_move_release(own), st);
    return st;
}

/* The config module's table (PreScope's hot experts), asked for after a configure that
 * changed something: each of its experts not resident is loaded as a prefetch that may evict
 * what is not held. No room (the step's experts and the copies in flight fill the rest) is
 * not an error: such an expert loads when next used, and stays. */
static mvm_status hold_table(mvm_resid *r)
{
    r->stats.held = r->config->hold(r->config_self, r->held);
    mvm_status st = MVM_OK;
    for (uint32_t x = 0; x < r->n_total && !r->at_home && st == MVM_OK; x++)
        if (r->held[x] && r->resident[x] < r->ppe && !(r->remote && r->remote[x]))
            st = mvm_resid_request(r, x, 0, 1, NULL);
    return st == MVM_ERR_NOSPACE ? MVM_OK : st;
}

uint32_t mvm_resid_assign(mvm_resid *r, const mvm_pstep *step, const float *ahead,
                          uint32_t n_ahead, uint8_t *where, const uint32_t **plan)
{
    uint32_t E = r->n_experts, x0 = step->layer * E;
    mvm_assignment a = {.where = where, .prefetch = r->plan, .cap_prefetch = r->n_total};
    memset(where, MVM_RUN_NONE, E);
    if (r->assign)
        r->assign->assign(r->assign_self, view(r), step, n_ahead ? ahead : NULL, n_ahead, &a);
    for (uint32_t e = 0; e < E; e++) {
        if (!step->counts[e]) {
            where[e] = MVM_RUN_NONE;
            continue;
        }
        if (where[e] == MVM_RUN_NONE) /* left out (or no module): the default */
            where[e] = MVM_RUN_GPU;
        if (where[e] == MVM_RUN_GPU && r->resident[x0 + e] < r->ppe)
            where[e] = MVM_RUN_GPU_LOAD; /* it assumed a residency the expert lacks */
    }
    *plan = r->plan;
    return a.n_prefetch < r->n_total ? a.n_prefetch : r->n_total;
}

static mvm_status prefetch(mvm_resid *r, uint32_t layer, uint32_t expert, int planned,
                           int window);

/* Admission (policy/admit.h): an expert the step ran from its home is offered to the cache,
 * one a step at most, and only while the space has no other copy queued or in flight
 * (predictions and the module's wishes go first), as the simulator does; with
 * MOEVM_ADMIT=steps whatever is in flight (no step waits for a load to land behind it:
 * decode routed on the device at a budget, whose steps are all replayed at once).
 * Read-through keeps what its kernels read in place itself: only what the CPU ran is
 * offered then (MOEVM_DEVICE_CPU's share, which no slab keeps). */
static void admit(mvm_resid *r, uint32_t layer)
{
    uint32_t E = r->n_experts;
    int one = 0;
    for (uint32_t e = 0; e < E; e++) {
        uint32_t x = layer * E + e;
        const int ran = r->home_run[x]; /* 1 read in place, 2 on the CPU */
        if (!ran)
            continue;
        r->home_run[x] = 0;
        mvm_stats s;
        if (one || !r->admit || (r->read_through && ran == 1) || r->at_home ||
            r->resident[x] == r->ppe ||
            (r->remote && r->remote[x]) || mvm_space_get_stats(r->space, &s) != MVM_OK ||
            (r->admit == 1 && (s.moves_queued || s.moves_in_flight)))
            continue;
        mvm_evict_collect(&r->victims, 0, r->n_total, x, NULL, NULL);
        if (mvm_evict_admit(&r->victims, view(r), x, r->ppe - r->resident[x]) &&
            prefetch(r, layer, e, 0, 0) == MVM_OK) {
            r->stats.admitted++;
            one = 1;
        }
    }
}

mvm_status mvm_resid_defer_loads(mvm_resid *r, int defer)
{
    r->defer = defer;
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; !defer && i < r->n_deferred; i++) {
        const uint32_t x = r->deferred[i], planned = r->deferred_kind[x] == 2;
        r->deferred_kind[x] = 0;
        mvm_status got = st == MVM_OK ? prefetch(r, x / r->n_experts, x % r->n_experts,
                                                 (int)planned, 0)
                                      : MVM_OK;
        if (got != MVM_ERR_NOSPACE) /* no room drops the prediction, as asked at once */
            st = got;
    }
    if (!defer)
        r->n_deferred = 0;
    for (uint32_t l = 0; !defer && l < r->shape.n_layers; l++)
        admit(r, l);
    return st;
}

void mvm_resid_observe(mvm_resid *r, const mvm_pstep *step)
{
    if (r->observed)
        return;
    r->evict->observe(r->evict_self, view(r), step);
    if (r->config)
        r->config->observe(r->config_self, view(r), step);
    r->observed = 1;
}

mvm_status mvm_resid_end(mvm_resid *r, const mvm_pstep *step, const int32_t *experts,
                         uint32_t n, int last_layer)
{
    mvm_resid_observe(r, step);
    r->observed = 0;
    mvm_resid_release(r, step->layer, experts, n);
    drop_window(r, step);
    split(r, step->layer, experts, n);
    (void)fit_layer(r, step->layer, 0); /* still over: what is over is loading; it waits */
    /* Prefetches for this step that it did not request were wrong forecasts. */
    memset(r->by_prefetch + (size_t)step->layer * r->n_experts, 0, r->n_experts);
    uint32_t n_want = 0;
    if (r->evict->want)
        n_want = r->evict->want(r->evict_self, view(r), step->layer, r->want, r->n_total);
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < n_want && i < r->n_total && st == MVM_OK; i++)
        if (r->want[i] < r->n_total) {
            st = mvm_resid_prefetch(r, r->want[i] / r->n_experts, r->want[i] % r->n_experts);
            if (st == MVM_ERR_NOSPACE) /* no room is not an error: the wish waits */
                st = MVM_OK;
        }
    if (!r->defer)
        admit(r, step->layer);
    if (last_layer) {
        r->view.tokens += step->n_tok;
        if (r->config && r->config->configure(r->config_self, view(r), r->layer_pages,
                                               r->theta)) {
            r->stats.reconfigs++;
            for (uint32_t l = 0; l < r->shape.n_layers; l++)
                (void)fit_layer(r, l, 0); /* a layer over its new budget shrinks now */
            if (r->config->hold && st == MVM_OK)
                st = hold_table(r);
        }
    }
    return st;
}

static mvm_status prefetch(mvm_resid *r, uint32_t layer, uint32_t expert, int planned,
                           int window)
{
    if (layer >= r->shape.n_layers || expert >= r->n_experts)
        return mvm_fail(MVM_ERR_RANGE, "expert (%u, %u) is outside the space", layer, expert);
    uint32_t x = layer * r->n_experts + expert, before = r->resident[x];
    if (r->at_home || r->resident[x] == r->ppe || (r->remote && r->remote[x]))
        return MVM_OK;
    if (r->defer && !window) { /* asked at mvm_resid_defer_loads(r, 0), in this order */
        if (!r->deferred_kind[x])
            r->deferred[r->n_deferred++] = x;
        if (planned || !r->deferred_kind[x])
            r->deferred_kind[x] = planned ? 2 : 1;
        return MVM_OK;
    }
    /* A window copy goes to its buffer, the free pages: it evicts nothing, and it is not
     * in its layer's budget. */
    mvm_status st = window ? MVM_OK : fit_layer(r, layer, r->ppe - r->resident[x]);
    if (st == MVM_OK)
        st = mvm_resid_request(r, x, 0, !window, NULL);
    if (st == MVM_OK) {
        r->by_prefetch[x] = 1;
        r->stats.prefetches++;
        r->stats.planned += planned;
        r->spec[x] = (uint8_t)window;
        r->spec_keep[x] = before;
    }
    return st;
}

mvm_status mvm_resid_prefetch(mvm_resid *r, uint32_t layer, uint32_t expert)
{
    return prefetch(r, layer, expert, 0, 0);
}

mvm_status mvm_resid_prefetch_planned(mvm_resid *r, uint32_t layer, uint32_t expert)
{
    return prefetch(r, layer, expert, 1, 0);
}

mvm_status mvm_resid_prefetch_window(mvm_resid *r, uint32_t layer, uint32_t expert)
{
    return prefetch(r, layer, expert, 0, 1);
}

uint32_t mvm_resid_missing(const mvm_resid *r, uint32_t layer, uint32_t expert)
{
    return r->ppe - r->resident[layer * r->n_experts + expert];
}

int mvm_resid_cancel_prefetch(mvm_resid *r, uint32_t layer, uint32_t expert)
{
    uint32_t x = layer * r->n_experts + expert, n = 0;
    if (layer >= r->shape.n_layers || expert >= r->n_experts || !r->by_prefetch[x] ||
        mvm_prefetch_cancel(r->space, layer, expert, &n) != MVM_OK || n == 0)
        return 0; /* not a prefetch, or its copy had started: it lands */
    set_resident(r, x, r->resident[x] - n); /* what stays is what was there before: a
                                               split's top */
    r->by_prefetch[x] = 0;
    r->spec[x] = 0;
    r->stats.prefetches_cut++;
    return 1;
}

mvm_status mvm_resid_fill_reserve(mvm_resid *r, uint64_t *addr)
{
    mvm_status st;
    while ((st = mvm_fill_reserve(r->space, addr)) == MVM_ERR_NOSPACE) {
        const mvm_status ev = evict_one(r, 0, 0);
        if (ev != MVM_OK)
            return ev;
    }
    return st;
}

mvm_status mvm_resid_fill_land(mvm_resid *r, uint32_t layer, uint32_t e, uint64_t addr)
{
    const uint32_t x = layer * r->n_experts + e;
    mvm_move *move = NULL;
    mvm_status st = mvm_fill_land(r->space, layer, e, addr, r->ordered ? &move : NULL);
    if (st != MVM_OK)
        return st;
    set_resident(r, x, r->ppe);
    r->moved[x] = 1; /* mvm_resid_landed_all looks it up until its map is done */
    r->stats.filled++;
    return move ? ordered_wait(r, layer, e, move) : MVM_OK;
}

mvm_status mvm_resid_fill_give_back(mvm_resid *r, uint64_t addr)
{
    return mvm_fill_return(r->space, addr);
}

void mvm_resid_set_read_through(mvm_resid *r, int on)
{
    r->read_through = on;
}

void mvm_resid_set_shield(mvm_resid *r, const uint8_t *shield)
{
    r->shield = shield;
}

int mvm_resid_steps_evict(const mvm_resid *r)
{
    return r->config != NULL;
}

void mvm_resid_note_slab_reads(mvm_resid *r, uint32_t n)
{
    r->stats.slab_reads += n;
    r->stats.hits += n;
    r->stats.zerocopy_runs -= n;
}

void mvm_resid_get_stats(const mvm_resid *r, mvm_resid_stats *out)
{
    *out = r->stats;
    out->cpu_scale = r->view.cpu_scale;
}

void mvm_resid_set_remote(mvm_resid *r, const uint8_t *remote)
{
    r->remote = remote;
}

void mvm_resid_set_reader_stream(mvm_resid *r, void *stream)
{
    mvm_space_info info;
    const int able = mvm_space_get_info(r->space, &info) == MVM_OK && !info.home_mapped &&
                     !info.host_readable && !r->ordered;
    r->reader_stream = able ? stream : NULL;
}

void mvm_resid_set_read_view(mvm_resid *r, int on)
{
    r->read_view = on && r->reader_stream;
}

int mvm_resid_reads_resident(const mvm_resid *r, uint32_t layer, uint32_t e)
{
    return r->view_addr[layer * r->n_experts + e] == 0;
}

uint64_t mvm_resid_view_addr(const mvm_resid *r, uint32_t layer, uint32_t e)
{
    uint64_t at = r->view_addr[layer * r->n_experts + e];
    if (!at && r->slots) /* held, so resident: its slot holds while the step pins it */
        (void)mvm_expert_slot(r->space, layer, e, &at);
    return at;
}

int mvm_resid_orders_on_device(const mvm_resid *r)
{
    return r->reader_stream != NULL;
}

const mvm_cost *mvm_resid_cost(const mvm_resid *r)
{
    return &r->cost;
}

#define CPU_SCALE_WEIGHT 0.125      /* a step's weight in the average */
#define CPU_SCALE_FADE (1.0 / 256)  /* toward the model, each step without CPU experts */
#define CPU_SCALE_CLAMP 16.0        /* a step's ratio counts at most this far from 1 */

void mvm_resid_note_cpu(mvm_resid *r, double model_s, double took_s)
{
    if (model_s > 0 && took_s > 0) {
        const double lim = log(CPU_SCALE_CLAMP), x = log(took_s / model_s);
        r->log_cpu_scale += CPU_SCALE_WEIGHT * (fmax(-lim, fmin(lim, x)) - r->log_cpu_scale);
    } else {
        r->log_cpu_scale *= 1 - CPU_SCALE_FADE;
    }
    r->view.cpu_scale = exp(r->log_cpu_scale);
}
