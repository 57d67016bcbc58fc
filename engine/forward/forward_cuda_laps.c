/*
 * Where a host-routed batch's host time goes (forward_cuda_impl.h, struct cuda_laps): a
 * decode token at a budget, and every prompt batch, apart. Such a batch waits for the host
 * once a layer: its router's logits come down, the host routes, asks for residency and
 * waits for the copies it needs, then queues the experts, the device idle meanwhile. On an
 * H200 a decode token of Qwen3-30B-A3B's shape (12 blocks, 25%) took 6.1 ms, 1.1 of it
 * waiting for copies (docs/perf/offload.md, run I), and the rest could not be told apart;
 * OLMoE-1B-7B's pp512 batch took 81 ms of which its kernels kept the device busy ~32
 * (docs/perf/engine.md, sessions 106 and 107). This splits each kind, batch by batch, into the
 * phases below, and adds the space's own clocks over the same batches (the evictions'
 * unmaps paid on this thread, the mappings the migration worker makes). MOEVM_LOG=info
 * prints the splits at the context's end; bench/gpu/llamacpp.sh runs moevm at info.
 *
 * A phase is timed from the mark before it (mvm_cuda_fwd_lap), so the phases add up to the
 * batch's whole host time in the backend, whatever is not marked falling into the next
 * mark.
 */
#include <stdio.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

static const char *const lap_names[MVM_LAP_N] = {
    [MVM_LAP_QUEUE] = "queueing kernels and copies",
    [MVM_LAP_OBSERVE] = "observing the step before",
    [MVM_LAP_DEVICE] = "waiting for the device",
    [MVM_LAP_POLICIES] = "routing and the policies",
    [MVM_LAP_ASK] = "asking for residency",
    [MVM_LAP_COPIES] = "waiting for copies",
    [MVM_LAP_CPU] = "the CPU's experts",
};

static void space_clocks(const struct cuda_fwd *f, uint64_t out[3])
{
    mvm_stats s = {0};
    (void)mvm_space_get_stats(f->m->space, &s);
    out[0] = s.evict_ns, out[1] = s.remap_ns, out[2] = s.bytes_moved;
}

static void resid_counts(const struct cuda_fwd *f, uint64_t out[3])
{
    mvm_resid_stats s = {0};
    mvm_resid_get_stats(f->moe->resid, &s);
    out[0] = s.accesses, out[1] = s.hits, out[2] = s.zerocopy_runs;
}

void mvm_cuda_fwd_laps_begin(struct cuda_fwd *f, const mvm_fwd_batch *b)
{
    struct cuda_laps *l = &f->laps;
    l->on = !f->route_here && !f->prompt.on && f->m->space && !f->m->experts_at_home;
    if (!l->on)
        return;
    l->prefill = b->n > 1;
    l->cur_rows = b->n;
    space_clocks(f, l->space0);
    resid_counts(f, l->resid0);
    memset(l->cur, 0, sizeof l->cur);
    l->cur_syncs = 0;
    l->cur_cpu_plan = 0;
    l->at = mvm_now_s();
}

void mvm_cuda_fwd_lap(struct cuda_fwd *f, enum mvm_lap phase)
{
    struct cuda_laps *l = &f->laps;
    if (!l->on)
        return;
    const double now = mvm_now_s();
    l->cur[phase] += now - l->at;
    l->at = now;
    l->cur_syncs += phase == MVM_LAP_DEVICE;
}

void mvm_cuda_fwd_lap_cpu_plan(struct cuda_fwd *f, double seconds)
{
    f->laps.cur_cpu_plan += f->laps.on ? seconds : 0;
}

void mvm_cuda_fwd_laps_end(struct cuda_fwd *f, mvm_status st)
{
    struct cuda_laps *l = &f->laps;
    if (!l->on)
        return;
    mvm_cuda_fwd_lap(f, MVM_LAP_POLICIES); /* the last step's end */
    l->on = 0;
    if (st != MVM_OK) /* its phases may not have run: not counted */
        return;
    struct lap_sums *sum = &l->sums[l->prefill];
    for (int i = 0; i < MVM_LAP_N; i++)
        sum->t[i] += l->cur[i];
    sum->syncs += l->cur_syncs;
    sum->cpu_plan += l->cur_cpu_plan;
    uint64_t now[3], counts[3];
    space_clocks(f, now);
    resid_counts(f, counts);
    for (int i = 0; i < 3; i++) {
        sum->space[i] += now[i] - l->space0[i];
        sum->resid[i] += counts[i] - l->resid0[i];
    }
    sum->batches++;
    sum->rows += l->cur_rows;
}

/* One kind's split: decode's "a token", the prompts' "a batch" (whose rows it says). */
static void report(const struct cuda_fwd *f, const struct lap_sums *l, int prefill)
{
    if (!l->batches)
        return;
    const double us = 1e6 / (double)l->batches;
    char line[512];
    int at = 0;
    for (int i = 0; i < MVM_LAP_N; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s%.0f us %s", i ? ", " : "",
                       l->t[i] * us, lap_names[i]);
    /* beside the CPU's experts' time, what the cost model planned for them: a module that
     * plans with a preset's costs (or stale ones) shows here, and the correction the
     * measured times have made to its CPU rate since (mvm_resid_note_cpu) */
    mvm_resid_stats rs;
    mvm_resid_get_stats(f->moe->resid, &rs);
    snprintf(line + at, sizeof line - (size_t)at,
             " (the cost model: %.0f us, its CPU times now scaled by %.2f)", l->cpu_plan * us,
             rs.cpu_scale);
    const double n = (double)l->batches;
    char what[128];
    if (prefill)
        snprintf(what, sizeof what, "prompt: %llu batches of %.1f tokens routed by the host; "
                 "host time a batch", (unsigned long long)l->batches, (double)l->rows / n);
    else
        snprintf(what, sizeof what, "decode: %llu tokens routed by the host; host time a token",
                 (unsigned long long)l->batches);
    const char *per = prefill ? "batch" : "token";
    mvm_log(MVM_LOG_INFO, "%s: %s (%.1f syncs); the space a %s: %.0f us evicting on this "
            "thread (in the asking and the policies), %.0f us of the migration worker's "
            "mappings, %.1f MiB copied; expert accesses a %s: %.1f, %.1f hits, %.1f read in "
            "place",
            what, line, (double)l->syncs / n, per, (double)l->space[0] / 1e3 / n,
            (double)l->space[1] / 1e3 / n, (double)l->space[2] / (1 << 20) / n, per,
            (double)l->resid[0] / n, (double)l->resid[1] / n, (double)l->resid[2] / n);
}

void mvm_cuda_fwd_laps_report(const struct cuda_fwd *f)
{
    report(f, &f->laps.sums[0], 0);
    report(f, &f->laps.sums[1], 1);
}
