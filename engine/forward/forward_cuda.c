/*
 * The device backend of the forward pass (forward_impl.h), on engine/compute/gpu.c and the kernels
 * of kernels/cuda, for a model whose expert space is on the GPU (cuda backend).
 *
 * On the device: the non-expert weights (copied at creation, in the file's types), the KV
 * cache, every matrix product, norm and RoPE (forward_cuda_ops.c), attention
 * (forward_cuda_attn.c: grouped-query, or deepseek2's latent attention), the dense blocks
 * before the MoE ones (deepseek2, glm4moe), the shared experts, and the routed experts (gpt-oss's biased ones too), read
 * through their fixed addresses in the expert space. On the host: the token embeddings (a
 * dequantized row per token is uploaded) and each MoE step's host side (moe_step.h): the
 * router's logits and input come back, the routing, the policy modules, observers and
 * predictors run as on the CPU backend, and the step's grouped rows go up; the experts the
 * assign module gives the CPU are computed there from their homes (experts_cpu.h) while the
 * GPU runs its own, and their rows go up before the per-token sum. The arithmetic is the
 * CPU kernels' (the kernels' header says how), so both backends agree to rounding, routing
 * included unless a token's top-k is a near tie. With every expert resident and pinned there
 * is nothing for the host to decide, and a decode token (forward_cuda_route.c) or a prompt
 * batch (forward_cuda_prompt.c) routes on the device instead (moe_routed_here), its steps
 * replayed to the policies after.
 *
 * A step's experts are pinned until its kernels are done, so mvm_moe_end comes after a
 * sync: the next MoE layer's, which waits for its router's logits anyway (and so for every
 * kernel queued before), or the batch's last. The next attention is queued behind the
 * experts while they run, and a decode step waits for the device once a layer.
 * Without HOST_NUMA VMM a step runs in rounds that each fit the budget (moe_step.h), with a
 * sync between rounds: each round's rows land in their own slots of the rows' outputs, and
 * the sum in each token's routing order comes after the last, so the result does not
 * depend on how the step was cut.
 *
 * In the distributed mode (dist.h) a home sends the rows of other ranks' experts once its
 * step has begun, computes its own, ends the step, and only then waits for the replies,
 * which go up and are added to x: while it waits it may serve another home's rows on this
 * same context (mvm_ctx_expert_rows), a step of their own through the same buffers, so
 * nothing of its step may still be needed then. A served step's experts are made
 * resident by the same residency policies; their per-token sums come back to the host.
 *
 * A batch may hold the tokens of several sequences (a server's requests): its products,
 * norms and MoE steps take it whole, so each layer's weights and experts are read once for
 * all of them; the rotary embedding, the KV store and attention take each sequence's run of
 * tokens (forward_cuda_attn.c), with its rows of the cache.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

/* ---- mixture of experts ---------------------------------------------------------------- */

/* Where the rows of a step of nk (token, expert) rows lie in f->rows, and in f->rows_host
 * at the same offsets: off, cnt, then row_tok, tok_rows and row_w packed for nk, then the
 * first round's list (f->list). Returns the host side. */
static uint32_t *lay_rows(struct cuda_fwd *f, size_t nk)
{
    const size_t E = f->m->hp.n_expert;
    f->off = f->rows;
    f->cnt = f->off + E * 4;
    f->row_tok = f->cnt + E * 4;
    f->tok_rows = f->row_tok + nk * 4;
    f->row_w = f->tok_rows + nk * 4;
    f->list = f->row_w + nk * 4;
    f->listed = 0;
    return f->rows_host;
}

/* The first round's experts after the rows in h, where the kernels take all of them (none
 * goes to the tensor cores: expert_launch's split), so that its launches need no upload of
 * their own; the number listed. */
static mvm_status list_round(struct cuda_fwd *f, uint32_t il, uint32_t *h, uint32_t *listed)
{
    const mvm_moe *s = f->moe;
    *listed = 0;
    for (uint32_t i = 0; i < s->n_round; i++) {
        int gemm;
        TRY(mvm_cuda_fwd_gemm_wants_expert(f, il, s->round[i], &gemm));
        if (gemm)
            return MVM_OK;
        h[i] = (uint32_t)s->round[i];
    }
    *listed = s->n_round;
    return MVM_OK;
}

/* The step's grouped rows (moe_step.h) and its first round's list up, in one copy (each
 * upload costs some 20 us of the host's time while the stream runs kernels, pinned or not:
 * bench/gpu/vmm_costs section 4 on an H200; a step made three); a token's rows that are
 * not computed here (another rank's experts, or none: a served step's tokens have fewer
 * than K rows here) read out's zero row, so that the sum adds only this device's. After
 * mvm_moe_begin, which makes the round. */
