/*
 * The engine's use of the expert space. Each MoE layer step requests its experts resident
 * (on-demand priority) and pins them while they compute; when the device budget is full, the
 * evict policy module (policy/, MOEVM_EVICT, docs/policies.md) picks the victims among the
 * resident experts no step is using. After the computation the step is reported to the module
 * (router scores, experts, tokens per expert) and its experts are unpinned; a module that asks
 * for experts by itself (`want`: DALI's windowed swaps) gets them prefetched, as does the
 * caller's predictor (mvm_resid_prefetch).
 *
 * The order within a step is the simulator's (tools/sim.c): a hit is judged when the
 * expert is requested, all of a step's experts are shielded from eviction before any of
 * them loads, candidates are offered in expert order without those still loading, and the
 * module observes the step after it ran; its clock (mvm_pview.tokens) advances after the
 * last layer of a batch. So a routing trace recorded by `moevm run --trace-out` and
 * replayed by `moevm sim` with the same evict module, budget and page size counts the same
 * hits, when each step's loads have landed before the next step, as the simulator models
 * them (tests/test_residency.c). With copies still in flight the engine finds fewer
 * candidates than the simulator and may run an expert from its home where the simulator
 * evicted a loading one.
 *
 * A config module (MOEVM_CONFIG: uniform, hot, fixedpoint; default none) divides the budget
 * among the layers and may split experts (MoEpic): it observes every step, and after every
 * batch it may set new per-layer budgets and split ratios θ. What stays cached in a layer
 * must then fit its budget (evictions within the layer make room for a prefetch or after a
 * step), an on-demand load only room on the device; an expert a step used keeps only its
 * first ⌈θ·pages⌉ pages, and its next use loads the rest. A module may also hold experts
 * resident (hot: PreScope's static table): they load when it names them (at create for an
 * offline profile) and are never evicted; the evict module caches in the pages they leave.
 * The simulator does the same.
 *
 * When nothing can be evicted (every resident expert is pinned by the current step) an
 * expert runs from where it is: through its fixed address, which on the host backend and on
 * HOST_NUMA devices reads the host home. A GPU without HOST_NUMA cannot read the homes: its
 * steps run in rounds that each fit the budget (mvm_resid_begin_round). `moevm run` and
 * `moevm demo` share this.
 */
#ifndef MVM_ENGINE_FORWARD_RESIDENCY_H
#define MVM_ENGINE_FORWARD_RESIDENCY_H

#include <stdint.h>

#include "moevm/moevm.h"
#include "policy/policy.h"

typedef struct mvm_resid mvm_resid;

typedef struct mvm_resid_params {
    const char *evict;          /* the evict module; NULL: MOEVM_EVICT */
    const char *evict_args;     /* its "name=value,..." parameters (NULL: none, or
                                   MOEVM_EVICT_ARGS with the MOEVM_EVICT module) */
    const char *config;         /* the config module; "none": no per-layer budgets, whole
                                   experts; NULL: MOEVM_CONFIG */
    const char *config_args;    /* its parameters (NULL: none, or MOEVM_CONFIG_ARGS) */
    const char *assign;         /* the assign module (NULL: MOEVM_ASSIGN); only on_device */
    const char *assign_args;    /* its parameters (NULL: none, or MOEVM_ASSIGN_ARGS) */
    int on_device;              /* a GPU computes (the engine's device pass): the assign
                                   module places each expert; else any but "gpu" is an
                                   error */
    int at_home;                /* the CPU reads every expert at its home and nothing moves
                                   (mvm_model.experts_at_home): mvm_resid_begin counts the
                                   accesses as cpu_runs, and prefetches and the evict
                                   module's wishes load nothing (mvm_moe refuses the roles
                                   that would only decide moves: predict, route, config) */
    const mvm_machine *machine; /* the machine the modules' cost model describes (NULL:
                                   MOEVM_COST, policy/cost_load.h) */
    uint32_t top_k, n_embd, n_ff; /* the model's, for the modules' shape (0: unknown) */
    const mvm_router *router;   /* the routers (F32 weights) for fixedpoint's predictions,
                                   or NULL (it then models the cache only) */
    const mvm_pprofile *profile; /* config hot's offline profile, or NULL */
} mvm_resid_params;

