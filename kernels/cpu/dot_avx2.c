/*
 * The AVX2 level: the building blocks of avx2.h for every weight type.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx2.h"

MVM_K_LEVEL(mvm_k_level_avx2, AVX2_TARGET, avx2_dotn_float, avx2_dotn_q, avx2_downn_float,
            avx2_downn_q, avx2_dotn_k, avx2_downn_k, avx2_axpy_float, mvm_k_gemm_avx2,
            mvm_k_tiles_avx2, avx2_quantize_act, mvm_k_attn_block_avx2, avx2_kv_row,
            mvm_k_swiglu_avx2, mvm_k_softmax_sink_avx2)

#endif