static mvm_status upload_rows(struct cuda_fwd *f, uint32_t il, uint32_t n)
{
    const mvm_moe *s = f->moe;
    const uint32_t K = f->m->hp.n_expert_used, zero = f->n_batch * K;
    size_t E = f->m->hp.n_expert, nk = (size_t)n * K;
    uint32_t *h = lay_rows(f, nk), *tok_rows = h + 2 * E + nk, listed;
    memset(f->row_far, 0, nk);
    for (uint32_t i = 0; i < s->n_remote; i++) {
        uint32_t e = (uint32_t)s->active[s->n_active + i];
        memset(f->row_far + s->off[e], 1, s->cnt[e]);
    }
    for (size_t r = 0; r < nk; r++) {
        uint32_t row = s->tok_rows[r];
        tok_rows[r] = row == MVM_MOE_NO_ROW || f->row_far[row] ? zero : row;
    }
    memcpy(h, s->off, E * sizeof *h);
    memcpy(h + E, s->cnt, E * sizeof *h);
    memcpy(h + 2 * E, s->row_tok, nk * sizeof *h);
    memcpy(h + 2 * E + 2 * nk, s->row_w, nk * sizeof *h); /* floats, as their bits */
    TRY(list_round(f, il, h + 2 * E + 3 * nk, &listed));
    TRY(mvm_gpu_upload(f->g, f->rows, h, (2 * E + 3 * nk + listed) * sizeof *h));
    f->listed = listed;
    if (f->read_view) /* the kernels read every expert of such a round (expert_launch) */
        mvm_resid_set_read_view(s->resid, listed == s->n_round);
    return MVM_OK;
}

/* Whether the experts of layer il read their input quantized (f->act), not as floats. */
static int experts_quantized(const struct cuda_fwd *f, uint32_t il)
{
    return mvm_k_block_elems(f->m->layers[il].expert_fmt.gate_up) > 1;
}

static mvm_g_expert_args expert_args(const struct cuda_fwd *f, uint32_t il)
{
    const mvm_hparams *hp = &f->m->hp;
    const mvm_layer *L = &f->m->layers[il];
    int q = experts_quantized(f, il);
    return (mvm_g_expert_args){.experts = f->layers[il].experts, .act = q ? f->act : f->xn,
                               .active = f->active, .off = f->off, .cnt = f->cnt,
                               .row_tok = f->row_tok, .row_w = f->row_w, .h = f->h,
                               .hf = f->hf,
                               .out = f->out, .expert_stride = f->expert_stride,
                               .act_stride = q ? f->act_stride : hp->n_embd * sizeof(float),
                               .h_stride = f->h_stride, .n_embd = hp->n_embd,
                               .down_bias = f->layers[il].down_bias,
                               .n_groups = L->expert_groups, .gate_up = L->expert_fmt.gate_up,
                               .down = L->expert_fmt.down, .glu = L->expert_fmt.glu,
                               .mmq = (uint32_t)mvm_cuda_fwd_mmq(f, il)};
}

/* Where the kernels read the n experts of a launch, active_host[from .. from + n): a held
 * miss where its copy lands (device-view) or an expert read at its home in place, at the
 * address mvm_resid_view_addr gives, the others at their own (0); into *wptr, or 0 when
 * every one is at its own. Pinned, at the list's offsets, as the list. */
static mvm_status view_addresses(struct cuda_fwd *f, uint32_t il, uint32_t from, uint32_t n,
                                 mvm_dptr *wptr)
{
    int any = 0;
    for (uint32_t i = from; i < from + n; i++) {
        f->wptr_host[i] = mvm_resid_view_addr(f->moe->resid, il, f->active_host[i]);
        any |= f->wptr_host[i] != 0;
    }
    *wptr = any ? f->wptr + (uint64_t)from * sizeof *f->wptr_host : 0;
    return any ? mvm_gpu_upload(f->g, *wptr, f->wptr_host + from, n * sizeof *f->wptr_host)
               : MVM_OK;
}

/* The rows of the round's experts round[from..to) (moe_step.h), each into its own slot of
 * f->out. Their list goes up from pinned memory at the same offsets as on the device, so
 * that it never waits for the kernels queued before it (an upload from pageable memory may
 * sync the stream, bench/gpu/vmm_costs section 4): a step's launches take disjoint parts,
 * and the next step begins after a sync. */
static mvm_status expert_launch(struct cuda_fwd *f, uint32_t il, uint32_t from, uint32_t to)
{
    const mvm_moe *s = f->moe;
    uint32_t n = 0, n_gemm = 0; /* those the kernels take, and the tensor cores */
    for (uint32_t i = from; i < to; i++) {
        int gemm;
        TRY(mvm_cuda_fwd_gemm_wants_expert(f, il, s->round[i], &gemm));
        if (gemm)
            f->gemm_list[n_gemm++] = s->round[i];
        else
            f->active_host[from + n++] = s->round[i];
    }
    TRY(mvm_cuda_fwd_gemm_experts(f, il, f->gemm_list, n_gemm));
    if (!n)
        return MVM_OK; /* none landed yet, every expert of the step on the CPU, or all taken */
    mvm_g_expert_args a = expert_args(f, il);
    a.n_active = n;
    /* by the step, not by the launch's experts: a row's floats must not depend on which
     * round it ran in (tests/test_forward_gpu.c, test_speculative) */
    a.one_row = f->step_tok == 1;
    if (to <= f->listed) /* sent up with the rows (upload_rows) */
        a.active = f->list + from * sizeof *s->round;
    else {
        a.active = f->active + from * sizeof *s->round;
        TRY(mvm_gpu_upload(f->g, a.active, f->active_host + from, n * sizeof *f->active_host));
    }
    TRY(view_addresses(f, il, from, n, &a.wptr));
    return mvm_gpu_experts(f->g, &a);
}

