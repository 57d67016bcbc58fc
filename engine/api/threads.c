/* The engine's CPU threads (threads.h). */
#include "engine/api/threads.h"

#include "engine/forward/engine_options.h"
#include "kernels/cpu/kernels.h"
#include "vmm/error.h"
#include "vmm/options.h"
#include "vmm/topo.h"

mvm_status mvm_threads_pool(uint32_t threads, mvm_pool **out)
{
    *out = NULL;
    mvm_topo topo;
    mvm_status st = mvm_topo_probe(NULL, &topo);
    if (st != MVM_OK)
        return mvm_fail_prefix(st, "probing the topology");
    mvm_option_value simd, env_threads;
    if ((st = mvm_option_read(&mvm_opt_cpu_simd, &simd)) != MVM_OK ||
        (st = mvm_option_read(&mvm_opt_threads, &env_threads)) != MVM_OK)
        return st;
    /* the choice order of MOEVM_CPU_SIMD: auto|avx512vnni|avx512|avx2|dotprod|neon|scalar */
    static const enum mvm_simd levels[] = {MVM_SIMD_SCALAR, MVM_SIMD_AVX512VNNI, MVM_SIMD_AVX512,
                                           MVM_SIMD_AVX2,   MVM_SIMD_DOTPROD,    MVM_SIMD_NEON,
                                           MVM_SIMD_SCALAR};
    if (simd.i > 0 && mvm_k_simd_use(levels[simd.i]) != 0)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "MOEVM_CPU_SIMD=%s: this CPU does not support it "
                        "(best: %s)", mvm_k_simd_name(levels[simd.i]),
                        mvm_k_simd_name(mvm_k_simd_detect()));
    /* 0: one per core of the topology's, which follows the GPU's once the space is made
     * (mvm_model_load_experts) */
    int n = threads ? (int)threads : env_threads.i > 0 ? (int)env_threads.i : 0;
    return mvm_pool_create(n, &topo, out);
}
