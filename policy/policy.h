/*
 * policy/: every decision mechanism of the five papers as a module behind one of six narrow
 * interfaces (docs/policies.md). Policy code is pure C over the plain structs below: no CUDA,
 * no I/O, no clocks (time comes in as mvm_pview.now), no globals, no allocation after create.
 * The engine, the interposer and the simulator (tools/sim) call the same modules.
 *
 * Expert ids: x = layer * n_experts + expert, 0 <= x < n_layers * n_experts.
 * A module is an ops table plus an opaque `self` made by create(); every ops table starts
 * with the same header (name, about, create, destroy) so the registry (registry.c) can find
 * and build any of them by role and name.
 */
#ifndef MVM_POLICY_POLICY_H
#define MVM_POLICY_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"
#include "policy/cost.h"

/* ---- what the policies see ------------------------------------------------------------ */

typedef struct mvm_pshape {
    uint32_t n_layers, n_experts, top_k;
    uint32_t n_embd, n_ff;          /* hidden size, expert intermediate size */
    uint32_t pages_per_expert;      /* the unit of residency (a split is a page prefix) */
    uint64_t expert_bytes;
} mvm_pshape;

/* Residency, read-only to policies; maintained by the caller (engine, interposer, sim). */
typedef struct mvm_pview {
    const mvm_pshape *shape;
    const uint32_t *resident;       /* [L*E] device-resident page prefix of each expert */
    const uint8_t *busy;            /* [L*E] 1: in use or loading now, not evictable */
    uint64_t capacity_pages;        /* device budget in pages */
    uint64_t used_pages;            /* resident + loading */
    uint64_t tokens;                /* decode steps completed so far (the policies' clock) */
    double now;                     /* seconds, the caller's clock (real or modelled) */
    double cpu_scale;               /* what the CPU's experts take here over what the cost
                                       model gives them, as the engine measures it
                                       (mvm_resid_note_cpu): the assign modules scale
                                       t_cpu by it. 0 (the simulator's) or 1: the model */
} mvm_pview;

/* One MoE layer for a batch of n_tok tokens. */
typedef struct mvm_pstep {
    uint32_t layer, n_tok;
    const float *scores;            /* [n_tok][E] router probabilities; NULL if unknown */
    int32_t *experts;               /* [n_tok][K] selected, best first (route may rewrite) */
    float *weights;                 /* [n_tok][K] their gate weights; NULL if unknown (a
                                       caller that knows only the ids: each then weighs
                                       1/K) */
    const float *hidden;            /* [n_tok][n_embd] the layer's MoE input; NULL if unknown */
    const uint32_t *counts;         /* [E] tokens per expert after route (caller fills) */
    const float *next_hidden;       /* [n_tok][n_embd] the next layer's MoE input as the
                                       engine's speculative pass estimates it (SMoE §IV-C),
                                       for a predict module that is `speculative`; else NULL */
    const float *looks;             /* [E] each expert's look at this step as evict_affinity.c
                                       takes it (mvm_affinity_looks), computed once where
                                       several modules read it (evict_adaptive.c); else NULL */
} mvm_pstep;

/* A model's routers and how they choose, for the modules that recompute a routing (the gate
 * and residual predictors, fixedpoint's speculation; policy/router.h computes the choice).
 * Per token, layer l's logits are weights[l] · h + logit_bias[l]; its probabilities are
 * their softmax, or their sigmoid; it chooses the top_k of the probabilities plus
 * choose_bias[l], among the experts of the n_group_used best of n_group equal groups (a
 * group ranked by its best expert's key under softmax, by its best two's sum under
 * sigmoid). Without a choose bias or groups that is the top_k of the logits. Arrays are
 * [L] of per-layer rows; an array or a row may be NULL: none. */
typedef struct mvm_router {
    const float *const *weights;     /* [L] -> [E][n_embd] F32 */
    const float *const *logit_bias;  /* [L] -> [E] (gpt-oss's router bias) */
    const float *const *choose_bias; /* [L] -> [E] (exp_probs_b: DeepSeek-V3, GLM-4.5,
                                        MiniMax-M2) */
    int sigmoid;
    uint32_t n_group, n_group_used;  /* n_group <= 1: no groups */
} mvm_router;

/* Module parameters: "name=value,name=value" from the command line or MOEVM_<ROLE>_ARGS.
 * Unknown names are an error the module reports (it knows its own names). */
typedef struct mvm_pparams {
    const char *text;               /* may be NULL or "" */
} mvm_pparams;
/* The value of `name` in p as a double; `def` when absent. MVM_ERR_INVALID (message names
 * the parameter) when present but not a number. */
mvm_status mvm_pparam_double(const mvm_pparams *p, const char *name, double def, double *out);
/* MVM_ERR_INVALID naming the first parameter in p not among the NULL-terminated `known`.
 * It checks the whole text (syntax: no blanks, no empty items; every value a finite number;
 * no name twice), so a module that calls it first in create reports every mistake with its
 * own name ("evict score: parameter 'w_size': value 'x' is not a finite number"). */
mvm_status mvm_pparams_check(const mvm_pparams *p, const char *const *known, const char *module);