/* A round whose landed part may be running: waits for the rest to land, then runs it. */
static mvm_status expert_round_rest(struct cuda_fwd *f, uint32_t il)
{
    uint32_t ready = f->moe->n_ready;
    TRY(mvm_moe_hold(f->moe));
    mvm_cuda_fwd_lap(f, MVM_LAP_COPIES);
    return expert_launch(f, il, ready, f->moe->n_round);
}

/* The rows of the experts the assign module gave the CPU, computed from their homes on
 * the thread pool (the router's input is on the host already) while the GPU runs the
 * first round's landed experts and the others' copies land, then sent up into their slots
 * of f->out. Their time, against the cost model's, corrects the model's CPU rate
 * (mvm_resid_note_cpu). */
static mvm_status cpu_experts(struct cuda_fwd *f, uint32_t n)
{
    const mvm_moe *s = f->moe;
    size_t D = f->m->hp.n_embd;
    if (!s->n_cpu) {
        mvm_resid_note_cpu(s->resid, 0, 0);
        return MVM_OK;
    }
    if (!f->cpu)
        TRY(mvm_cpu_experts_create(f->m, f->pool, f->n_batch, &f->cpu));
    if (!f->cpu_rows) /* pinned, each expert's rows at their offset: as expert_launch's list */
        TRY(mvm_gpu_host_alloc(f->g, (size_t)f->n_batch * f->m->hp.n_expert_used * D *
                                         sizeof(float), (void **)&f->cpu_rows));
    const mvm_cost *cost = mvm_resid_cost(s->resid);
    double plan = 0;
    for (uint32_t i = 0; i < s->n_cpu; i++)
        plan += mvm_cost_cpu(cost, s->cnt[s->cpu[i]]);
    mvm_cuda_fwd_lap_cpu_plan(f, plan);
    const double t0 = mvm_now_s();
    mvm_cpu_experts_run(f->cpu, s, f->host, n, s->cpu, s->n_cpu, 1);
    mvm_resid_note_cpu(s->resid, plan, mvm_now_s() - t0);
    for (uint32_t i = 0; i < s->n_cpu; i++) {
        uint32_t e = (uint32_t)s->cpu[i];
        mvm_cpu_experts_rows(f->cpu, s, e, f->cpu_rows);
        TRY(mvm_gpu_upload(f->g, f->out + (uint64_t)s->off[e] * D * sizeof(float),
                           f->cpu_rows + (size_t)s->off[e] * D, s->cnt[e] * D * sizeof(float)));
    }
    return MVM_OK;
}

/* The routed experts' input for layer il's types (f->act), unless they read floats. */
static mvm_status quantize_input(struct cuda_fwd *f, uint32_t il, uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    if (f->xn_experts) { /* the FFN norm's pass quantized it (moe) */
        f->xn_experts = 0;
        return MVM_OK;
    }
    if (!experts_quantized(f, il))
        return MVM_OK;
    return mvm_cuda_fwd_quantize(f, f->m->layers[il].expert_fmt.gate_up, f->xn, hp->n_embd,
                                 hp->n_embd, n, f->act, f->act_stride);
}

/* The routed experts, first part: the first round's landed experts on the GPU and the
 * CPU's share on the threads, while the round's other copies land (DALI's CPU/GPU split:
 * neither side waits for the other's work, nor the CPU for the loads). Where the device
 * waits for the copies (MOEVM_LOAD_WAIT=device), the rest of the round is queued behind
 * them first: holding it waits only for their queueing, and the GPU then computes them as
 * they land while the threads compute theirs, where queued after the CPU's share they
 * started only once it was done. A host that waits for the copies (or SMoE's pass, which
 * reads the landed experts' rows before the rest run: `spec`) takes the rest after it
 * (experts_end). */
static mvm_status experts_begin(struct cuda_fwd *f, uint32_t il, uint32_t n, int spec)
{
    f->step_tok = n;
    f->a16x_ready = 0;
    if (f->load_late && !spec && !f->moe->n_cpu && mvm_resid_orders_on_device(f->moe->resid)) {
        /* MOEVM_LOAD_WAIT=device-late: nothing queued until every copy of the round is
         * queued and mapped, so that the worker's maps meet an idle device (a map and its
         * access grant: 25 us idle, ~120 with a kernel running, vmm_costs section 4); then
         * the whole round in one launch */
        TRY(mvm_moe_hold(f->moe));
        mvm_cuda_fwd_lap(f, MVM_LAP_COPIES);
        TRY(quantize_input(f, il, n));
        TRY(expert_launch(f, il, 0, f->moe->n_round));
        mvm_cuda_fwd_lap(f, MVM_LAP_QUEUE);
        return MVM_OK;
    }
    TRY(quantize_input(f, il, n));
    TRY(expert_launch(f, il, 0, f->moe->n_ready));
    if (!spec && f->moe->n_cpu && mvm_resid_orders_on_device(f->moe->resid))
        TRY(expert_round_rest(f, il));
    mvm_cuda_fwd_lap(f, MVM_LAP_QUEUE);
    mvm_status st = cpu_experts(f, n);
    mvm_cuda_fwd_lap(f, MVM_LAP_CPU);
    return st;
}

/* The rest: the first round's other experts once they have landed, then round by round
 * (each waited for before its experts are unpinned); then every row added to x
 * ([n][n_embd] floats) in each token's routing order. Returns with the step's last round
 * pinned, its kernels maybe still running. */
