/*
 * The AVX-512 level with VNNI (Cascade Lake, Ice Lake and later Xeons, Zen 4 and later):
 * avx512.h's blocks with the integer dot products fused, vpdpbusd for maddubs + madd and
 * vpdpwssd for madd + add. They give the same integers, so every result is bitwise the AVX-512
 * level's (test_kernels checks it).
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_VNNI 1
#include "kernels/cpu/avx512.h"

MVM_K_LEVEL(mvm_k_level_avx512vnni, AVX512_TARGET, dotn_float, avx2_dotn_q, avx2_downn_float,
            avx2_downn_q, avx2_dotn_k, avx2_downn_k, avx2_axpy_float,
            mvm_k_gemm_avx512vnni, mvm_k_tiles_avx512vnni, quantize_act,
            mvm_k_attn_block_avx512, avx2_kv_row, mvm_k_swiglu_avx2,
            NULL)

#endif
