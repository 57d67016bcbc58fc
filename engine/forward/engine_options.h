/*
 * The engine's MOEVM_* options (vmm/options.h has the table they join): its CPU threads
 * and kernels, the KV cache's type, admission into the device cache, whether copies
 * complete in order (repeatable runs), the device pass's profile, when it multiplies on
 * the tensor cores (cuBLAS), and whether decode routes on the device (at a budget too).
 */
#ifndef MVM_ENGINE_FORWARD_ENGINE_OPTIONS_H
#define MVM_ENGINE_FORWARD_ENGINE_OPTIONS_H

#include "vmm/options.h"

/* For mvm_options_register. */
extern const mvm_option_table mvm_engine_options;

extern const mvm_option_desc mvm_opt_threads, mvm_opt_cpu_simd, mvm_opt_kv_type, mvm_opt_admit,
    mvm_opt_deterministic, mvm_opt_prefetch, mvm_opt_gpu_profile, mvm_opt_gemm_rows,
    mvm_opt_gemm_scratch, mvm_opt_gemm_batch, mvm_opt_mmq, mvm_opt_attn_mma,
    mvm_opt_cublas_library,
    mvm_opt_device_routing, mvm_opt_prompt_routing, mvm_opt_budget_routing, mvm_opt_load_wait;
extern const mvm_option_desc mvm_opt_device_cpu;
extern const mvm_option_desc mvm_opt_pack;
extern const mvm_option_desc mvm_opt_slots;
extern const mvm_option_desc mvm_opt_pdl;

#endif