static mvm_status experts_end(struct cuda_fwd *f, uint32_t il, uint32_t n, mvm_dptr x)
{
    const mvm_hparams *hp = &f->m->hp;
    TRY(expert_round_rest(f, il));
    while (f->moe->n_run + f->moe->n_round < f->moe->n_todo) {
        mvm_cuda_fwd_lap(f, MVM_LAP_QUEUE);
        TRY(mvm_gpu_sync(f->g));
        mvm_cuda_fwd_lap(f, MVM_LAP_DEVICE);
        TRY(mvm_moe_next_round(f->moe));
        f->listed = 0; /* the list sent up was the first round's */
        mvm_resid_set_read_view(f->moe->resid, 0); /* this round's holds: mapped */
        mvm_cuda_fwd_lap(f, MVM_LAP_ASK);
        TRY(expert_launch(f, il, 0, f->moe->n_ready));
        TRY(expert_round_rest(f, il));
    }
    TRY(mvm_moe_next_round(f->moe)); /* nothing left: the last round stays pinned */
    mvm_g_expert_sum_args s = {.x = x, .out = f->out, .tok_rows = f->tok_rows,
                               .n_embd = hp->n_embd, .n_tok = n, .top_k = hp->n_expert_used};
    return mvm_gpu_expert_sum(f->g, 0, &s);
}

/* SMoE's speculative pass (§IV-C; policy/predict_speculative.c), as the CPU's (forward_cpu.c,
 * speculate) computes it, once experts_begin has run: x before the step's experts (spec_x,
 * copied then) plus the rows of the experts that were resident when it began (moe->landed,
 * all of them among the first round's landed ones or the CPU's: computed; the others'
 * rows read out's zero row) and the shared expert's output (mvm_cuda_fwd_ffn_out's, left in
 * tmp and shg for the step to add after its routed experts, as the models do), through layer
 * il+1's attention and FFN norm, down to the host for the forecast, whose copies then queue
 * while the step's other experts are still landing, as the paper's timeline has it. The
 * attention writes layer il+1's KV rows of these positions, which its real pass writes
 * again before any query reads them, and works on spec_x, spec_xn and spec_tmp so that x,
 * xn and tmp stay as they are; its products and the shared expert's quantize into act,
 * which is made the routed experts' input again after. */
static mvm_status speculate(struct cuda_fwd *f, uint32_t il, uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct dev_block *L = &f->layers[il];
    const mvm_moe *s = f->moe;
    const uint32_t D = hp->n_embd, K = hp->n_expert_used, zero = f->n_batch * K;
    for (uint32_t r = 0; r < n * K; r++) {
        uint32_t row = s->tok_rows[r], e = 0;
        while (!(row >= s->off[e] && row < s->off[e] + s->cnt[e]))
            e++; /* the expert whose rows hold it: every row is some expert's */
        f->spec_rows_host[r] = s->landed[e] ? row : zero;
    }
    TRY(mvm_gpu_upload(f->g, f->spec_rows, f->spec_rows_host, (size_t)n * K * 4));
    mvm_g_expert_sum_args a = {.x = f->spec_x, .out = f->out, .tok_rows = f->spec_rows,
                               .n_embd = D, .n_tok = n, .top_k = K};
    TRY(mvm_gpu_expert_sum(f->g, 0, &a));
    if (hp->n_ff_shexp) {
        TRY(mvm_cuda_fwd_ffn_out(f, &L->shexp_w1, &L->shexp_w3, &L->shexp_w2, &L->shexp_gate,
                                 n));
        TRY(mvm_cuda_fwd_add(f, f->spec_x, f->tmp, D, L->shexp_gate.p ? f->shg : 0, D, n));
    }
    mvm_dptr x = f->x, xn = f->xn, tmp = f->tmp;
    f->x = f->spec_x, f->xn = f->spec_xn, f->tmp = f->spec_tmp;
    mvm_status st = mvm_cuda_fwd_attention(f, &f->layers[il + 1], hp->n_dense + il + 1, n);
    f->x = x, f->xn = xn, f->tmp = tmp;
    TRY(st);
    TRY(mvm_cuda_fwd_rmsnorm(f, f->spec_x, f->spec_xn, D, f->layers[il + 1].ffn_norm, D, n));
    TRY(mvm_gpu_download(f->g, f->spec_host, f->spec_xn, (size_t)n * D * sizeof(float)));
    mvm_moe_speculate(f->moe, f->spec_host);
    return quantize_input(f, il, n);
}

/* A begun step's end once its kernels are done: whatever failed (st), the kernels already
 * queued may still read the pinned experts (a failed round pinned nothing, and the end then
 * does nothing). `idle`: the stream was synchronised since they were queued. Returns st,
 * or else the first failure of the two. */
static mvm_status end_step(struct cuda_fwd *f, mvm_status st, int idle)
{
    f->step_open = 0;
    mvm_status synced = idle ? MVM_OK : mvm_gpu_sync(f->g);
    st = st != MVM_OK ? st : synced;
    mvm_status ended = mvm_moe_end(f->moe);
    return st != MVM_OK ? st : ended;
}

/* The step left open by the last MoE layer, ended (see the top): after a sync, or with
 * `idle` once one has come since. */
static mvm_status end_open_step(struct cuda_fwd *f, mvm_status st, int idle)
{
    return f->step_open ? end_step(f, st, idle) : st;
}

