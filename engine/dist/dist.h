/*
 * The distributed mode (docs/distributed.md; after Prism): `mpirun -n N moevm run ...` spreads
 * a model's experts over N processes (MPI ranks, Open MPI), each holding the experts its
 * placement gives it, so a model whose experts do not fit one machine's memory runs.
 *
 * The first `homes` ranks are home servers: each runs a request stream of its own
 * (tokenizer, attention, routers, sampling and the experts it holds); rank 0, the leader,
 * is always one and decides the placements. The other ranks only serve. In every MoE step a
 * home sends each rank that holds some of the step's other experts one non-blocking message
 * (the rows' experts, tokens and weights, and the tokens' hidden states), computes its own
 * experts meanwhile, and adds the replies: per token, the weighted sum of its rows there.
 * While it waits it answers the other homes' requests.
 *
 * Placement is the place role (policy.h: prism by default) over a cluster this mode
 * measures: the links by ping-pong between every pair of ranks at start, the capacities
 * from --server-mem. Every `period` of its tokens a home sends the leader its step counts
 * and waits for the round; once every home still running has, the leader hands the module
 * the counts per home (Prism's requests arriving at each server); a placement it adopts is
 * carried out at once, each added expert's weights sent by its nearest holder (point-to-
 * point, all transfers in flight together), dropped experts' memory released. Only the
 * chosen holder of an expert computes it: among the ranks that hold it, the one with the
 * smallest round trip from the asking home, ties to the one with the fewest rows of the
 * step so far.
 *
 * Bad input (a placement that cannot hold the model, a module that does not exist, a rank
 * that cannot load the model) is agreed on by every rank: all stop with the failing rank's
 * message, none waits forever.
 *
 * Each rank computes where its space is: on the CPU (host backend), or on its GPU (cuda
 * backend: one device per rank, by default the rank's index among those on its machine),
 * whose residency policies then cache the experts the rank holds, for its own steps and
 * for those it serves. Each rank reads the experts it starts with from its own copy of the
 * model file.
 */
#ifndef MVM_ENGINE_DIST_DIST_H
#define MVM_ENGINE_DIST_DIST_H

#include <stdint.h>

#include "engine/compute/pool.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "policy/cost.h"

typedef struct mvm_dist mvm_dist;
struct mvm_moe;

typedef struct mvm_dist_params {
    const char *place, *place_args; /* the place module; NULL: "prism" */
    const uint64_t *capacity_bytes; /* [ranks] expert memory of each rank */
    uint32_t period;                /* tokens between placements; 0: the first one stays */
    uint32_t homes;                 /* ranks running request streams (0: 1, the leader) */
    uint32_t n_batch;               /* this rank's batch (servers answer the largest) */
    const mvm_machine *machine;     /* the cost model (the expert's compute time) */
} mvm_dist_params;

typedef struct mvm_dist_stats {
    uint32_t ranks, homes, rank;    /* the job's; this process's rank */
    uint64_t rows, remote_rows;     /* (token, expert) rows of this home's steps; remote */
    uint64_t messages;              /* expert requests sent */
    uint64_t bytes_sent, bytes_back;
    double waited_s;                /* this home waiting for replies after its own experts */
    uint32_t placements, migrations; /* rounds (the leader: module calls); adopted changes
                                        after the first */
    uint64_t migrated_bytes;
    const uint32_t *held;           /* [ranks] experts each holds now */
} mvm_dist_stats;

/* 1 when this process was started by mpirun as one of several ranks. */
int mvm_dist_launched(void);
/* Joins the job (MPI_Init). *out is NULL, with MVM_OK, for a process not started by
 * mpirun; MVM_ERR_UNSUPPORTED when it was but this moevm was built without MPI. */
mvm_status mvm_dist_init(mvm_dist **out);
/* Leaves the job (MPI_Finalize), after mvm_dist_stop on the leader; abort_job: ends every
 * rank at once (MPI_Abort), for a rank that failed where the others wait for it. */
void mvm_dist_finish(mvm_dist *d, int abort_job);
uint32_t mvm_dist_rank(const mvm_dist *d);
uint32_t mvm_dist_size(const mvm_dist *d);
/* This rank's index among the job's ranks on its machine (its GPU by default). */
uint32_t mvm_dist_local_rank(const mvm_dist *d);
/* After mvm_dist_plan: the largest batch of any home, which servers answer (a context that
 * serves on a GPU takes batches of that many tokens). */
uint32_t mvm_dist_serve_batch(const mvm_dist *d);

/* Collective: the largest of the ranks' exit codes (a command's checks before the ranks
 * share anything; each rank has printed its own complaint). */
int mvm_dist_agree_rc(mvm_dist *d, int rc);
/* Collective: MVM_OK when `mine` is MVM_OK on every rank; otherwise the status of the lowest
 * failing rank, whose message every rank then has as its last error, as "rank R: ..." (the
 * leader's as it is). */
mvm_status mvm_dist_agree(mvm_dist *d, mvm_status mine);

/* Collective, with the opened model (mvm_model_open or mvm_model_probe) on every rank:
 * measures the links, checks the capacities, makes the first placement on the leader and
 * shares it. *held: [L*E] the experts this rank loads (mvm_model_load_experts), valid until
 * mvm_dist_finish.
 * Agreed (mvm_dist_agree) before it returns. */
mvm_status mvm_dist_plan(mvm_dist *d, const mvm_model *probe, const mvm_dist_params *p,
                         const uint8_t **held);

/* Server ranks: answers the homes with m's experts until the leader stops them: on the
 * pool's threads, or, c not NULL, on context c's GPU (mvm_ctx_expert_rows; batches of
 * mvm_dist_serve_batch tokens). */
mvm_status mvm_dist_serve(mvm_dist *d, mvm_model *m, mvm_pool *pool, mvm_ctx *c);

/* A home: context c (of batches up to n_batch) computes the experts other ranks hold there
 * (forward.h's mvm_ctx_set_elsewhere): each step sends their rows and gathers the replies,
 * answering the other homes' requests meanwhile with m's experts (on the pool, or on c's
 * GPU when c computes on one); after each batch of tokens, when `period` tokens have
 * passed, the placement round. */
mvm_status mvm_dist_attach(mvm_dist *d, mvm_ctx *c, mvm_model *m, mvm_pool *pool,
                           uint32_t n_batch);
/* A home whose stream has ended: serves the others until every home's has, and then the
 * leader stops every rank (idempotent; nothing for a rank that is not a home). */
mvm_status mvm_dist_stop(mvm_dist *d);
void mvm_dist_get_stats(const mvm_dist *d, mvm_dist_stats *out);

#endif
