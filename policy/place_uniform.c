/*
 * place "uniform": Prism's Uniform baseline (§IV-A: "random even EP split, as in Megatron-LM":
 * 2 of Mixtral's 8 experts per layer per GPU, 16 of DeepSeek-V2-Lite's 64). Every expert lives
 * on exactly one server, each server gets an equal share of every layer, and the split never
 * changes.
 *
 * Reading: the paper's split is random; here it is round-robin, expert e of layer l on
 * server (l·E + e) mod S, which is as even and, where expert ids carry no meaning, as
 * unbiased, and is the same on every run. Round-robin rather than a contiguous split
 * because synthetic traces make low ids popular: a contiguous split would pile every
 * layer's hot experts onto server 0. A server whose slots (mvm_cluster_slots)
 * are full passes its turn to the next server with room (s+1, s+2, ... mod S), so capacity
 * is respected and heterogeneous servers still take equal shares as far as they can.
 * Memory beyond the share stays unused: the baseline does not replicate (Redundance and
 * Prism do).
 *
 * Calls: the first (the incoming placement holds nothing) writes the split and returns its
 * bytes, L·E·expert_bytes; every later call returns 0 and leaves the placement alone (the
 * split is static: "all except Uniform and Redundance use Prism's migration"). A cluster
 * whose slots cannot hold every expert once, or with more servers than `servers`, gets no
 * placement (0, nothing written); the simulator checks capacity before calling.
 *
 * Parameter: servers (the largest cluster accepted, whole, 1..65536), default 256 — the
 * module's scratch is sized at create (policy code does not allocate later) and Prism's
 * simulation goes up to 256 GPUs.
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct uniform {
    uint32_t L, E, max_servers;
    uint64_t expert_bytes;
    uint64_t *used;      /* [max_servers] slots taken on each server */
} uniform;

static void uniform_destroy(void *self)
{
    uniform *u = self;
    if (!u)
        return;
    free(u->used);
    free(u);
}

static mvm_status uniform_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"servers", NULL};
    const char *me = "place uniform";
    const mvm_pshape *sh = init->shape;
    double servers;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "servers", 256, &servers);
    if (st != MVM_OK)
        return st;
    if (!(servers >= 1 && servers <= 65536 && servers == floor(servers)))
        return mvm_fail(MVM_ERR_INVALID, "%s: servers=%g is not a whole number in [1, 65536]",
                        me, servers);
    if (!sh->n_layers || !sh->n_experts || !sh->expert_bytes)
        return mvm_fail(MVM_ERR_INVALID, "%s: a shape needs layers, experts and expert bytes",
                        me);
    uniform *u = calloc(1, sizeof *u);
    if (!u)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    u->L = sh->n_layers;
    u->E = sh->n_experts;
    u->expert_bytes = sh->expert_bytes;
    u->max_servers = (uint32_t)servers;
    u->used = calloc(u->max_servers, sizeof *u->used);
    if (!u->used) {
        uniform_destroy(u);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = u;
    return MVM_OK;
}

static int is_empty(const uint8_t *placement, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (placement[i])
            return 0;
    return 1;
}

static uint64_t uniform_place(void *self, const mvm_cluster *c, const double *freq,
                              uint8_t *placement)
{
    uniform *u = self;
    const uint32_t S = c->n_servers, n = u->L * u->E;
    (void)freq; /* the split ignores the workload */
    if (S == 0 || S > u->max_servers || !is_empty(placement, (size_t)S * n))
        return 0;
    uint64_t slots = 0;
    for (uint32_t s = 0; s < S; s++) {
        slots += mvm_cluster_slots(c, s, u->expert_bytes);
        u->used[s] = 0;
    }
    if (slots < n)
        return 0; /* not every expert fits once */
    for (uint32_t x = 0; x < n; x++) {
        uint32_t s = x % S;
        while (u->used[s] >= mvm_cluster_slots(c, s, u->expert_bytes))
            s = (s + 1) % S; /* terminates: fewer than `slots` experts are placed so far */
        placement[(size_t)s * n + x] = 1;
        u->used[s]++;
    }
    return (uint64_t)n * u->expert_bytes;
}

const mvm_place_ops mvm_place_uniform = {
    .name = "uniform",
    .about = "Prism's Uniform baseline: static even EP split, expert e of layer l "
             "on server (l*E+e) mod S (paper: random), one copy each, capacity respected",
    .create = uniform_create,
    .destroy = uniform_destroy,
    .place = uniform_place,
};
