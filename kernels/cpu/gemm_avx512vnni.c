/*
 * The AVX-512 VNNI level's multi-row kernels (dispatch.h's mvm_k_gemm_fn): the K-quants'
 * and IQ3_S's and IQ1_M's instances of gemm_k (gemm_k_avx512vnni.h has the code and says
 * how it works; gemm_iq_avx512vnni.c the other lattice-grid types'), the
 * 32-element Q types' entries (gemm_q_avx512vnni.c), and the level's table.
 */
#include "kernels/cpu/gemm_k_avx512vnni.h"

#if defined(__x86_64__) || defined(__i386__)

/* The table's entry for one type: fn (gemm_k, or gemm_q_avx512vnni.c's) with it fixed. */
#define GEMM(fn, sfx, type) MVM_K_GEMM_ENTRY(static, AVX512_TARGET, gemm_##sfx, fn, type)
GEMM(gemm_k, q2_K, MVM_W_Q2_K)
GEMM(gemm_k, q3_K, MVM_W_Q3_K)
GEMM(gemm_k, q4_K, MVM_W_Q4_K)
GEMM(gemm_k, q5_K, MVM_W_Q5_K)
GEMM(gemm_k, q6_K, MVM_W_Q6_K)
GEMM(gemm_k, iq4_xs, MVM_W_IQ4_XS)
GEMM(gemm_k, iq3_s, MVM_W_IQ3_S)
GEMM(gemm_k, iq1_m, MVM_W_IQ1_M)

GEMM(mvm_k_gemm_q_vnni, q8_0, MVM_W_Q8_0)
GEMM(mvm_k_gemm_q_vnni, q4_0, MVM_W_Q4_0)
GEMM(mvm_k_gemm_q_vnni, q4_1, MVM_W_Q4_1)
GEMM(mvm_k_gemm_q_vnni, q5_0, MVM_W_Q5_0)
GEMM(mvm_k_gemm_q_vnni, q5_1, MVM_W_Q5_1)
GEMM(mvm_k_gemm_q_vnni, iq4_nl, MVM_W_IQ4_NL)
GEMM(mvm_k_gemm_q_vnni, mxfp4, MVM_W_MXFP4)

const mvm_k_gemm_fn mvm_k_gemm_avx512vnni[MVM_W_COUNT] = {
    [MVM_W_Q8_0] = gemm_q8_0,
    [MVM_W_Q4_0] = gemm_q4_0,
    [MVM_W_Q4_1] = gemm_q4_1,
    [MVM_W_Q5_0] = gemm_q5_0,
    [MVM_W_Q5_1] = gemm_q5_1,
    [MVM_W_IQ4_NL] = gemm_iq4_nl,
    [MVM_W_MXFP4] = gemm_mxfp4,
    [MVM_W_Q2_K] = gemm_q2_K,
    [MVM_W_Q3_K] = gemm_q3_K,
    [MVM_W_Q4_K] = gemm_q4_K,
    [MVM_W_Q5_K] = gemm_q5_K,
    [MVM_W_Q6_K] = gemm_q6_K,
    [MVM_W_IQ4_XS] = gemm_iq4_xs,
    [MVM_W_IQ2_XXS] = mvm_k_gemm_vnni_iq2_xxs,
    [MVM_W_IQ2_XS] = mvm_k_gemm_vnni_iq2_xs,
    [MVM_W_IQ2_S] = mvm_k_gemm_vnni_iq2_s,
    [MVM_W_IQ3_XXS] = mvm_k_gemm_vnni_iq3_xxs,
    [MVM_W_IQ3_S] = gemm_iq3_s,
    [MVM_W_IQ1_S] = mvm_k_gemm_vnni_iq1_s,
    [MVM_W_IQ1_M] = gemm_iq1_m,
};

#endif
