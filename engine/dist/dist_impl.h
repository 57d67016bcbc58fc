/*
 * The distributed mode's insides (dist.h), shared by its MPI files: dist_mpi.c (joining, the
 * links, placements and migrations), dist_home.c (a home's steps and placement rounds) and
 * dist_serve.c (computing other ranks' experts, and every rank's handling of messages).
 *
 * Every message is bytes on MPI_COMM_WORLD:
 *
 *   home -> holder, TAG_OP:  u32 {op, a, b, c} and the op's body
 *     OP_EXPERTS  a = layer, b = n_tok, c = n_exp; u32 epoch (the home's placement);
 *                 {u32 expert, u32 rows} x n_exp; {u32 token, f32 weight} x rows, grouped
 *                 by expert in that order; f32 hidden[n_tok][n_embd]
 *   home -> leader, TAG_OP:
 *     OP_COUNTS   a = L*E; f64 the home's step counts since it last sent them [L*E]: it has
 *                 reached the end of a period and waits for the round's OP_MIGRATE
 *     OP_DONE     the same body: the home's request stream has ended; it only serves now
 *   leader -> every rank, TAG_OP:
 *     OP_MIGRATE  a = n_moves; {u32 expert (l*E+e), u32 from, u32 to} x n_moves;
 *                 u8 placement[ranks][L*E], the new one (no moves: a round that changed
 *                 nothing, sent only to the homes waiting for it)
 *     OP_STOP     every home's stream has ended
 *   holder -> home, TAG_REPLY (to OP_EXPERTS): u32 {status, n_tok}; f32 [n_tok][n_embd],
 *                 each token's weighted sum of its rows there
 *   holder -> receiver, TAG_WEIGHTS: an expert's packed weights, home to home
 *
 * Placement rounds keep migrations simple: the leader decides a round only once every home
 * still running has finished a step and reported, so no request is in flight while weights
 * move. A placement that changes something is a new epoch. MPI orders messages only between
 * one pair of ranks, so a home that has applied the leader's OP_MIGRATE can ask a holder that
 * has not received its own yet: the request carries the home's epoch, and a holder behind it
 * applies the leader's OP_MIGRATE first (dist_serve.c). Only the main thread calls MPI
 * (MPI_THREAD_FUNNELED).
 */
#ifndef MVM_ENGINE_DIST_DIST_IMPL_H
#define MVM_ENGINE_DIST_DIST_IMPL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/dist/dist.h"
#include "engine/forward/experts_cpu.h"
#include "engine/forward/moe_step.h"
#include "policy/policy.h"

enum { TAG_OP = 1, TAG_REPLY, TAG_WEIGHTS, TAG_PING };
enum { OP_EXPERTS = 1, OP_MIGRATE, OP_STOP, OP_COUNTS, OP_DONE };

/* A holder's part of this rank's step under way. */
struct peer {
    uint8_t *req, *rep;
    size_t req_cap, rep_cap;
    uint32_t n_tok, n_exp, rows;
    int32_t *tok_of;            /* [n_batch] the token's index in the request, or -1 */
    uint32_t *toks;             /* [n_batch] the request's tokens */
    MPI_Request r[2];           /* the request's send, the reply's receive */
};

/* What computes the requests of other ranks here: the CPU (xcpu), or a context's GPU. */
struct server {
    mvm_model *m;
    mvm_ctx *ctx;
    mvm_cpu_experts *xcpu;
    mvm_moe s;                  /* only the rows: what mvm_cpu_experts reads */
    int32_t *experts;
    float *out;
    uint8_t *reply;
    uint8_t *msg;               /* the message being handled */
    uint8_t *held;              /* a request set aside while its epoch's OP_MIGRATE comes */
    size_t msg_cap, held_cap;
    uint32_t n_batch, K;
};

struct mvm_dist {
    int rank, size, local_rank; /* local: among the ranks on this machine */
    uint32_t homes;             /* ranks 0 .. homes-1 run request streams */
    uint32_t L, E, D, LE, n_batch;
    uint32_t serve_batch;       /* the largest batch of any home: what a server answers */
    uint64_t slot_bytes;        /* the model's expert_bytes: one slot of a rank's memory */
    uint64_t *cap;              /* [S] bytes of experts per rank */
    double *rtt, *bw;           /* [S][S] measured */
    uint8_t *placement;         /* [S][L*E] */
    uint8_t *next;              /* [S][L*E] a candidate */
    uint8_t *remote;            /* [L*E] held elsewhere, not here */
    double *freq;               /* [S][L*E] the step counts since the module's last call
                                   (a home other than the leader: its own row only) */
    uint8_t *reported, *done;   /* [S] the leader's view of the homes in this round */
    const mvm_place_ops *ops;
    void *self;
    mvm_cost cost;
    uint32_t period, since;
    uint32_t epoch;             /* placements applied that changed something */
    double last_place;          /* mvm_now_s() of the module's last call */
    struct peer *peer;          /* [S] */
    uint32_t *load;             /* [S] rows of the step so far */
    uint32_t *choice;           /* [E] the rank computing each remote expert of the step */
    uint32_t *held_count;       /* [S] */
    int ended;                  /* this home's stream has ended (mvm_dist_stop) */
    int stop, released;         /* set by OP_STOP; by the round's OP_MIGRATE */
    struct server *srv;         /* NULL until this rank serves */
    const mvm_model *model;     /* a home's, from mvm_dist_attach */
    mvm_dist_stats stats;
    mvm_elsewhere elsewhere;    /* a home's context computes remote experts through it */
};

int mvm_dist_grow(uint8_t **p, size_t *cap, size_t n);
int mvm_dist_fits_int(size_t n);

/* dist_mpi.c: the placement of an OP_MIGRATE's moves carried out here (every rank). */
mvm_status mvm_dist_migrate(mvm_dist *d, const mvm_model *m, const uint32_t *moves,
                            uint32_t n_moves, const uint8_t *next);
/* The leader: asks the module for a placement from d->freq and carries out what it adopts,
 * releasing the homes that wait for the round. */
mvm_status mvm_dist_round(mvm_dist *d, const mvm_model *m);

/* dist_serve.c: this rank's server for m's experts, made once; it computes on c where c
 * serves rows (a context on a GPU), else on the CPU threads from the homes (c may be NULL). */
mvm_status mvm_dist_server(mvm_dist *d, mvm_model *m, mvm_pool *pool, mvm_ctx *c);
void mvm_dist_server_free(mvm_dist *d);
/* Handles one TAG_OP message if one has come (block: waits for one); *op: what it was, 0
 * for none. */
mvm_status mvm_dist_take(mvm_dist *d, int block, uint32_t *op);

#endif
