/*
 * The AVX-512 level (F, BW, VL, DQ): avx512.h's blocks, without VNNI (CPUs before Cascade
 * Lake, and any CPU when MOEVM_CPU_SIMD=avx512 asks for it).
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/avx512.h"

MVM_K_LEVEL(mvm_k_level_avx512, AVX512_TARGET, dotn_float, avx2_dotn_q, avx2_downn_float,
            avx2_downn_q, avx2_dotn_k, avx2_downn_k, avx2_axpy_float, NULL, NULL,
            quantize_act, mvm_k_attn_block_avx512, avx2_kv_row, mvm_k_swiglu_avx2,
            NULL)

#endif