/* The other ranks' sums of this step's rows, waited for (the step over: see the top) and
 * added to x; st: the step's status so far, returned unless it is MVM_OK. */
static mvm_status gather(struct cuda_fwd *f, const mvm_elsewhere *e, uint32_t n, mvm_status st)
{
    const uint32_t D = f->m->hp.n_embd;
    memset(f->far, 0, (size_t)n * D * sizeof *f->far);
    mvm_status got = e->gather(e->self, f->moe, f->far, n);
    if (st != MVM_OK || got != MVM_OK)
        return st != MVM_OK ? st : got;
    TRY(mvm_gpu_upload(f->g, f->tmp, f->far, (size_t)n * D * sizeof *f->far));
    return mvm_cuda_fwd_add(f, f->x, f->tmp, D, 0, D, n);
}

/* Layer il's router logits of its n tokens' input (f->xn) into y. */
static mvm_status router_logits(struct cuda_fwd *f, const struct dev_block *L, uint32_t n,
                                mvm_dptr y)
{
    const mvm_hparams *hp = &f->m->hp;
    TRY(mvm_cuda_fwd_matmul(f, &L->router, NULL, f->xn, hp->n_embd, n, y, hp->n_expert));
    if (L->router_bias) /* gpt-oss: the logits biased before the routing */
        TRY(mvm_cuda_fwd_add(f, y, L->router_bias, 0, 0, hp->n_expert, n));
    return MVM_OK;
}

/* A step routed on the device: one decode token's (forward_cuda_route.c), or a prompt
 * batch's with every expert pinned (forward_cuda_prompt.c), its router's logits into the
 * stage; the experts, their sum and the shared expert queued behind it (without a shared
 * expert the sum is left to the next norm of x, in its launch: f->sum_owed). Nothing waits. */
static mvm_status moe_routed_here(struct cuda_fwd *f, uint32_t il, uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct dev_block *L = &f->layers[il];
    lay_rows(f, (size_t)n * hp->n_expert_used);
    mvm_g_expert_args a = expert_args(f, il);
    TRY(router_logits(f, L, n, n == 1 ? mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_LOGITS)
                                      : mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_LOGITS)));
    TRY(n == 1 ? mvm_cuda_fwd_route_token(f, il, &a) : mvm_cuda_fwd_prompt_route(f, il, n, &a));
    TRY(quantize_input(f, il, n));
    TRY(mvm_gpu_experts(f->g, &a));
    if (n == 1)
        TRY(mvm_cuda_fwd_cpu_wait(f, il)); /* and its row, where the sum reads it */
    mvm_g_expert_sum_args s = {.x = f->x, .out = f->out, .tok_rows = f->tok_rows,
                               .n_embd = hp->n_embd, .n_tok = n, .top_k = hp->n_expert_used};
    if (!hp->n_ff_shexp) { /* added by the next norm of x, in the same launch */
        f->owed = s;
        f->sum_owed = 1;
        return MVM_OK;
    }
    TRY(mvm_gpu_expert_sum(f->g, 0, &s));
    /* the shared expert added after the routed experts, as the models do */
    return mvm_cuda_fwd_ffn(f, &L->shexp_w1, &L->shexp_w3, &L->shexp_w2, &L->shexp_gate, n);
}

static mvm_status moe(struct cuda_fwd *f, uint32_t il, uint32_t n, const uint32_t *pos)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct dev_block *L = &f->layers[il];
    uint32_t D = hp->n_embd;
    /* the experts' input quantized in the norm's pass, where the router reads floats (it
     * leaves act as it is) */
    const int qx = experts_quantized(f, il) &&
                   mvm_k_block_elems((enum mvm_wtype)L->router.type) == 1;
    const int t = qx ? (int)f->m->layers[il].expert_fmt.gate_up : -1;
    /* a step routed on the device keeps its router input in the stage, for the host */
    mvm_dptr kept = f->route_here ? mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_HIDDEN) : 0;
    if (f->prompt.on) {
        TRY(mvm_cuda_fwd_prompt_layer(f, il));
        kept = mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_HIDDEN);
    }
    TRY(mvm_cuda_fwd_norm_input(f, L->ffn_norm, t, n, kept));
    f->xn_experts = qx;
    if (f->route_here || f->prompt.on)
        return moe_routed_here(f, il, n);
    TRY(router_logits(f, L, n, f->probs));
    /* both into pinned memory, waited for together: one round trip a layer */
    TRY(mvm_gpu_download_async(f->g, f->host, f->xn, (size_t)n * D * sizeof(float)));
    TRY(mvm_gpu_download_async(f->g, f->probs_host, f->probs,
                               (size_t)n * hp->n_expert * sizeof(float)));
    mvm_cuda_fwd_lap(f, MVM_LAP_QUEUE);
    if (f->step_open) /* the last layer's step, observed while the device computes */
        mvm_moe_observe(f->moe);
    mvm_cuda_fwd_lap(f, MVM_LAP_OBSERVE);
    const mvm_status synced = mvm_gpu_sync(f->g);
    mvm_cuda_fwd_lap(f, MVM_LAP_DEVICE);
    TRY(end_open_step(f, synced, 1)); /* the last layer's kernels are done */
    memcpy(f->moe->probs, f->probs_host, (size_t)n * hp->n_expert * sizeof(float));
    mvm_moe_route(f->moe, il, pos, n, f->host);
    mvm_cuda_fwd_lap(f, MVM_LAP_POLICIES);
    TRY(mvm_moe_begin(f->moe));
    mvm_cuda_fwd_lap(f, MVM_LAP_ASK);
    const int spec = mvm_moe_speculates(f->moe);
    mvm_status st = upload_rows(f, il, n);
    if (st == MVM_OK && spec)
        st = mvm_gpu_copy(f->g, f->spec_x, f->x, (size_t)n * D * sizeof(float));
    const mvm_elsewhere *e = f->moe->elsewhere;
    if (e && st == MVM_OK) /* the other ranks' experts run there meanwhile */
        st = e->send(e->self, f->moe, f->host, n);
    if (st == MVM_OK)
        st = experts_begin(f, il, n, spec);
    if (st == MVM_OK && spec) /* its shared expert's output too: added below */
        st = speculate(f, il, n);
    if (st == MVM_OK)
        st = experts_end(f, il, n, f->x);
    if (st == MVM_OK && hp->n_ff_shexp) /* added after the routed experts, as the models do */
        st = spec ? mvm_cuda_fwd_add_ffn(f, &L->shexp_gate, n)
                  : mvm_cuda_fwd_ffn(f, &L->shexp_w1, &L->shexp_w3, &L->shexp_w2,
                                     &L->shexp_gate, n);
    if (st != MVM_OK || e) { /* ended before serving others' rows (see the top) */
        st = end_step(f, st, 0);
        if (e) /* requests sent are waited for whatever failed here */
            st = gather(f, e, n, st);
        return st;
    }
    f->step_open = 1; /* ended at the next sync */
    return MVM_OK;
}