typedef struct mvm_resid_stats {
    uint64_t accesses;   /* experts requested by layer steps */
    uint64_t hits;       /* of them, resident (all pages, none loading) when requested */
    uint64_t partial_hits; /* misses that found a page prefix resident (a config split) */
    uint64_t bypassed;   /* requests that found no room and ran from the home */
    uint64_t extra_rounds; /* rounds that steps cut to fit the budget took beyond their
                              first (mvm_resid_begin_round) */
    uint64_t cpu_runs;      /* accesses the assign module ran on the CPU, from the home */
    uint64_t zerocopy_runs; /* accesses it ran on the GPU from the home, read in place */
    uint64_t evictions;  /* experts the evict module chose to make room */
    uint64_t prefetches; /* experts loaded ahead of use: the evict module's wishes and the
                            caller's predictions (mvm_resid_prefetch) */
    uint64_t planned;       /* of them, the assign module's plan (mvm_resid_assign) */
    uint64_t admitted;      /* of them, experts a step ran from their homes, admitted
                               afterwards (MOEVM_ADMIT, policy/admit.h) */
    uint64_t filled;        /* experts a decode token's kernels stored as they read them
                               in place, landed with no copy (read-through) */
    uint64_t prefetch_used; /* of them, requested by their layer's next step (a forecast
                               that came true; a later use is not counted) */
    uint64_t prefetch_hits; /* of those, found resident (their copy had landed) */
    uint64_t prefetches_cut; /* of them, taken back before their copy started: MoEpic's
                                window closing at the router (mvm_resid_cancel_prefetch) */
    uint64_t splits;        /* used experts cut back to their config split θ */
    uint64_t reconfigs;     /* times the config module changed budgets or splits */
    uint64_t held;          /* experts the config module holds resident (PreScope's hot
                               table; never evicted) */
    uint64_t slab_reads;    /* of the hits, experts read-through kept that a later token
                               read at their slabs, before their map
                               (mvm_resid_note_slab_reads) */
    uint64_t view_holds;    /* copies the reader read where they landed, before their map
                               (mvm_resid_set_read_view) */
    double wait_s;          /* seconds the steps waited for their copies to land */
    double cpu_scale;       /* the CPU's experts' time over the cost model's, as measured
                               (mvm_resid_note_cpu; 1: as modelled, or never measured) */
} mvm_resid_stats;

/* MVM_ERR_INVALID (naming the module or the parameter) for an evict or config module that
 * does not exist or rejects its parameters, or a MOEVM_COST that does not load;
 * MVM_ERR_OPTION for a malformed MOEVM_* value. */
mvm_status mvm_resid_create(mvm_space *space, const mvm_resid_params *p, mvm_resid **out);
void mvm_resid_destroy(mvm_resid *r);
/* The evict module's name; the config module's ("none" without one). */
const char *mvm_resid_evict_name(const mvm_resid *r);
const char *mvm_resid_config_name(const mvm_resid *r);
const char *mvm_resid_assign_name(const mvm_resid *r); /* "none" unless on_device */
/* The shape and cost the modules were made with (for the engine's other modules); the
 * rest of *out is zeroed. */
void mvm_resid_pinit(const mvm_resid *r, mvm_pinit *out);

/* The view the route module decides with (policy.h): as the evict module's, but the
 * row of `layer` counts only experts whose copy has landed (a load in flight is no
 * substitute: policy/route_importance.c, reading 9) and every other row is empty. Valid
 * until the next call. */
const mvm_pview *mvm_resid_landed_view(mvm_resid *r, uint32_t layer);
/* Whether expert (layer, e) is resident whole in the space, its copy landed (none
 * loading). */
