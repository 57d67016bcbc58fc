/*
 * The AVX2 level's multi-row kernel for the 32-element Q types (Q8_0, Q4_0, ...): gemm_q_avx2.h
 * compiled for it.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/gemm_q_avx2.h"
#endif
