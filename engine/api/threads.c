/* The engine's CPU threads (threads.h). */
#include "engine/api/threads.h"

#include "engine/forward/engine_options.h"
#include "kernels/cpu/kernels.h"
#include "vmm/error.h"
#include "vmm/options.h"
#include "vmm/topo.h"

mvm_status mvm_threads_simd(enum mvm_simd *level)
{
    *level = mvm_k_simd_current();
    mvm_option_value simd;
    mvm_status st = mvm_option_read(&mvm_opt_cpu_simd, &simd);
    if (st != MVM_OK || simd.i == 0)
        return st;
    /* the choice order of MOEVM_CPU_SIMD: auto|avx512vnni|avx512|avxvnni|avx2|dotprod|neon|
     * scalar */
    static const enum mvm_simd levels[] = {MVM_SIMD_SCALAR,  MVM_SIMD_AVX512VNNI, MVM_SIMD_AVX512,
                                           MVM_SIMD_AVXVNNI, MVM_SIMD_AVX2,       MVM_SIMD_DOTPROD,
                                           MVM_SIMD_NEON,    MVM_SIMD_SCALAR};
    if (!mvm_k_simd_has(levels[simd.i]))
        return mvm_fail(MVM_ERR_UNSUPPORTED, "MOEVM_CPU_SIMD=%s: this CPU does not support it "
                        "(best: %s)", mvm_k_simd_name(levels[simd.i]),
                        mvm_k_simd_name(mvm_k_simd_detect()));
    *level = levels[simd.i];
    return MVM_OK;
}

mvm_status mvm_threads_pool(uint32_t threads, mvm_pool **out)
{
    *out = NULL;
    mvm_topo topo;
    mvm_status st = mvm_topo_probe(NULL, &topo);
    if (st != MVM_OK)
        return mvm_fail_prefix(st, "probing the topology");
    enum mvm_simd level;
    mvm_option_value env_threads;
    if ((st = mvm_threads_simd(&level)) != MVM_OK ||
        (st = mvm_option_read(&mvm_opt_threads, &env_threads)) != MVM_OK)
        return st;
    mvm_k_simd_use(level); /* one mvm_threads_simd found this CPU has */
    /* 0: one per core of the topology's, which follows the GPU's once the space is made
     * (mvm_model_load_experts) */
    int n = threads ? (int)threads : env_threads.i > 0 ? (int)env_threads.i : 0;
    return mvm_pool_create(n, &topo, out);
}
