/*
 * gemm_k (gemm_k_avx512vnni.h) for the lattice-grid types IQ1_S, IQ2_XXS, IQ2_XS, IQ2_S and
 * IQ3_XXS, the entries of gemm_avx512vnni.c's table for them: a file of their own, so that
 * the two halves of the instances compile side by side (one file took 77 s under
 * ASan+UBSan).
 */
#include "kernels/cpu/gemm_k_avx512vnni.h"

#if defined(__x86_64__) || defined(__i386__)

#define GEMM(sfx, type) MVM_K_GEMM_ENTRY(, AVX512_TARGET, mvm_k_gemm_vnni_##sfx, gemm_k, type)
MVM_K_VNNI_IQ_TYPES(GEMM)
#undef GEMM

#endif