int mvm_resid_landed(const mvm_resid *r, uint32_t layer, uint32_t e);
/* Which experts are resident whole and landed, for a reader that decides by itself where
 * to read each one (a decode token routed on the device at a budget, forward_cuda_route.c):
 * own[L*E] updated from its previous contents, which must be this function's last result
 * (or zeros): an expert landed then is taken to be still there unless the residency has
 * evicted, cut or asked to load it since, so only those are looked up in the space.
 * Returns how many flags changed. Valid while nothing is requested or evicted. In a slot
 * space (mvm_space_desc.slots) the reader reads an expert it owns in its slot: slot[L*E]
 * (kept alongside own, zeros to begin with; NULL elsewhere) holds each owned expert's
 * (mvm_expert_slot), 0 for the others, and a changed slot counts as a change. */
uint32_t mvm_resid_landed_all(mvm_resid *r, uint8_t *own, uint64_t *slot);
/* Requests experts[0..n) of `layer` resident and pins them (repeats not allowed); at_home,
 * mvm_resid_begin_home(..., pin 0) instead. wait = 1:
 * returns once their copies have landed; 0: returns at once, copies proceed behind the
 * reader. An expert for which no room can be made runs from its home (counted as
 * bypassed): only for readers that can read the homes. On failure nothing stays pinned. */
mvm_status mvm_resid_begin(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n,
                           int wait);
/* For a reader that cannot read the homes (a GPU without HOST_NUMA VMM), whose budget may
 * not hold a step's experts together: the step runs in rounds. Reorders experts[0..n) (the
 * step's experts not yet run; all of them stay shielded from eviction) and pins the first
 * *n_round of them, resident and landed: those already on the device first, then as many
 * as room can be made for, at least one. The reader computes them, then releases them
 * (mvm_resid_release) so their room serves the next round, called with the rest; the last
 * round is unpinned by mvm_resid_end, which reports the whole step. A round of all n when
 * they fit. MVM_ERR_NOSPACE when not even one expert fits; on failure nothing of the step
 * stays pinned.
 * It returns once the round's copies are asked, not landed: only the first *n_ready,
 * whose copies had landed, are pinned; the reader may compute them (and the CPU's share)
 * while the others land, and must call mvm_resid_hold_round before it reads those. */
mvm_status mvm_resid_begin_round(mvm_resid *r, uint32_t layer, int32_t *experts, uint32_t n,
                                 uint32_t *n_round, uint32_t *n_ready);
/* Waits for the copies of the round's experts[n_ready..n_round) (as begin_round left
 * experts) and pins them. On failure the copies not waited for are let go; what is pinned
 * stays so until mvm_resid_release or mvm_resid_end, as after a round that began. */
mvm_status mvm_resid_hold_round(mvm_resid *r, uint32_t layer, const int32_t *experts,
                                uint32_t n_ready, uint32_t n_round);
void mvm_resid_release(mvm_resid *r, uint32_t layer, const int32_t *experts, uint32_t n);
/* Where each active expert of the step (step->counts[e] > 0) runs, by the assign module
 * (policy.h enum mvm_where; ahead: [n_ahead][E] forecasts of the next layers, or NULL)
 * into where[n_experts], made usable: MVM_RUN_NONE for the
 * inactive, an active one the module left out runs on the GPU, and MVM_RUN_GPU on an
 * expert not wholly resident means MVM_RUN_GPU_LOAD. Without a module (not on_device)
 * every active expert is GPU or GPU_LOAD. *plan: the module's prefetches (expert ids, to
 * queue once the step is pinned); returns their number. Valid until the next call. */
uint32_t mvm_resid_assign(mvm_resid *r, const mvm_pstep *step, const float *ahead,
                          uint32_t n_ahead, uint8_t *where, const uint32_t **plan);
/* The step's experts that run from their homes: on the CPU (in_place 0: nothing moves,
 * counted in cpu_runs) or read by the device in place (in_place 1, counted in
 * zerocopy_runs): where the homes are mapped at non-resident pages (HOST_NUMA), at their
 * own addresses, pinned so that no move remaps them under the reader; where they are not,
 * at their homes' device addresses (mvm_resid_view_addr), which no move changes. Their
 * accesses are counted and
 * they are shielded from eviction until the step ends, like begin's. Call it before
 * mvm_resid_begin for the same step, so that its loads cannot evict them. On failure
 * nothing stays pinned. missed: the step ran before and read them at their homes (the
 * replay of a decode token routed on the device at a budget), so each counts as a miss
 * whatever has landed since; else a hit where the space has it resident. */