/* The routing still to come, for the offline oracles (evict "belady", predict "oracle")
 * that bound what an online module can do. Only the simulator knows it (the trace it
 * replays). Step p is token p / n_layers at layer p % n_layers, and the caller observes the
 * steps in that order, one each, every layer of every token, as the simulator does. */
typedef struct mvm_pfuture {
    uint32_t n_tokens;
    const int32_t *experts;         /* [n_tokens][n_layers][top_k], as the steps select */
} mvm_pfuture;

/* An offline profile of the routing (PreScope's Profiler and Counter, §5): the tokens each
 * (layer, expert) processed over a profiling run, e.g. counted from a `moevm run
 * --trace-out` trace. The config module "hot" builds its table from it. */
typedef struct mvm_pprofile {
    uint32_t n_layers, n_experts;
    uint64_t n_tokens;              /* tokens profiled (each counted once per layer) */
    const uint64_t *counts;         /* [n_layers][n_experts] */
} mvm_pprofile;

/* Everything a module may need at create time. */
typedef struct mvm_pinit {
    const mvm_pshape *shape;
    const mvm_cost *cost;           /* per-expert costs (cost.h); never NULL */
    mvm_pparams params;
    /* Model data for predictors (NULL when unavailable, e.g. a synthetic trace): */
    const mvm_router *router;       /* the model's routers and how they choose */
    /* The learned predictor's weights: the bytes of a `moevm train-predictor` file, read by
     * the caller (policy code does no I/O); NULL when none was given. */
    const void *predictor;
    size_t predictor_size;
    const mvm_pfuture *future;      /* NULL but in the simulator (the oracles need it) */
    const mvm_pprofile *profile;    /* an offline routing profile; NULL when none was given */
    int homes_unreadable;           /* the device cannot read a non-resident expert in place
                                       (its homes neither mapped nor registered for it:
                                       mvm_space_info.home_readable): the assign modules
                                       refuse zerocopy=1 */
} mvm_pinit;

#define MVM_POLICY_HEADER                                                                   \
    const char *name;                                                                       \
    const char *about;              /* one line, with the paper and the reading chosen */  \
    mvm_status (*create)(const mvm_pinit *init, void **self);                               \
    void (*destroy)(void *self)

/* ---- route: may a selected expert be swapped for a resident one? ------------------------ */
typedef struct mvm_route_ops {
    MVM_POLICY_HEADER;
    /* Rewrites step->experts / weights in place; exactly top_k distinct experts per token
     * remain. Returns the number of substitutions made. */
    uint32_t (*route)(void *self, const mvm_pview *v, mvm_pstep *step);
} mvm_route_ops;

/* ---- evict: which resident experts make room? ----------------------------------------- */
typedef struct mvm_evict_ops {
    MVM_POLICY_HEADER;
    /* Every layer step after routing (what was used, with scores and token counts). */
    void (*observe)(void *self, const mvm_pview *v, const mvm_pstep *step);
    /* The candidate to evict first among cand[0..n) (resident, not busy), for room that
     * layer `for_layer` needs; returns its index in cand. n >= 1. */
    uint32_t (*victim)(void *self, const mvm_pview *v, uint32_t for_layer, const uint32_t *cand,
                       uint32_t n);
    /* Optional (NULL): experts the policy wants resident now although nothing asked for
     * them (DALI's windowed swaps); writes up to cap ids, returns the count. */
    uint32_t (*want)(void *self, const mvm_pview *v, uint32_t layer, uint32_t *out, uint32_t cap);
    /* Optional (NULL), for a module whose victim() is the first of the candidates under an
     * order that depends neither on which others are offered nor on the layer asking (the
     * first of equals in the list's order): how many more steps it may observe, none of them a step of these
     * candidates' layer, before its victim among cand[0..n) (n >= 1, all of one layer)
     * could change; UINT64_MAX where only a step of their layer changes it. A caller can
     * then keep each layer's victim between steps and choose among the layers' victims,
     * rather than scan every candidate (evict_adaptive.c's ghosts). */
    uint64_t (*steady)(const void *self, const uint32_t *cand, uint32_t n);
} mvm_evict_ops;

/* ---- assign: where does each active expert of a layer run? ------------------------------ */
enum mvm_where {
    MVM_RUN_NONE = 0,        /* not active in this step */
    MVM_RUN_GPU,             /* resident (or made resident by a load first) */
    MVM_RUN_GPU_LOAD,        /* on-demand load, then GPU */
    MVM_RUN_ZEROCOPY,        /* GPU reads the host home in place, over PCIe */
    MVM_RUN_CPU,             /* CPU threads, from the host home */
};

typedef struct mvm_assignment {
    uint8_t *where;          /* [E], enum mvm_where, for step->layer */
    uint32_t *prefetch;      /* ids to prefetch (any later layer), best first */
    uint32_t n_prefetch, cap_prefetch;
    double est_time;         /* the module's own estimate of the layer's time, s */
} mvm_assignment;

/* Layers ahead that the engine and the simulator ask the predictor about for the assign
 * module: presched's deepest lookahead (Q4). */
#define MVM_ASSIGN_AHEAD 2

