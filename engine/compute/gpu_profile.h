/*
 * MOEVM_GPU_PROFILE=on (engine/forward/engine_options.c): where a device pass's time goes.
 * Each kernel launch and each copy on the compute stream is timed between two events, the
 * times are summed per kind whenever the stream is synchronised, and at the end a table
 * says, per kernel and copy kind, how many and how long, and how much of the wall time the
 * device was busy at all: a decode step that keeps the device busy a third of the time is
 * bound by the host (routing, launches, round trips), not by its kernels.
 */
#ifndef MVM_ENGINE_COMPUTE_GPU_PROFILE_H
#define MVM_ENGINE_COMPUTE_GPU_PROFILE_H

#include <stdio.h>

#include "vmm/backend_cuda.h"

typedef struct mvm_gpu_prof mvm_gpu_prof;

/* n_kinds kinds of work named names[0..n_kinds). */
mvm_status mvm_gpu_prof_create(const struct cu_api *cu, CUstream stream, int n_kinds,
                               const char *const *names, mvm_gpu_prof **out);
void mvm_gpu_prof_free(mvm_gpu_prof *p);
/* Around one queued operation of `kind`: before it is queued, and after. */
mvm_status mvm_gpu_prof_begin(mvm_gpu_prof *p, int kind);
mvm_status mvm_gpu_prof_end(mvm_gpu_prof *p);
/* After the stream was synchronised (the host waited `waited` seconds for it): the
 * operations' times are read and summed. */
mvm_status mvm_gpu_prof_synced(mvm_gpu_prof *p, double waited);
/* The table, most time first. */
void mvm_gpu_prof_report(const mvm_gpu_prof *p, FILE *f);

#endif
