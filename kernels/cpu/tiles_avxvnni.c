/*
 * The AVX-VNNI level's multi-row kernels for Q4_K, Q5_K and Q6_K (tiled and row-major) and its
 * gemm table: tiles_avx2.h compiled for it, with vpdpbusd (dot_avxvnni.c).
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define MVM_K_AVXVNNI 1 /* avx2.h: the AVX-VNNI level's target and products */
#include "kernels/cpu/tiles_avx2.h"
#endif