/* ---- another rank's rows (mvm_ctx_expert_rows) ------------------------------------------ */

static mvm_status cuda_expert_rows(mvm_ctx *ctx, const mvm_expert_rows *r, float *out)
{
    struct cuda_fwd *f = ctx->state;
    TRY(mvm_gpu_use(f->g));
    const uint32_t n = r->n_tok, D = f->m->hp.n_embd;
    const size_t bytes = (size_t)n * D * sizeof(float);
    TRY(mvm_moe_take_rows(f->moe, r->layer, n, r->hidden, r->experts, r->n_exp, r->cnt,
                          r->off, r->row_tok, r->row_w));
    memcpy(f->host, r->hidden, bytes); /* what the CPU's share reads (cpu_experts) */
    TRY(mvm_gpu_upload(f->g, f->xn, r->hidden, bytes));
    f->xn_act = NULL, f->xn_experts = 0;
    TRY(mvm_gpu_zero(f->g, f->tmp, bytes));
    TRY(mvm_moe_begin(f->moe));
    mvm_status st = upload_rows(f, r->layer, n);
    st = st != MVM_OK ? st : experts_begin(f, r->layer, n, 0);
    st = end_step(f, st == MVM_OK ? experts_end(f, r->layer, n, f->tmp) : st, 0);
    return st != MVM_OK ? st : mvm_gpu_download(f->g, out, f->tmp, bytes);
}

/* ---- timing experts (mvm_ctx_time_experts) -------------------------------------------- */

/* The inputs x and the rows of experts e[0..k), each taking all n tokens, to the device. */
static mvm_status experts_rows(struct cuda_fwd *f, const int32_t *e, uint32_t k,
                               const float *x, uint32_t n)
{
    const size_t D = f->m->hp.n_embd, E = f->m->hp.n_expert, nk = (size_t)k * n;
    uint32_t *offcnt = calloc(2 * E + nk, sizeof *offcnt);
    float *row_w = malloc(nk * sizeof *row_w);
    if (!offcnt || !row_w) {
        free(offcnt);
        free(row_w);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for timing experts");
    }
    uint32_t *off = offcnt, *cnt = offcnt + E, *row_tok = offcnt + 2 * E;
    for (uint32_t j = 0; j < k; j++) {
        off[e[j]] = j * n;
        cnt[e[j]] = n;
        for (uint32_t i = 0; i < n; i++)
            row_tok[j * n + i] = i, row_w[j * n + i] = 1.0f;
    }
    lay_rows(f, nk);
    mvm_status st = mvm_gpu_upload(f->g, f->xn, x, n * D * sizeof(float));
    f->xn_act = NULL, f->xn_experts = 0;
    st = st ? st : mvm_gpu_upload(f->g, f->off, off, E * sizeof *off);
    st = st ? st : mvm_gpu_upload(f->g, f->cnt, cnt, E * sizeof *cnt);
    st = st ? st : mvm_gpu_upload(f->g, f->row_tok, row_tok, nk * sizeof *row_tok);
    st = st ? st : mvm_gpu_upload(f->g, f->row_w, row_w, nk * sizeof *row_w);
    st = st ? st : mvm_gpu_upload(f->g, f->active, e, k * sizeof *e);
    free(offcnt);
    free(row_w);
    return st;
}

/* Experts e[0..made) (asked to be resident; the first `pinned` of them pinned) unpinned, and
 * evicted where they were not resident before, whatever failed on the way: the budget is
 * left as found. The first failure is returned. */
