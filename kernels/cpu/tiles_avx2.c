/*
 * The AVX2 level's multi-row kernels for Q4_K, Q5_K and Q6_K (tiled and row-major) and its gemm
 * table: tiles_avx2.h compiled for it.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/tiles_avx2.h"
#endif
