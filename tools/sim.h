/*
 * The trace-driven simulator behind `moevm sim`: replays a routing trace (tools/trace.h)
 * through the policy modules (policy/) over a discrete-event model of one GPU stream, one
 * serial copy engine (on-demand jobs ahead of prefetches that have not started) and a CPU
 * pool, with per-expert times from the cost model (policy/cost.h). Decoding is modelled
 * token by token, layer by layer; each layer is
 *
 *   attention (GPU) → route → assign → experts: resident ones on the GPU, loads on the copy
 *   engine then the GPU (a resident page prefix computing while the rest loads, as
 *   MoEpic's split does), zero-copy reads over the bus beside the GPU's compute (the same
 *   launches; the bus, not the SMs, bounds them), CPU ones on the pool, concurrently → the
 *   layer ends when GPU and CPU are both done → predictions for the next layer queue
 *   prefetches → observations to evict/config.
 *
 * Residency is tracked in pages per expert as the space does: a load reserves its pages at
 * issue (capacity is never exceeded), they become resident when the copy ends; room comes
 * from the evict module's victims among resident experts no step is using.
 */
#ifndef MVM_TOOLS_SIM_H
#define MVM_TOOLS_SIM_H

#include <stdint.h>

#include "policy/policy.h"
#include "tools/trace.h"

typedef struct mvm_sim_config {
    const char *policy[MVM_ROLE_COUNT];  /* module name per role; NULL = the default */
    const char *params[MVM_ROLE_COUNT];  /* "a=1,b=2" per role; NULL = none */
    uint64_t budget_pages;               /* device budget in pages of the trace's shape */
    uint32_t page_bytes;                 /* residency granularity (2 MiB) */
    uint32_t prefetch_depth;             /* experts prefetched per layer from a prediction
                                            (0: top_k); in the window, its buffer in whole
                                            experts' pages (MoEpic's U_b = K) */
    int prefetch_window;                 /* 1: MoEpic's speculative prefetcher (§3.3): the
                                            experts the predict module ranks (its rank op;
                                            else those its shares name), most likely first,
                                            each its pages not resident (a split expert's
                                            bottom), while the buffer holds them, until the
                                            layer routes; what has not started by then is
                                            dropped */
    int zerocopy;                        /* 1: the device reads host homes (HOST_NUMA) */
    int admit;                           /* 1 (default): experts run from their homes are
                                            admitted in the background (policy/admit.h),
                                            one a step while the copy engine is idle; 2:
                                            one a step whatever it carries (the engine's
                                            MOEVM_ADMIT=steps) */
    int device_cpu;                      /* device_routed: a miss runs on the CPU from its
                                            home where that ends before its read in place
                                            (the engine's MOEVM_DEVICE_CPU) */
    int device_routed;                   /* 1: decode at a budget routed on the device (the
                                            engine's MOEVM_BUDGET_ROUTING=in-place): no
                                            host_step between a layer's attention and its
                                            experts; an expert resident and landed at the
                                            token's start is read there (shielded from
                                            eviction until its layer has run), every other
                                            one read in place (zero-copy), whatever the
                                            assign module says; loads as the steps end.
                                            2: read-through, the same but each miss read in
                                            place is stored as it is read into a free slab
                                            of a pool refilled between tokens (the evict
                                            module's victims), resident from the next token;
                                            no admission then.
                                            3: read-ahead, a design the engine does not
                                            have yet: read-through, and at each layer's
                                            attention end the predict module's top
                                            experts of the next layer that are not
                                            resident are copied by the device into pool
                                            slabs (at zerocopy_bw, over the link that the
                                            reads in place use, after this layer's), read
                                            there by that layer, which waits for them */
    /* For predictors (policy.h, mvm_pinit): the model's routers and a `moevm
     * train-predictor` file's bytes; NULL when not given. */
    const mvm_router *router;
    const void *predictor;
    size_t predictor_size;
    const mvm_pprofile *profile;         /* config hot's offline profile, or NULL */
} mvm_sim_config;

typedef struct mvm_sim_result {
    uint64_t tokens, accesses, hits, misses, substitutions;
    uint64_t partial_hits;               /* misses that found a page prefix resident (a split) */
    uint64_t cpu_runs, zerocopy_runs, loads, prefetches, prefetch_used, prefetch_hits;
    uint64_t admitted;                   /* of the prefetches: admissions (policy/admit.h) */
    uint64_t read_through;               /* misses stored into a pool slab as they were read
                                            in place (device_routed 2) */
    uint64_t prefetches_cut;             /* a forecast's copies dropped, not started when
                                            their layer routed (and not used by it) */
    uint64_t bytes_loaded, bytes_prefetched;
    double time;                         /* modelled seconds for all tokens */
    double t_attn, t_gpu, t_stall, t_cpu_wait; /* breakdown of `time` (sums to it) */
    double copy_busy;                    /* seconds the copy engine was busy */
    uint64_t peak_pages;                 /* most pages ever resident or loading */
} mvm_sim_result;

/* Defaults: lru eviction, gpu assignment, no route/predict/config, prefetch depth top_k,
 * zero-copy off, 2 MiB pages. */
void mvm_sim_config_init(mvm_sim_config *c);

/* Runs the whole trace. MVM_ERR_INVALID naming the role for an unknown module or bad
 * parameters. An expert that must load when no room can be made (everything resident is in
 * use) runs zero-copy when the device reads host memory, else on the CPU: every budget
 * runs, small ones slowly. */
mvm_status mvm_sim_run(const mvm_trace *t, const mvm_cost *cost, const mvm_sim_config *c,
                       mvm_sim_result *out);

#endif