static mvm_status release_timed(struct cuda_fwd *f, uint32_t il, const int32_t *e,
                                const uint8_t *was, uint32_t made, uint32_t pinned,
                                mvm_status st)
{
    mvm_space *sp = f->m->space;
    for (uint32_t j = 0; j < made; j++) {
        mvm_status un = j < pinned ? mvm_unpin(sp, il, (uint32_t)e[j]) : MVM_OK;
        st = st ? st : un;
        if (un == MVM_OK && !was[j]) {
            mvm_status ev = mvm_evict(sp, il, (uint32_t)e[j], 0);
            st = st ? st : ev;
        }
    }
    return st;
}

static mvm_status cuda_time_experts(mvm_ctx *ctx, uint32_t il, const int32_t *e, uint32_t k,
                                    const float *x, uint32_t n, double *seconds)
{
    struct cuda_fwd *f = ctx->state;
    TRY(mvm_gpu_use(f->g));
    mvm_space *sp = f->m->space;
    uint8_t *was = calloc(k, 1); /* resident before */
    mvm_status st = was ? experts_rows(f, e, k, x, n)
                        : mvm_fail(MVM_ERR_NOMEM, "out of memory for timing experts");
    uint32_t made = 0, pinned = 0; /* made: asked to be resident (a failed one may be half) */
    while (st == MVM_OK && pinned < k) {
        const uint32_t ex = (uint32_t)e[pinned];
        mvm_residency before;
        st = mvm_expert_residency(sp, il, ex, &before);
        if (st != MVM_OK)
            break;
        was[made++] = before.resident != 0;
        st = mvm_make_resident(sp, il, ex, MVM_ALL_PAGES);
        st = st ? st : mvm_pin(sp, il, ex);
        pinned += st == MVM_OK;
    }
    mvm_g_expert_args a = expert_args(f, il);
    a.n_active = k;
    a.one_row = n == 1;
    st = st ? st : mvm_gpu_sync(f->g);
    double t0 = mvm_now_s();
    if (st == MVM_OK && experts_quantized(f, il))
        st = mvm_cuda_fwd_quantize(f, f->m->layers[il].expert_fmt.gate_up, f->xn,
                                   f->m->hp.n_embd, f->m->hp.n_embd, n, f->act, f->act_stride);
    st = st ? st : mvm_gpu_experts(f->g, &a);
    mvm_status synced = mvm_gpu_sync(f->g); /* whatever failed: nothing still reads it */
    *seconds = mvm_now_s() - t0;
    st = st ? st : synced;
    st = release_timed(f, il, e, was, made, pinned, st);
    free(was);
    return st;
}

/* ---- the whole pass -------------------------------------------------------------------- */

/* f->runs: b's tokens in runs of one sequence's consecutive ones. */
static void split_runs(struct cuda_fwd *f, const mvm_fwd_batch *b)
{
    f->n_runs = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        if (f->n_runs && b->seq[i] == f->runs[f->n_runs - 1].seq)
            f->runs[f->n_runs - 1].n++;
        else
            f->runs[f->n_runs++] = (struct cuda_run){i, 1, b->pos[i], b->seq[i]};
    }
}

/* The batch's blocks, then the final norm of its rows first .. first + nl - 1 and the
 * output products of the first chunk of them (the others: mvm_cuda_fwd_logits_down). */
static mvm_status blocks(struct cuda_fwd *f, const mvm_fwd_batch *b, uint32_t first,
                         uint32_t nl)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t D = hp->n_embd, n = b->n;
    f->sum_owed = 0; /* (a batch that failed may have left one) */
    for (uint32_t blk = 0; blk < hp->n_dense; blk++) {
        TRY(mvm_cuda_fwd_attention(f, &f->dense[blk], blk, n));
        TRY(mvm_cuda_fwd_dense_ffn(f, &f->dense[blk], n));
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        TRY(mvm_cuda_fwd_attention(f, &f->layers[il], hp->n_dense + il, n));
        TRY(moe(f, il, n, b->pos));
    }
    if (!nl)
        return mvm_cuda_fwd_settle_sum(f);
    TRY(mvm_cuda_fwd_rmsnorm(f, f->x + (uint64_t)first * D * sizeof(float), f->xn, D,
                             f->output_norm, D, nl));
    return mvm_cuda_fwd_head(f, 0, nl);
}

/* blocks(), as one CUDA graph where the batch routes on the device and nothing in it waits
 * for the host (forward_cuda_route.c; MOEVM_DEVICE_ROUTING=graph), else launch by launch. */
static mvm_status queue_blocks(struct cuda_fwd *f, const mvm_fwd_batch *b, uint32_t first,
                               uint32_t nl)
{
    if (!f->route_here || f->route_mode != MVM_ROUTE_GRAPH || !mvm_gpu_graphs(f->g))
        return blocks(f, b, first, nl);
    mvm_gpu_record(f->g);
    mvm_status st = blocks(f, b, first, nl);
    if (st != MVM_OK) {
        mvm_gpu_record_drop(f->g);
        return st;
    }
    return mvm_gpu_replay(f->g);
}

