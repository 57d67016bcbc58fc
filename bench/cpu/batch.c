/*
 * bench_cpu_batch: what continuous batching buys a server on the CPU. S sequences decode T
 * tokens each, two ways, in turns on the same loaded model and context (three rounds, the
 * best of each way kept, as these machines are noisy):
 *   one by one  each sequence's token evaluated alone (mvm_ctx_eval), as `moevm serve` did
 *               before it batched: every weight read S times a step;
 *   batched     the S tokens in one pass (mvm_ctx_eval_batch): each weight read once a step,
 *               each expert the tokens share run once for all of them.
 * Decode is bound by reading the weights, so the batched pass should approach S times the
 * aggregate tokens/s until the experts the tokens do not share, and the attention, dominate.
 * Prints a RESULT line (docs/perf/cpu.md).
 *
 * usage: bench_cpu_batch MODEL.gguf [threads (0: the topology's cores)] [sequences (4)]
 *                        [decode steps a round (16)]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/cpu/bench_util.h"
#include "engine/compute/pool.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "engine/plan/plan.h"
#include "vmm/error.h"
#include "vmm/topo.h"

#define PROMPT 16 /* each sequence's prompt before decoding */

static int32_t token(uint64_t *rng, uint32_t n_vocab)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((*rng >> 33) % n_vocab);
}

/* T steps of S tokens, one sequence at a time or batched; seconds. */
static double decode(mvm_ctx *c, uint32_t S, uint32_t T, int batched, uint64_t *rng,
                     uint32_t n_vocab, mvm_engine_token *t, float *logits)
{
    double t0 = mvm_bench_wall_s();
    for (uint32_t step = 0; step < T; step++) {
        for (uint32_t s = 0; s < S; s++)
            t[s] = (mvm_engine_token){token(rng, n_vocab), s, 1};
        mvm_status st = MVM_OK;
        if (batched)
            st = mvm_ctx_eval_batch(c, t, S, logits);
        for (uint32_t s = 0; !batched && s < S && st == MVM_OK; s++)
            if ((st = mvm_ctx_select_seq(c, s)) == MVM_OK)
                st = mvm_ctx_eval(c, &t[s].id, 1, logits + (size_t)s * n_vocab, 0);
        if (st != MVM_OK) {
            fprintf(stderr, "bench_cpu_batch: %s\n", mvm_last_error());
            exit(1);
        }
    }
    return mvm_bench_wall_s() - t0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [threads] [sequences] [decode steps]\n", argv[0]);
        return 2;
    }
    mvm_topo topo;
    mvm_topo_probe(NULL, &topo);
    const int threads = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : topo.n_cores;
    const uint32_t S = argc > 3 && atoi(argv[3]) > 0 ? (uint32_t)atoi(argv[3]) : 4;
    const uint32_t T = argc > 4 && atoi(argv[4]) > 0 ? (uint32_t)atoi(argv[4]) : 16;
    const int rounds = 3;
    mvm_pool *pool;
    mvm_model *m;
    mvm_ctx *c;
    mvm_space_desc d;
    mvm_ctx_policies pol = {.n_seq = S};
    if (mvm_pool_create(threads, &topo, &pool) != MVM_OK || mvm_space_desc_init(&d) != MVM_OK ||
        mvm_model_load(argv[1], &(mvm_load_args){.desc = &d, .pool = pool}, &m) != MVM_OK ||
        mvm_ctx_create(m, pool, PROMPT + 2 * rounds * T, S > 32 ? S : 32, &pol, &c) != MVM_OK) {
        fprintf(stderr, "bench_cpu_batch: %s\n", mvm_last_error());
        return 1;
    }
    const uint32_t V = m->hp.n_vocab;
    mvm_engine_token *t = malloc((S > PROMPT ? S : PROMPT) * sizeof *t);
    float *logits = malloc((size_t)S * V * sizeof *logits);
    uint64_t rng = 12345;
    for (uint32_t s = 0; s < S; s++) { /* the prompts */
        for (uint32_t i = 0; i < PROMPT; i++)
            t[i] = (mvm_engine_token){token(&rng, V), s, i == PROMPT - 1};
        if (mvm_ctx_eval_batch(c, t, PROMPT, logits) != MVM_OK) {
            fprintf(stderr, "bench_cpu_batch: %s\n", mvm_last_error());
            return 1;
        }
    }
    double best[2] = {1e30, 1e30};
    printf("model %s, %d threads, %u sequences, %u decode steps a round\n", argv[1], threads, S,
           T);
    for (int r = 0; r < rounds; r++)
        for (int batched = 0; batched < 2; batched++) {
            double sec = decode(c, S, T, batched, &rng, V, t, logits);
            best[batched] = sec < best[batched] ? sec : best[batched];
            printf("round %d %-10s %8.2f tok/s (aggregate)\n", r, batched ? "batched" : "one by one",
                   S * T / sec);
        }
    const double one = S * T / best[0], all = S * T / best[1];
    printf("best: one by one %.2f tok/s, batched %.2f tok/s: %.2fx\n", one, all, all / one);
    printf("RESULT bench=cpu_batch sequences=%u threads=%d one_by_one_tok_s=%.2f "
           "batched_tok_s=%.2f ratio=%.3f\n", S, threads, one, all, all / one);
    free(t), free(logits);
    mvm_ctx_free(c);
    mvm_model_free(m);
    mvm_pool_destroy(pool);
    return 0;
}
