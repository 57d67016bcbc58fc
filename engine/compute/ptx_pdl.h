/*
 * The device kernels' PTX made ready for programmatic dependent launch (MOEVM_PDL;
 * engine/compute/gpu.c, gpu_graph.c). Private to engine/compute.
 */
#ifndef MVM_ENGINE_COMPUTE_PTX_PDL_H
#define MVM_ENGINE_COMPUTE_PTX_PDL_H

#include <stddef.h>

#include "vmm/error.h"

/* A copy of the PTX module ptx for compute capability 9.0 (its `.target` raised to sm_90
 * where it was lower), every kernel (`.entry`) starting with griddepcontrol.launch_dependents
 * and griddepcontrol.wait; *entries: the kernels patched. MVM_ERR_INVALID when the text is
 * not what nvcc writes (no `.target`, a PTX ISA older than 7.8, a kernel without a body),
 * MVM_ERR_NOMEM; *out is then NULL. The caller frees *out. */
mvm_status mvm_ptx_pdl(const char *ptx, char **out, size_t *entries);

#endif
