/*
 * bench_gpu_experts: the decode step's weight-reading kernels (kernels/cuda: the routed
 * experts' up and down, a row-major matrix product) launched as the engine launches them, on
 * real model shapes and the weight types people run, each timed against the bytes it reads.
 * Decode reads every active weight once per token, so GB/s against the GPU's memory
 * bandwidth (vmm_costs section 3: about 2,800 GB/s on an H100) says how far a kernel is from
 * its bound; issue 50 asks for 60% of it end to end.
 *
 *   bench_gpu_experts path/to/libcuda.so.1 [reps (50)]
 *
 * One token, the shape's top-k experts each with its one row (what `moevm bench -n` runs per
 * MoE layer): up and down are decode's kernels (up1 and the blocks down reads, down1),
 * up_tiled and down_tiled those of a step with several rows an expert, on the same rows. Each
 * repetition reads other copies of the weights (4 sets of experts, 16 matrices), so that the
 * 50 MB L2 of an H100 does not serve them; `reps` launches are queued back to back and waited
 * for once, as decode queues them, so a figure is the time between two such launches (a kernel
 * shorter than a launch shows the launch rate). The weights' values do not matter: bytes of
 * 0x11 (finite scales of every type). Prints a table and one line a script reads per row:
 *   RESULT gpu_kernel shape=olmoe-1b-7b types=q8_0/q8_0 kernel=experts us=31.2 gbps=1712.4
 * Then the same token with every active expert away from the device, in pinned host memory,
 * as read-through's misses are (engine.md, "Read-through"): up_host and down_host read it in
 * place over the bus (wptr at the host buffer: a registered buffer's device address is its
 * own where CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 1, as on every x86-64 Linux H100 and
 * H200), up_keep and down_keep are read-through's kernels that also store what they read
 * into a device slab, and copy is the copy engine's upload of the same experts, the rate a
 * miss's load would reach; their GB/s count the host bytes. vmm_costs section 3 says what a
 * kernel streaming host memory reaches (51 GB/s from HOST_NUMA on an H200).
 * Over tests/fakecuda (FAKECUDA_KERNELS set) the same launches run emulated: only the times
 * on a GPU mean anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/bench_gpu.h"
#include "kernels/cpu/kernels.h"

#define SETS 4      /* copies of the active experts, read in turn */
#define MATRICES 16 /* copies of the matrix */

struct shape {
    const char *name;
    uint32_t n_embd, n_ff, top_k;
};

static const struct shape shapes[] = {
    {"olmoe-1b-7b", 2048, 1024, 8},
    {"qwen3-30b-a3b", 2048, 768, 8},
    {"mixtral-8x7b", 4096, 14336, 2},
};

/* gate/up and down: Q8_0; Q4_K_M's two mixes (its ffn_down is Q6_K in some layers) */
static const enum mvm_wtype types[][2] = {
    {MVM_W_Q8_0, MVM_W_Q8_0}, {MVM_W_Q4_K, MVM_W_Q4_K}, {MVM_W_Q4_K, MVM_W_Q6_K}};

static int fail(const char *what)
{
    fprintf(stderr, "bench_gpu_experts: %s: %s\n", what, mvm_last_error());
    return 1;
}

/* Bytes of 0x11 (the weights: finite scales in every type), or the words 0, 1, 2, ... */
static void fill_11(void *h, size_t bytes) { memset(h, 0x11, bytes); }

static void fill_ids(void *h, size_t bytes)
{
    for (size_t i = 0; i < bytes / 4; i++)
        ((uint32_t *)h)[i] = (uint32_t)i;
}

static mvm_status filled(mvm_gpu *g, size_t bytes, int ids, mvm_dptr *out)
{
    return bench_filled(g, bytes, ids ? fill_ids : fill_11, out);
}

/* The launches of repetition i: what `which` names, over copy i of the weights. */
enum which { UP, UP_TILED, DOWN, DOWN_TILED, EXPERTS, MATVEC, UP_HOST, DOWN_HOST, UP_KEEP,
             DOWN_KEEP, COPY };