typedef struct mvm_assign_ops {
    MVM_POLICY_HEADER;
    /* ahead: [n_ahead][E] predicted probabilities of the experts of layers layer+1 ..
     * layer+n_ahead (n_ahead 0 and ahead NULL when no predictor runs); presched uses them
     * to plan prefetches across layers. */
    void (*assign)(void *self, const mvm_pview *v, const mvm_pstep *step, const float *ahead,
                   uint32_t n_ahead, mvm_assignment *out);
} mvm_assign_ops;

/* ---- predict: which experts will a later layer use? ------------------------------------- */
typedef struct mvm_predict_ops {
    MVM_POLICY_HEADER;
    /* From layer step->layer's routing (and hidden state where the module needs it),
     * predicted probabilities for layer `target` (> step->layer) into out[E]. Returns 0
     * when it cannot predict (e.g. no hidden state): the caller prefetches nothing. */
    int (*predict)(void *self, const mvm_pstep *step, uint32_t target, float *out);
    /* Optional: every expert of layer `target` ranked, higher out[e] first, for a caller that
     * prefetches beyond the likely top_k (MoEpic's window: the simulator's and the engine's
     * `window` prefetch); 0 when it cannot. Without it such a caller ranks by predict's
     * shares, and takes only the experts they name. */
    int (*rank)(void *self, const mvm_pstep *step, uint32_t target, float *out);
    /* Optional: the actual routing of a layer, for predictors that learn online. */
    void (*observe)(void *self, const mvm_pstep *step);
    /* The module predicts from step->next_hidden: the engine then runs a partial forward
     * pass for it once the step's resident experts have run (forward_cpu.c), and asks for
     * its forecast only then. */
    int speculative;
} mvm_predict_ops;

/* ---- config: budget per layer and split θ ----------------------------------------------- */
typedef struct mvm_config_ops {
    MVM_POLICY_HEADER;
    void (*observe)(void *self, const mvm_pview *v, const mvm_pstep *step);
    /* Called after every token; the module decides when to recompute (fixedpoint: every
     * τ tokens). Writes per-layer budgets in pages [L] summing to at most capacity_pages
     * (UINT64_MAX: that layer has none, only the device's capacity bounds it), and per-layer
     * split θ in (0, 1] (the resident prefix of cached experts, as a fraction of pages).
     * Returns 1 if it changed anything. */
    int (*configure)(void *self, const mvm_pview *v, uint64_t *layer_pages, float *theta);
    /* Optional: the experts the module holds resident, held[L*E] = 1 (PreScope's static
     * hot-expert table); their number. The caller asks after every configure that returned
     * 1, and once before the first token (a table from an offline profile is filled at
     * init); it loads them, and no evict module is ever offered them as victims, so only
     * the pages they leave are cached by the evict module. */
    uint32_t (*hold)(void *self, uint8_t *held);
} mvm_config_ops;

/* ---- place: which server holds which experts? ------------------------------------------- */
typedef struct mvm_cluster {
    uint32_t n_servers;
    const uint64_t *capacity_bytes;  /* [S] expert memory per server, over all its GPUs */
    const uint32_t *gpus;            /* [S] GPUs per server, each with an equal share of
                                        its memory; NULL: one each */
    const double *rtt;               /* [S][S] seconds */
    const double *bw;                /* [S][S] bytes/s */
    double period_s;                 /* seconds the call's statistics span (the time since
                                        the last call); 0: unknown */
} mvm_cluster;

typedef struct mvm_place_ops {
    MVM_POLICY_HEADER;
    /* freq: [S][L][E] token-weighted activation counts per home server since the last
     * call; placement: [S][L*E] 1 where server s holds the expert (in/out: the current
     * placement comes in). Returns bytes to migrate, or 0 when the change does not pay. */
    uint64_t (*place)(void *self, const mvm_cluster *c, const double *freq, uint8_t *placement);
} mvm_place_ops;

/* The whole experts server n holds at most: each of its GPUs its own, from its share of the
 * server's memory (Prism's per-GPU constraint: an expert is never split between GPUs, so
 * G GPUs can hold up to G - 1 fewer than the pooled bytes would). */
static inline uint64_t mvm_cluster_slots(const mvm_cluster *c, uint32_t n, uint64_t expert_bytes)
{
    uint64_t g = c->gpus && c->gpus[n] ? c->gpus[n] : 1;
    return g * (c->capacity_bytes[n] / g / expert_bytes);
}

/* ---- the registry ----------------------------------------------------------------------- */
enum mvm_role { MVM_ROLE_ROUTE, MVM_ROLE_EVICT, MVM_ROLE_ASSIGN, MVM_ROLE_PREDICT,
                MVM_ROLE_CONFIG, MVM_ROLE_PLACE, MVM_ROLE_COUNT };

/* The ops table of module `name` for `role` (cast to the role's type), or NULL. */
const void *mvm_policy_find(enum mvm_role role, const char *name);
const char *mvm_role_name(enum mvm_role role);
/* "lru, lfu, score, workload, lcp" for messages. */
void mvm_policy_names(enum mvm_role role, char *buf, size_t cap);

#endif
