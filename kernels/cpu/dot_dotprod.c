/*
 * The 64-bit ARM level with ARMv8.2's int8 dot product (SDOT: Neoverse N1, V1 and V2, Apple's
 * M cores): neon.h's kernels with neon_dot one instruction. SDOT gives the same integers as
 * the widening multiplies and pairwise adds of the neon level, so every result is bitwise
 * that level's (test_kernels checks it). Compiled for ARMv8.2 with SDOT as a whole (neon.h
 * says why); the level's table is only used once simd.c has seen the CPU has SDOT.
 */
#include "kernels/cpu/dispatch.h"

#if defined(__aarch64__)
#ifndef __ARM_FEATURE_DOTPROD
#error "dot_dotprod.c is compiled with -march=armv8.2-a+dotprod (CMakeLists.txt)"
#endif
#define MVM_K_DOTPROD 1
#include "kernels/cpu/neon.h"

MVM_K_LEVEL(mvm_k_level_dotprod, , neon_dotn_float, neon_dotn_blocks,
            neon_downn_float, neon_downn_blocks, neon_dotn_blocks, neon_downn_blocks,
            neon_axpy_float, NULL, NULL, NULL, NULL, NULL, NULL, NULL)

#endif
