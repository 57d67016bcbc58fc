/*
 * The engine's CPU threads as every front end sets them up: MOEVM_CPU_SIMD applied, and a
 * pool of `threads` (0: MOEVM_THREADS, else one per core: of every node until a space on a
 * GPU is made, then near that GPU, mvm_model_load_experts) pinned by the topology.
 */
#ifndef MVM_ENGINE_API_THREADS_H
#define MVM_ENGINE_API_THREADS_H

#include "engine/compute/pool.h"
#include "kernels/cpu/kernels.h"

/* The CPU kernels' SIMD level MOEVM_CPU_SIMD asks for (auto: the one in use, by default the
 * best this CPU has), in *level; MVM_ERR_UNSUPPORTED when it names one this CPU lacks (the
 * message says the best it has), MVM_ERR_OPTION for a malformed option. Selects nothing:
 * mvm_threads_pool does, and `moevm info` reports it. */
mvm_status mvm_threads_simd(enum mvm_simd *level);

/* MVM_ERR_UNSUPPORTED when MOEVM_CPU_SIMD names a level this CPU lacks (the message says
 * the best it has), MVM_ERR_OPTION for a malformed option, the topology's or the pool's
 * errors. */
mvm_status mvm_threads_pool(uint32_t threads, mvm_pool **out);

#endif