mvm_status mvm_resid_begin_home(mvm_resid *r, uint32_t layer, const int32_t *experts,
                                uint32_t n, int in_place, int missed);
/* Ends the step begun for step->layer with the same experts: reports it to the evict module
 * (step->counts: tokens per expert of the layer; scores and hidden may be NULL), unpins the
 * experts it still holds and prefetches what the module wants. last_layer: the batch's last
 * MoE layer, after which the module's token clock advances by step->n_tok. */
mvm_status mvm_resid_end(mvm_resid *r, const mvm_pstep *step, const int32_t *experts,
                         uint32_t n, int last_layer);
/* The evict and config modules observe the step ahead of mvm_resid_end (which then does not
 * again), in the same order: a backend whose kernels still read the step's experts calls it
 * while the device computes, so that the modules' bookkeeping (the adaptive module's five
 * ghosts: ~17 us a layer step) leaves the host's path between a layer's router and its
 * experts. */
void mvm_resid_observe(mvm_resid *r, const mvm_pstep *step);
/* defer 1: from now on the prefetches (but a window's) are noted, not asked, and the
 * steps' admissions (MOEVM_ADMIT) left; defer 0 asks the prefetches noted, in their order,
 * then admits, layer after layer. A token's steps replayed after its kernels ran at a budget
 * (forward_cuda_route.c) so load once all of them are counted as they ran: a load, or its
 * victim, may be an expert a later layer of the token read where it was. Returns the first
 * failure of a prefetch (no room drops it, as when asked at once). */
mvm_status mvm_resid_defer_loads(mvm_resid *r, int defer);
/* Read-through (MOEVM_BUDGET_ROUTING=read-through, forward_cuda_route.c; vmm/fill.c): a
 * decode token's kernels store the misses they read in place into slabs set aside, and the
 * experts then land with no copy. reserve sets one aside, a whole expert's pages, making
 * room as a request does (the module's victims among what no step uses and nothing loads)
 * for layer 0, where the next token starts; *addr is where a kernel writes it.
 * MVM_ERR_NOSPACE when nothing can go. land: expert (layer, e), at home, takes the slab
 * filled at addr: resident from now on (counted in `filled`), its bytes read at addr until
 * mvm_fill_pending says 0; MVM_ERR_BUSY (nothing changed) when it is not at home any more
 * (a prefetch or a step asked for it since). give_back: a slab not filled. Admission
 * (MOEVM_ADMIT) is off while read_through is set: the misses admit themselves. */
mvm_status mvm_resid_fill_reserve(mvm_resid *r, uint64_t *addr);
mvm_status mvm_resid_fill_land(mvm_resid *r, uint32_t layer, uint32_t e, uint64_t addr);
mvm_status mvm_resid_fill_give_back(mvm_resid *r, uint64_t addr);
void mvm_resid_set_read_through(mvm_resid *r, int on);
/* While shield is set (not NULL), no expert x with shield[x] is chosen as a victim: read-
 * through's replay of a token after the next one is queued keeps what that one reads, and
 * its pool's refill before that replay keeps what the token before used. */
void mvm_resid_set_shield(mvm_resid *r, const uint8_t *shield);
/* Whether observing a step may evict by itself: a config module (per-layer budgets,
 * MoEpic's split, a held table). */
int mvm_resid_steps_evict(const mvm_resid *r);
/* n accesses of a step replayed as read in place (zerocopy_runs) were read at such a slab,
 * on the device: hits, counted in slab_reads too. */
void mvm_resid_note_slab_reads(mvm_resid *r, uint32_t n);
/* Loads expert (layer, e) ahead of its use, at prefetch priority, making room as a request
 * does (never from the current step's experts). MVM_OK when queued or already resident,
 * MVM_ERR_NOSPACE when nothing can make room (the prediction is dropped). */
