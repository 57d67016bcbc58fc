/*
 * The AVX-VNNI level's multi-row kernel for the 32-element Q types (Q8_0, Q4_0, ...):
 * gemm_q_avx2.h compiled for it, with vpdpbusd (dot_avxvnni.c).
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_AVXVNNI 1 /* avx2.h: the AVX-VNNI level's target and products */
#include "kernels/cpu/gemm_q_avx2.h"
#endif