struct rig {
    mvm_gpu *g;
    mvm_g_expert_args e;
    mvm_dptr ids;          /* 0 .. SETS x top_k - 1: set i's experts are its i-th top_k */
    mvm_g_matvec_args m;
    uint64_t matrix_bytes;
    uint8_t *host;   /* SETS x top_k experts in pinned host memory, set i's in turn */
    mvm_dptr hptr;   /* [SETS][top_k] their addresses: set i's the wptr of launch i */
    mvm_dptr slabs;  /* top_k device slabs: read-through's stores, and copy's target */
    mvm_dptr wstore; /* [top_k] the slabs' addresses */
};

static mvm_status launch(struct rig *r, enum which w, int i)
{
    mvm_g_expert_args e = r->e;
    e.active = r->ids + (uint64_t)(i % SETS) * e.n_active * 4;
    mvm_g_matvec_args m = r->m;
    m.w += (uint64_t)(i % MATRICES) * r->matrix_bytes;
    const uint64_t set_bytes = e.expert_stride * e.n_active;
    if (w >= UP_HOST && w <= DOWN_KEEP) {
        e.wptr = r->hptr + (uint64_t)(i % SETS) * e.n_active * 8;
        e.wstore = w >= UP_KEEP ? r->wstore : 0;
    }
    switch (w) {
    case UP: return mvm_gpu_experts_up(r->g, &e);
    case UP_TILED: /* the kernel of a step with several rows an expert, on the same one */
        e.one_row = 0;
        return mvm_gpu_experts_up(r->g, &e);
    case DOWN: return mvm_gpu_experts_down(r->g, &e);
    case DOWN_TILED:
        e.one_row = 0;
        return mvm_gpu_experts_down(r->g, &e);
    case EXPERTS: return mvm_gpu_experts(r->g, &e);
    case MATVEC: return mvm_gpu_matvec(r->g, (int)e.gate_up, &m);
    case UP_HOST:
    case UP_KEEP: return mvm_gpu_experts_up(r->g, &e);
    case DOWN_HOST:
    case DOWN_KEEP: return mvm_gpu_experts_down(r->g, &e);
    case COPY: return mvm_gpu_upload(r->g, r->slabs, r->host + (i % SETS) * set_bytes, set_bytes);
    }
    return MVM_ERR_INVALID;
}

/* Seconds between two repetitions of `w`: reps queued back to back, after a warm-up. */
static double time_launches(struct rig *r, enum which w, int reps, mvm_status *st)
{
    for (int i = 0; i < SETS && *st == MVM_OK; i++)
        *st = launch(r, w, i);
    if (*st == MVM_OK)
        *st = mvm_gpu_sync(r->g);
    const double t0 = mvm_now_s();
    for (int i = 0; i < reps && *st == MVM_OK; i++)
        *st = launch(r, w, i);
    if (*st == MVM_OK)
        *st = mvm_gpu_sync(r->g);
    return (mvm_now_s() - t0) / reps;
}

static void report(const struct shape *s, const enum mvm_wtype *t, const char *kernel,
                   double secs, double bytes)
{
    char types_name[32];
    snprintf(types_name, sizeof types_name, "%s/%s", mvm_k_wtype_name(t[0]),
             mvm_k_wtype_name(t[1]));
    printf("| %s | %s | %s | %.1f | %.1f |\n", s->name, types_name, kernel, secs * 1e6,
           bytes / secs / 1e9);
    fprintf(stderr, "RESULT gpu_kernel shape=%s types=%s kernel=%s us=%.2f gbps=%.1f\n",
            s->name, types_name, kernel, secs * 1e6, bytes / secs / 1e9);
}

