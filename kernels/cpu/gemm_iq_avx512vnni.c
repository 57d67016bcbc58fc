/*
 * gemm_k (gemm_k_avx512vnni.h) for the lattice-grid types IQ1_S, IQ2_XXS, IQ2_XS, IQ2_S and
 * IQ3_XXS, the entries of gemm_avx512vnni.c's table for them: a file of their own, so that
 * the two halves of the instances compile side by side (one file took 77 s under
 * ASan+UBSan).
 */
#include "kernels/cpu/gemm_k_avx512vnni.h"

#if defined(__x86_64__) || defined(__i386__)

#define GEMM(sfx, type)                                                                            \
    AVX512_TARGET void mvm_k_gemm_vnni_##sfx(const void *w, size_t rb, size_t n_rows,             \
                                             const void *act, size_t as, size_t n_tok, size_t n,   \
                                             float *y, size_t ys, int add)                         \
    {                                                                                              \
        gemm_k(type, w, rb, n_rows, act, as, n_tok, n, y, ys, add);                                \
    }
MVM_K_VNNI_IQ_TYPES(GEMM)
#undef GEMM

#endif