/* The batch's layers and its logits; *idle: its last operation waited for the stream. */
static mvm_status eval_batch(struct cuda_fwd *f, const mvm_fwd_batch *b, float *logits,
                             int *idle)
{
    const mvm_model *m = f->m;
    const mvm_hparams *hp = &m->hp;
    const uint32_t D = hp->n_embd, n = b->n;
    split_runs(f, b);
    /* host is pinned: the device reads it in stream order, before the first MoE layer's
     * download writes it, and the host writes it again only after that layer's sync */
    mvm_embed_tokens(m, b->tokens, n, f->host);
    size_t up = (size_t)n * D * sizeof(float);
    if (f->route_here) { /* and its position after its row (mvm_cuda_fwd_pos) ... */
        memcpy(f->host + D, &f->runs[0].pos0, sizeof f->runs[0].pos0);
        up += sizeof f->runs[0].pos0;
    }
    if (f->cpu_split) /* ... and the CPU's words after that, its thread set to serve them */
        TRY(mvm_cuda_fwd_cpu_begin(f, (char *)f->host + up, &up));
    TRY(mvm_gpu_upload(f->g, f->x, f->host, up));
    /* the rows from the first wanted one on (most often the last, or all), then those wanted */
    const uint32_t first = b->n_out ? b->out[0] : n, nl = n - first;
    if (f->route_here) /* a replayed trace's choice, known before the routers run */
        TRY(mvm_cuda_fwd_given(f, b, f->given_host, f->given, &f->route_given));
    const double t0 = mvm_now_s();
    TRY(queue_blocks(f, b, first, nl));
    if (f->route_here) /* the steps' stage, for the policies (forward_cuda_route.c) */
        TRY(mvm_gpu_download_async(f->g, mvm_cuda_fwd_stage_take(f), f->stage,
                                   (size_t)hp->n_layer * f->stage_floats * sizeof(float)));
    if (f->route_budget && f->fill.on) /* and read-through's claims (forward_cuda_fill.c) */
        TRY(mvm_gpu_download_async(f->g, f->fill.claims_host, f->fill.claims,
                                   (1 + (size_t)f->fill.cap) * sizeof(uint32_t)));
    const double t1 = mvm_now_s();
    /* the token before's steps shown to the policies while the device computes this one;
     * its logits are waited for whatever that gives */
    mvm_status st = f->route_here ? mvm_cuda_fwd_route_settle(f) : MVM_OK;
    st = mvm_cuda_fwd_prompt_settle(f, st); /* a prompt's layers, as their stage comes down */
    const double t2 = mvm_now_s();
    mvm_cuda_fwd_lap(f, MVM_LAP_QUEUE);
    const mvm_status got = b->n_out ? mvm_cuda_fwd_logits_down(f, b, first, nl, logits) : MVM_OK;
    *idle = b->n_out && got == MVM_OK; /* after the logits' download */
    mvm_cuda_fwd_lap(f, MVM_LAP_DEVICE);
    if (f->route_here) {
        f->route_time.queue += t1 - t0, f->route_time.policies += t2 - t1;
        f->route_time.wait += mvm_now_s() - t2;
    }
    return st != MVM_OK ? st : got;
}

static mvm_status cuda_eval(mvm_ctx *ctx, const mvm_fwd_batch *b, float *logits)
{
    struct cuda_fwd *f = ctx->state;
    TRY(mvm_gpu_use(f->g));
    int idle = 0;
    const double start = mvm_now_s();
    TRY(mvm_cuda_fwd_route_choose(f, b));
    if (!f->route_here) { /* its policies come after the tokens' before */
        TRY(mvm_cuda_fwd_route_settle(f));
        TRY(mvm_cuda_fwd_route_loads(f));
        if (f->fill.n) /* its steps load on demand: the pool's room is theirs */
            TRY(mvm_cuda_fwd_fill_give_back(f));
        f->route_time.last_end = 0;
        mvm_cuda_fwd_laps_begin(f, b);
        mvm_status st = eval_batch(f, b, logits, &idle);
        st = end_open_step(f, st, idle && st == MVM_OK);
        mvm_cuda_fwd_laps_end(f, st); /* that end: the last step's policies */
        return st;
    }
    mvm_status st = MVM_OK;
    if (f->route_budget) { /* the replay, where it must come first */
        const double t = mvm_now_s();
        st = mvm_cuda_fwd_route_addresses(f);
        const double took = mvm_now_s() - t;
        f->route_time.policies += took, f->route_time.before += took;
    }
    st = st == MVM_OK ? eval_batch(f, b, logits, &idle) : st;
    st = mvm_cuda_fwd_cpu_end(f, st); /* (whatever failed: its thread stops waiting) */
    const double done = mvm_now_s();
    st = mvm_cuda_fwd_route_done(f, b, st, idle && st == MVM_OK);
    const double end = mvm_now_s();
    f->route_time.policies += end - done; /* a replay that could not wait */
    if (f->route_time.last_end)
        f->route_time.between += start - f->route_time.last_end;
    f->route_time.last_end = st == MVM_OK ? end : 0;
    return st;
}

/* Outside a batch a failed replay is also the next batch's failure: the policies missed
 * a token's steps. */
static mvm_status cuda_settle(const mvm_ctx *ctx)
{
    struct cuda_fwd *f = ctx->state;
    TRY(mvm_gpu_use(f->g));
    mvm_status st = mvm_cuda_fwd_route_settle(f);
    st = st != MVM_OK ? st : mvm_cuda_fwd_route_loads(f); /* nothing is queued now */
    return f->replay.failed = st;
}

const struct mvm_fwd_backend mvm_fwd_cuda = {"cuda", mvm_cuda_fwd_create, mvm_cuda_fwd_destroy,
                                             cuda_eval, cuda_settle,
                                             cuda_time_experts, cuda_expert_rows};