/* The host experts, their address tables and the device slabs, into r (r->e set). */
static mvm_status rig_host(struct rig *r)
{
    const uint32_t k = r->e.n_active;
    const size_t set_bytes = r->e.expert_stride * k;
    mvm_status st = mvm_gpu_host_alloc(r->g, set_bytes * SETS, (void **)&r->host);
    if (st != MVM_OK)
        return st;
    fill_11(r->host, set_bytes * SETS);
    uint64_t addr[SETS * 8 + 8]; /* top_k is at most 8 here */
    if (k > 8)
        return mvm_fail(MVM_ERR_INVALID, "a shape's top_k above 8");
    if ((st = mvm_gpu_alloc(r->g, set_bytes, &r->slabs)) != MVM_OK)
        return st;
    for (uint32_t i = 0; i < SETS * k; i++)
        addr[i] = (uint64_t)(uintptr_t)(r->host + (uint64_t)i * r->e.expert_stride);
    for (uint32_t i = 0; i < k; i++)
        addr[SETS * k + i] = r->slabs + (uint64_t)i * r->e.expert_stride;
    if ((st = mvm_gpu_alloc(r->g, (SETS + 1) * k * 8, &r->hptr)) != MVM_OK)
        return st;
    r->wstore = r->hptr + (uint64_t)SETS * k * 8;
    if ((st = mvm_gpu_upload(r->g, r->hptr, addr, (SETS + 1) * k * 8)) != MVM_OK)
        return st;
    return mvm_gpu_sync(r->g); /* addr is on the stack */
}

/* The device buffers of one shape and type pair, into r; their sizes into the rest. */
static mvm_status rig_up(struct rig *r, const struct shape *s, const enum mvm_wtype *t,
                         uint64_t *up_bytes, uint64_t *down_bytes)
{
    const mvm_k_expert_fmt f = {t[0], t[1], MVM_GLU_SILU, 0};
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), n_groups = s->n_ff / G;
    const uint64_t group = mvm_k_expert_group_bytes(f, s->n_embd);
    const uint64_t stride = (n_groups * group + 255) / 256 * 256;
    *up_bytes = (uint64_t)n_groups * 2 * G * mvm_k_row_bytes(t[0], s->n_embd) * s->top_k;
    *down_bytes = (uint64_t)s->n_embd * mvm_k_row_bytes(t[1], s->n_ff) * s->top_k;
    const uint32_t k = s->top_k;
    const size_t act = mvm_k_act_bytes(t[0], s->n_embd);
    const uint64_t h_stride = (mvm_k_act_bytes(t[1], s->n_ff) + 15) / 16 * 16;
    r->matrix_bytes = (uint64_t)s->n_embd * mvm_k_row_bytes(t[0], s->n_embd);
    r->e = (mvm_g_expert_args){.expert_stride = stride, .act_stride = act,
                               .h_stride = h_stride, .n_embd = s->n_embd,
                               .n_groups = n_groups, .n_active = k, .gate_up = t[0],
                               .down = t[1], .glu = MVM_GLU_SILU, .one_row = 1};
    r->m = (mvm_g_matvec_args){.row_bytes = mvm_k_row_bytes(t[0], s->n_embd),
                               .act_stride = act, .y_stride = s->n_embd, .n_in = s->n_embd,
                               .n_out = s->n_embd, .n_tok = 1, .n_head = 1};
    /* off and cnt: expert e's one row is row e % k; row_tok: every row the token 0 */
    uint32_t *meta = calloc((size_t)SETS * k * 2 + k, sizeof *meta);
    if (!meta)
        return mvm_fail(MVM_ERR_NOMEM, "the rows' tables");
    for (uint32_t e = 0; e < SETS * k; e++)
        meta[e] = e % k, meta[SETS * k + e] = 1;
    mvm_dptr tables = 0;
    mvm_status st = mvm_gpu_alloc(r->g, ((size_t)SETS * k * 2 + k) * 4, &tables);
    if (st == MVM_OK)
        st = mvm_gpu_upload(r->g, tables, meta, ((size_t)SETS * k * 2 + k) * 4);
    free(meta);
    r->e.off = tables, r->e.cnt = tables + SETS * k * 4, r->e.row_tok = tables + SETS * k * 8;
    if (st == MVM_OK)
        st = filled(r->g, (size_t)SETS * k * 4, 1, &r->ids);
    if (st == MVM_OK)
        st = filled(r->g, stride * SETS * k, 0, &r->e.experts);
    if (st == MVM_OK)
        st = filled(r->g, act, 0, &r->e.act);
    if (st == MVM_OK) /* the routing weights: 0x11111111, a tiny float */
        st = filled(r->g, (size_t)k * 4, 0, &r->e.row_w);
    if (st == MVM_OK)
        st = mvm_gpu_alloc(r->g, (size_t)k * h_stride, &r->e.h);
    if (st == MVM_OK) /* up's floats, before their Q8_K or Q8_0 blocks */
        st = mvm_gpu_alloc(r->g, (size_t)k * s->n_ff * 4, &r->e.hf);
    if (st == MVM_OK)
        st = mvm_gpu_alloc(r->g, (size_t)k * s->n_embd * 4, &r->e.out);
    if (st == MVM_OK)
        st = filled(r->g, r->matrix_bytes * MATRICES, 0, &r->m.w);
    if (st == MVM_OK)
        st = mvm_gpu_alloc(r->g, (size_t)s->n_embd * 4, &r->m.y);
    r->m.act = r->e.act;
    return st == MVM_OK ? rig_host(r) : st;
}

