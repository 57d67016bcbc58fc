/* The host's time a MoE layer step spends in the residency and its policies, what a decode
 * step routed by the host pays before its experts can run (a GPU's `RESULT decode_host`
 * splits it into policies_us and ask_us; bench/gpu/llamacpp.sh): a routing trace replayed
 * through the engine's residency (engine/forward/residency.h) as a decode step drives it,
 * begin (each expert asked resident, waited for and pinned), end (unpinned, the step
 * reported) and observe (the evict module's and the config module's view of it), with
 * experts of 3 pages of 4 KiB, so that the copies cost next to nothing and the bookkeeping
 * is what is timed. µs a layer step for each part, after a first pass over the trace that
 * fills the cache. The space is MOEVM_BACKEND's (the host's without a GPU; over
 * tests/fakecuda, the device path's calls), its worker spinning as MOEVM_MOVE_SPIN says.
 *   bench_resid_step TRACE.jsonl [evict (adaptive)] [budget % (25)] [passes (3)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cpu/bench_util.h"
#include "engine/forward/residency.h"
#include "tools/trace.h"
#include "vmm/error.h"

#define PAGE 4096u
#define EXPERT_PAGES 3u /* an expert, so that its copy costs next to nothing */

/* One pass of the trace's tokens through the residency; each part's seconds added to t[]. */
static mvm_status pass(mvm_resid *r, const mvm_trace *tr, uint32_t *counts, double t[3])
{
    const uint32_t L = tr->hdr.n_layers, E = tr->hdr.n_experts, K = tr->hdr.top_k;
    for (uint32_t i = 0; i < tr->n_tokens; i++)
        for (uint32_t l = 0; l < L; l++) {
            int32_t *experts = mvm_trace_experts(tr, i, l);
            memset(counts, 0, E * sizeof *counts);
            for (uint32_t k = 0; k < K; k++)
                counts[experts[k]] = 1;
            const mvm_pstep step = {.layer = l, .n_tok = 1, .scores = mvm_trace_scores(tr, i, l),
                                    .experts = experts, .weights = mvm_trace_weights(tr, i, l),
                                    .counts = counts};
            const double t0 = mvm_bench_wall_s();
            mvm_status st = mvm_resid_begin(r, l, experts, K, 1);
            const double t1 = mvm_bench_wall_s();
            st = st ? st : mvm_resid_end(r, &step, experts, K, l + 1 == L);
            const double t2 = mvm_bench_wall_s();
            mvm_resid_observe(r, &step);
            const double t3 = mvm_bench_wall_s();
            if (st != MVM_OK)
                return st;
            t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
        }
    return MVM_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_resid_step TRACE.jsonl [evict (adaptive)] [budget %% (25)] "
                        "[passes (3)]\n");
        return 2;
    }
    const char *evict = argc > 2 ? argv[2] : "adaptive";
    const double budget = argc > 3 ? atof(argv[3]) / 100 : 0.25;
    const int passes = argc > 4 ? atoi(argv[4]) : 3;
    mvm_trace *tr = NULL;
    if (mvm_trace_load(argv[1], &tr) != MVM_OK) {
        fprintf(stderr, "bench_resid_step: %s\n", mvm_last_error());
        return 1;
    }
    mvm_space_desc d;
    mvm_space_desc_init(&d);
    d.n_layers = tr->hdr.n_layers;
    d.n_experts = tr->hdr.n_experts;
    d.expert_bytes = EXPERT_PAGES * PAGE;
    d.page_size = PAGE;
    d.device_budget = (uint64_t)(budget * d.n_layers * d.n_experts * EXPERT_PAGES) * PAGE;
    mvm_space *sp = NULL;
    mvm_resid *r = NULL;
    const mvm_resid_params p = {.evict = evict, .evict_args = "", .config = "none",
                                .top_k = tr->hdr.top_k};
    uint32_t *counts = calloc(tr->hdr.n_experts, sizeof *counts);
    double t[3] = {0}, warm[3] = {0};
    mvm_status st = counts ? mvm_space_create(&d, &sp) : MVM_ERR_NOMEM;
    st = st ? st : mvm_resid_create(sp, &p, &r);
    st = st ? st : pass(r, tr, counts, warm);
    for (int k = 0; k < passes && st == MVM_OK; k++)
        st = pass(r, tr, counts, t);
    if (st != MVM_OK) {
        fprintf(stderr, "bench_resid_step: %s\n", mvm_last_error());
        return 1;
    }
    mvm_resid_stats rs;
    mvm_resid_get_stats(r, &rs);
    const double steps = (double)passes * tr->n_tokens * tr->hdr.n_layers;
    printf("%s: %u layers x %u experts, top-%u, %u tokens x %d passes; evict %s at %.0f%%: "
           "hits %.1f%%, %.2f evictions a miss\n", argv[1], tr->hdr.n_layers,
           tr->hdr.n_experts, tr->hdr.top_k, tr->n_tokens, passes, evict, budget * 100,
           100.0 * (double)rs.hits / (double)(rs.accesses ? rs.accesses : 1),
           (double)rs.evictions / (double)(rs.accesses - rs.hits ? rs.accesses - rs.hits : 1));
    printf("RESULT bench=resid_step evict=%s budget=%.0f begin_us=%.2f end_us=%.2f "
           "observe_us=%.2f\n", evict, budget * 100, t[0] / steps * 1e6, t[1] / steps * 1e6,
           t[2] / steps * 1e6);
    mvm_resid_destroy(r);
    mvm_space_destroy(sp);
    mvm_trace_free(tr);
    free(counts);
    return 0;
}
