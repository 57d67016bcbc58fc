/*
 * The routed experts of an MoE step on the CPU threads: every expert on the CPU backend
 * (forward_cpu.c), the experts the assign module gives the CPU on the device pass
 * (forward_cuda.c), which reads them from their host homes while the GPU computes the rest.
 *
 * The work is split by (expert, channel-group range), the units given to threads by cost
 * (the number of tokens per expert varies), each thread writing its share of an expert's
 * rows into a slot of its own, added up at the end in thread order so no two threads ever
 * add into the same floats. The units' threads follow from the routing and the thread
 * count alone, so results are bitwise reproducible for a given thread count.
 */
#ifndef MVM_ENGINE_FORWARD_EXPERTS_CPU_H
#define MVM_ENGINE_FORWARD_EXPERTS_CPU_H

#include <stdint.h>

#include "engine/compute/pool.h"
#include "engine/forward/moe_step.h"

typedef struct mvm_cpu_experts mvm_cpu_experts;

/* Scratch for steps of up to n_batch tokens: min(threads, 4) x n_batch x top_k rows of
 * n_embd floats (experts_cpu.c). */
mvm_status mvm_cpu_experts_create(const mvm_model *m, mvm_pool *pool, uint32_t n_batch,
                                  mvm_cpu_experts **out);
void mvm_cpu_experts_free(mvm_cpu_experts *x);

/* Computes the rows (moe_step.h) of experts[0..n_experts) of the step s, whose n tokens'
 * expert input is xn ([n][n_embd] floats), into per-thread partial outputs. Each expert's
 * weights are read at its fixed address, or from its host home when from_home. */
void mvm_cpu_experts_run(mvm_cpu_experts *x, const mvm_moe *s, const float *xn, uint32_t n,
                         const int32_t *experts, uint32_t n_experts, int from_home);
/* The same run in two parts (SMoE's speculative pass reads the first one's results): the
 * experts e with take[e] set, then the rest. The work units and their threads are the
 * whole run's, so the results are bitwise those of mvm_cpu_experts_run. take: [n_expert],
 * the caller's, until run_rest. */
void mvm_cpu_experts_run_first(mvm_cpu_experts *x, const mvm_moe *s, const float *xn,
                               uint32_t n, const int32_t *experts, uint32_t n_experts,
                               int from_home, const uint8_t *take);
void mvm_cpu_experts_run_rest(mvm_cpu_experts *x);
/* After a run: xs[token] += every row of the token that ran, for n tokens. */
void mvm_cpu_experts_add(mvm_cpu_experts *x, const mvm_moe *s, float *xs, uint32_t n);
/* The same for the rows of the experts e with take[e] set only, in the same order (so with
 * every expert taken, the same floats). */
void mvm_cpu_experts_add_some(mvm_cpu_experts *x, const mvm_moe *s, float *xs, uint32_t n,
                              const uint8_t *take);
/* After a run: rows[r] = the output of row r, for the rows of expert e ([n_embd] floats
 * each, at rows + r * n_embd). */
void mvm_cpu_experts_rows(mvm_cpu_experts *x, const mvm_moe *s, uint32_t e, float *rows);

#endif