static void rig_down(struct rig *r)
{
    mvm_dptr bufs[] = {r->e.off, r->ids, r->e.experts, r->e.act, r->e.row_w, r->e.h,
                       r->e.hf, r->e.out, r->m.w, r->m.y, r->slabs, r->hptr};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            mvm_gpu_free(r->g, bufs[i]);
    mvm_gpu_host_free(r->g, r->host);
}

static int run(mvm_gpu *g, const struct shape *s, const enum mvm_wtype *t, int reps)
{
    struct rig r = {.g = g};
    uint64_t up, down;
    mvm_status st = rig_up(&r, s, t, &up, &down);
    double secs[COPY + 1] = {0};
    for (int w = UP; w <= COPY && st == MVM_OK; w++)
        secs[w] = time_launches(&r, (enum which)w, reps, &st);
    rig_down(&r);
    if (st != MVM_OK)
        return fail(s->name);
    report(s, t, "up", secs[UP], (double)up);
    report(s, t, "up_tiled", secs[UP_TILED], (double)up);
    report(s, t, "down", secs[DOWN], (double)down);
    report(s, t, "down_tiled", secs[DOWN_TILED], (double)down);
    report(s, t, "experts", secs[EXPERTS], (double)(up + down));
    report(s, t, "matvec", secs[MATVEC], (double)r.matrix_bytes);
    report(s, t, "up_host", secs[UP_HOST], (double)up);
    report(s, t, "down_host", secs[DOWN_HOST], (double)down);
    report(s, t, "up_keep", secs[UP_KEEP], (double)up);
    report(s, t, "down_keep", secs[DOWN_KEEP], (double)down);
    report(s, t, "copy", secs[COPY], (double)(r.e.expert_stride * r.e.n_active));
    return 0;
}

int main(int argc, char **argv)
{
    const long reps = argc > 2 ? atol(argv[2]) : 50;
    if (argc < 2 || reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: bench_gpu_experts path/to/libcuda.so.1 [reps 1..100000 (50)]\n");
        return 2;
    }
    mvm_gpu *g = bench_open("bench_gpu_experts", argv[1]);
    if (!g)
        return 1;
    printf("| shape | gate-up/down | kernel | us | GB/s |\n|---|---|---|---:|---:|\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes && rc == 0; i++)
        for (size_t j = 0; j < sizeof types / sizeof *types && rc == 0; j++)
            rc = run(g, &shapes[i], types[j], (int)reps);
    mvm_gpu_close(g);
    return rc;
}