/* A copy of MoEpic's window (MOEVM_PREFETCH=window, engine/forward/prefetch.h): into the
 * free pages only (its buffer: it evicts nothing, MVM_ERR_NOSPACE when they are too few),
 * and when its layer's step ends without using it, it goes (back to the pages it had). */
mvm_status mvm_resid_prefetch_window(mvm_resid *r, uint32_t layer, uint32_t expert);
/* Pages of (layer, expert) a request would move: neither resident nor loading. */
uint32_t mvm_resid_missing(const mvm_resid *r, uint32_t layer, uint32_t expert);
/* Takes back the prefetch of (layer, expert) if its copy has not started (MoEpic's window
 * closing at the router, MOEVM_PREFETCH=window: engine/forward/prefetch.h); its pages stay
 * home. Returns 1 if it did. */
int mvm_resid_cancel_prefetch(mvm_resid *r, uint32_t layer, uint32_t expert);
mvm_status mvm_resid_prefetch(mvm_resid *r, uint32_t layer, uint32_t expert);
/* The same for an expert of the assign module's plan (counted in `planned` too). */
mvm_status mvm_resid_prefetch_planned(mvm_resid *r, uint32_t layer, uint32_t expert);
void mvm_resid_get_stats(const mvm_resid *r, mvm_resid_stats *out);
/* The distributed mode: remote ([L*E], the caller's, NULL: none) marks experts this process
 * does not hold, whose prefetches are dropped (MVM_OK: there is nothing to load). */
void mvm_resid_set_remote(mvm_resid *r, const uint8_t *remote);
/* A reader on a device stream (a CUstream; NULL: none, the default): a round's copies are
 * then not waited for on the host but ordered before that stream's later work
 * (mvm_resid_hold_round, mvm_expert_wait_on), where the space can (the cuda backend with its
 * homes unmapped) and copies are not ordered (MOEVM_DETERMINISTIC). */
void mvm_resid_set_reader_stream(mvm_resid *r, void *stream);
/* With a reader stream: whether the next holds let that reader read a held copy in the
 * device pool's view, where it lands, as soon as it is queued (mvm_expert_wait_view), not
 * once it is mapped at the expert's address (MOEVM_LOAD_WAIT=device-view); the reader must
 * then read each held expert at mvm_resid_view_addr. */
void mvm_resid_set_read_view(mvm_resid *r, int on);
/* Where the reader reads held expert (layer, e) until the step releases it: the pool's view
 * of its slab, its home's device address (read in place with the homes unmapped:
 * mvm_resid_begin_home), or 0, its own address (resident when held, or not one run of
 * chunks); in a slot space never 0 for a held expert: its slot (mvm_expert_slot). */
uint64_t mvm_resid_view_addr(const mvm_resid *r, uint32_t layer, uint32_t e);
/* Whether the reader reads held expert (layer, e) where the space keeps it resident (its own
 * address, or a slot space's slot), not a copy still on the bus nor a home read in place. */
int mvm_resid_reads_resident(const mvm_resid *r, uint32_t layer, uint32_t e);
/* Whether a round's copies are ordered before the reader's stream (the above took), so that
 * holding a round waits for nothing but the copies' queueing. */
int mvm_resid_orders_on_device(const mvm_resid *r);
/* The cost model the modules plan with (cost.h). */
const mvm_cost *mvm_resid_cost(const mvm_resid *r);
/* A step's CPU experts took took_s where the cost model gave them model_s (mvm_cost_cpu,
 * unscaled); 0, 0 for a step that ran none. The view's cpu_scale, which the assign modules
 * multiply t_cpu by, follows the ratio: an exponential average in the log domain (a step's
 * weight 1/8, its ratio clamped to [1/16, 16]), which fades toward the model (1/256 a step)
 * while no step runs experts on the CPU, so a CPU once found slow is tried again. A module
 * planning with a preset's rates, or a calibration made with idle threads, then plans with
 * what the CPU does in the steps (offload.md, session 79: 4.2 ms a token where 2.6 were
 * planned). */
void mvm_resid_note_cpu(mvm_resid *r, double model_s, double took_s);

#endif
