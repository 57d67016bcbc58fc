/*
 * The AVX-VNNI level: the AVX2 level (dot_avx2.c) with AVX-VNNI's vpdpbusd on 256-bit
 * vectors in place of maddubs, madd and add, for Intel's cores that have it without AVX-512
 * (Alder Lake, Raptor Lake, Meteor Lake, Arrow Lake, Lunar Lake; the E-core Xeons). The
 * decode kernels are avx2.h's blocks compiled with the fused products (the 32-element Q
 * types'; the K-quants keep maddubs and madd there, avx2.h says why), the prompt kernels
 * tiles_avx2.h's and gemm_q_avx2.h's (tiles_avxvnni.c, gemm_q_avxvnni.c), whose int8 products
 * gain the most; attention and the element-wise functions are the AVX2 level's own. Every
 * result is bitwise the AVX2 level's: the fused products give the same integers
 * (test_kernels' test_levels_agree).
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_AVXVNNI 1
#include "kernels/cpu/avx2.h"

MVM_K_LEVEL(mvm_k_level_avxvnni, AVX2_TARGET, avx2_dotn_float, avx2_dotn_q, avx2_downn_float,
            avx2_downn_q, avx2_dotn_k, avx2_downn_k, avx2_axpy_float, mvm_k_gemm_avxvnni,
            mvm_k_tiles_avxvnni, avx2_quantize_act, mvm_k_attn_block_avx2, avx2_kv_row,
            mvm_k_swiglu_avx2, mvm_k_softmax_sink_avx2)

#endif
